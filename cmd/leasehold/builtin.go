package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/apiserver"
	"github.com/leasehold/leasehold/worker"
)

// kindSpec is a kind the daemon runs: its handler and, optionally, a check
// of its payload that the API applies at enqueue, so that a payload the
// handler could never accept is refused before anything is written.
type kindSpec struct {
	handler  worker.Handler
	validate apiserver.PayloadCheck // nil: any JSON
}

// payloadChecks returns the payload checks of kinds, as the API takes
// them.
func payloadChecks(kinds map[string]kindSpec) map[string]apiserver.PayloadCheck {
	out := make(map[string]apiserver.PayloadCheck, len(kinds))
	for k, s := range kinds {
		out[k] = s.validate
	}
	return out
}

// maxSleep bounds the sleep kind's {"ms":N}.
const maxSleep = 24 * time.Hour

type sleepArgs struct {
	MS *int64 `json:"ms"`
}

type failArgs struct {
	Times *int `json:"times"`
}

// builtinKinds are the kinds every daemon runs:
//
//	sleep {"ms":N}    sleeps N milliseconds, honouring cancellation
//	echo  any JSON    completes with the payload as its result
//	fail  {"times":N} fails the first N attempts, then succeeds; without
//	                  times it always fails
func builtinKinds() map[string]kindSpec {
	return map[string]kindSpec{
		"sleep": {handler: sleepHandler, validate: func(p json.RawMessage) error {
			_, err := decodeSleep(p)
			return err
		}},
		"echo": {handler: echoHandler},
		"fail": {handler: failHandler, validate: func(p json.RawMessage) error {
			_, err := decodeFail(p)
			return err
		}},
	}
}

// decodeStrict decodes a payload that must be a JSON object (or absent)
// with only the fields of v.
func decodeStrict(p json.RawMessage, v any) error {
	p = bytes.TrimSpace(p)
	if len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return nil
	}
	if p[0] != '{' {
		return errors.New("payload must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te) && te.Field != "":
		return fmt.Errorf("%s is a JSON %s, want %s", te.Field, te.Value, apiserver.JSONTypeName(te.Type.String()))
	}
	return errors.New(strings.TrimPrefix(err.Error(), "json: "))
}

func decodeSleep(p json.RawMessage) (time.Duration, error) {
	var a sleepArgs
	if err := decodeStrict(p, &a); err != nil {
		return 0, fmt.Errorf(`%v: sleep takes {"ms":N}`, err)
	}
	if a.MS == nil {
		return 0, nil
	}
	d := time.Duration(*a.MS) * time.Millisecond
	if *a.MS < 0 || *a.MS > maxSleep.Milliseconds() {
		return 0, fmt.Errorf(`ms %d is out of range: sleep takes {"ms":N} with N from 0 to %d`, *a.MS, maxSleep.Milliseconds())
	}
	return d, nil
}

func decodeFail(p json.RawMessage) (times int, err error) {
	var a failArgs
	if err := decodeStrict(p, &a); err != nil {
		return 0, fmt.Errorf(`%v: fail takes {"times":N} or {}`, err)
	}
	if a.Times == nil {
		return -1, nil
	}
	if *a.Times < 0 {
		return 0, fmt.Errorf(`times %d is negative: fail takes {"times":N} with N >= 0`, *a.Times)
	}
	return *a.Times, nil
}

func sleepHandler(ctx context.Context, j *worker.Job) error {
	d, err := decodeSleep(j.Payload)
	if err != nil {
		return worker.JobCancel(err) // no retry can fix the payload
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return j.SetResult(map[string]int64{"slept_ms": d.Milliseconds()})
	case <-ctx.Done():
		return fmt.Errorf("sleep interrupted: %w", context.Cause(ctx))
	}
}

func echoHandler(_ context.Context, j *worker.Job) error {
	p := j.Payload
	if len(p) == 0 {
		p = json.RawMessage("{}")
	}
	return j.SetResult(p)
}

func failHandler(_ context.Context, j *worker.Job) error {
	times, err := decodeFail(j.Payload)
	if err != nil {
		return worker.JobCancel(err)
	}
	switch {
	case times < 0:
		return fmt.Errorf(`fail: attempt %d fails as asked (pass {"times":N} to succeed after N failures)`, j.Attempt)
	case j.Attempt <= times:
		return fmt.Errorf("fail: attempt %d of %d planned failures", j.Attempt, times)
	}
	return j.SetResult(map[string]int{"failed_attempts": times})
}
