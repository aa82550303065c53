package coordinator

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/internal/jsontext"

	"github.com/leasehold/leasehold/fence"
	"github.com/oklog/ulid/v2"
)

// State is where a job stands. The names are River's.
type State string

// The job states.
const (
	StateScheduled State = "scheduled"
	StateAvailable State = "available"
	StateRunning   State = "running"
	StateRetryable State = "retryable"
	StateCompleted State = "completed"
	StateDiscarded State = "discarded"
	StateCancelled State = "cancelled"
)

// States lists every state in lifecycle order.
var States = []State{StateScheduled, StateAvailable, StateRunning, StateRetryable, StateCompleted, StateDiscarded, StateCancelled}

// Final reports whether no further transition leaves s (except deletion by
// retention or an operator's retry).
func (s State) Final() bool {
	return s == StateCompleted || s == StateDiscarded || s == StateCancelled
}

// ParseState validates a state name.
func ParseState(s string) (State, error) {
	for _, st := range States {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("%w: unknown state %q (want one of scheduled, available, running, retryable, completed, discarded, cancelled)", ErrInvalid, s)
}

// AttemptError records why one attempt did not succeed.
type AttemptError struct {
	At      time.Time `json:"at"`
	Attempt int       `json:"attempt"`
	Error   string    `json:"error"`
	// Trace is the stack of a recovered panic, if the attempt panicked.
	Trace string `json:"trace,omitempty"`
}

// Job is a job's record: what is stored, and what the API returns.
type Job struct {
	ID          string          `json:"id"`
	Kind        string          `json:"kind"`
	Queue       string          `json:"queue"`
	Priority    int             `json:"priority"`
	State       State           `json:"state"`
	Payload     json.RawMessage `json:"payload"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts"`
	Errors      []AttemptError  `json:"errors"`
	CreatedAt   time.Time       `json:"created_at"`
	ScheduledAt time.Time       `json:"scheduled_at"`
	AttemptedAt *time.Time      `json:"attempted_at"`
	FinalizedAt *time.Time      `json:"finalized_at"`
	// Owner and Token name the run that holds the job (running) or that
	// finished it (final states).
	Owner      string          `json:"owner"`
	Token      fence.Token     `json:"token"`
	Checkpoint json.RawMessage `json:"checkpoint"`
	Result     json.RawMessage `json:"result"`

	// TimeoutMS bounds one attempt; 0 means the worker's default.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// UniqueKey, if set, made the enqueue idempotent while the job lives.
	UniqueKey string `json:"unique_key,omitempty"`
	// Rescues counts runs lost with their daemon (lease expiry, crash);
	// they do not use up attempts.
	Rescues int `json:"rescues,omitempty"`
	// CancelRequested is true while a cancel request waits for the
	// running owner. It is read from its own key, never stored here.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// UniqueStates are the final states in which the job keeps holding
	// its unique key (see UniqueOpts.ByState); in every other final state
	// the key is released.
	UniqueStates []State `json:"unique_states,omitempty"`
	// Metadata is free-form JSON for middleware and hooks (trace ids,
	// tenants); leasehold does not interpret it.
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// Timeout returns the per-attempt timeout, zero if unset.
func (j *Job) Timeout() time.Duration { return time.Duration(j.TimeoutMS) * time.Millisecond }

// IdempotencyKey is the job id and the attempt number: the same for every
// run of one attempt (a run lost with its daemon runs again under the same
// attempt), different for the attempt after a failure. Handlers use it to
// make side effects replay-safe against a downstream service that
// remembers each key's answer, failures included, so that a retry after a
// failure is not answered with the failure remembered. A side effect that
// must happen at most once over all attempts (a charge that may have gone
// through before its attempt failed or timed out) is keyed on the job's
// ID instead, the same for every attempt.
func (j *Job) IdempotencyKey() string { return fmt.Sprintf("%s-%d", j.ID, j.Attempt) }

// MaxScheduledAt is the latest time a job can be scheduled for: the store
// keys times as Unix nanoseconds, which end in April 2262.
var MaxScheduledAt = time.Date(2262, time.January, 1, 0, 0, 0, 0, time.UTC)

// checkScheduledAt refuses a time after MaxScheduledAt.
func checkScheduledAt(t time.Time) error {
	if t.After(MaxScheduledAt) {
		return fmt.Errorf("%w: scheduled time %s is after %s, the latest a job can be scheduled for: use an earlier time or a shorter delay", ErrInvalid, t.UTC().Format(time.RFC3339Nano), MaxScheduledAt.Format(time.RFC3339))
	}
	return nil
}

// checkJSONText refuses b, the JSON of what (a payload, a checkpoint...),
// unless it is JSON text that every reader takes: json.Valid takes invalid
// UTF-8 and surrogates escaped alone inside strings, which, stored raw,
// would make the job's JSON unreadable to strict clients.
func checkJSONText(what string, b []byte) error {
	if !json.Valid(b) {
		return fmt.Errorf("%w: %s is not valid JSON", ErrInvalid, what)
	}
	if !utf8.Valid(b) {
		return fmt.Errorf("%w: %s is not valid UTF-8: JSON text is UTF-8; encode binary data (base64 or hex, say)", ErrInvalid, what)
	}
	if at := jsontext.LoneSurrogate(b); at >= 0 {
		return fmt.Errorf("%w: %s", ErrInvalid, jsontext.LoneSurrogateError(what, at))
	}
	return nil
}

// Defaults and limits of an enqueue.
const (
	DefaultQueue       = "default"
	DefaultPriority    = 1
	DefaultMaxAttempts = 25
	// DefaultMaxPayloadBytes is the default limit on a job's payload.
	DefaultMaxPayloadBytes = 1 << 20
	// MaxMetadataBytes is the limit on a job's metadata.
	MaxMetadataBytes = 64 << 10
	maxNameLen       = 128
	maxUniqueKeyLen  = 256
)

// EnqueueParams describe one job to insert.
type EnqueueParams struct {
	Kind    string
	Payload json.RawMessage // default {}
	// Queue defaults to DefaultQueue.
	Queue string
	// Priority is 1 (first) to 4 (last); 0 means DefaultPriority.
	Priority int
	// ScheduledAt, if in the future, makes the job scheduled until then.
	ScheduledAt time.Time
	// MaxAttempts defaults to DefaultMaxAttempts.
	MaxAttempts int
	// Timeout bounds each attempt; 0 means the worker's default. It is
	// stored in whole milliseconds: at least 1ms.
	Timeout time.Duration
	// UniqueKey, if set, returns the live job with that key instead of
	// inserting a second one.
	UniqueKey string
	// Unique, if set, derives the unique key from the job itself (kind,
	// and optionally payload, queue and period) and says in which states
	// an existing job counts. See UniqueOpts.
	Unique *UniqueOpts
	// Metadata is free-form JSON stored with the job (default none).
	Metadata json.RawMessage
}

// EnqueueResult is the outcome of one EnqueueParams.
type EnqueueResult struct {
	Job *Job
	// Existed is true when a live job with the same unique key was
	// returned instead of inserting a new one.
	Existed bool
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)

func validName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty: give it 1-%d characters of letters, digits and _ . : -", ErrInvalid, what, maxNameLen)
	}
	if len(s) > maxNameLen || !nameRE.MatchString(s) {
		return fmt.Errorf("%w: %s %q must be 1-%d characters of letters, digits and _ . : -", ErrInvalid, what, truncate(s, 40), maxNameLen)
	}
	return nil
}

// ValidateID checks that id is a job id (a ULID).
func ValidateID(id string) error {
	if len(id) != ulid.EncodedSize {
		return fmt.Errorf("%w: bad job id %q: want a 26-character ULID", ErrInvalid, truncate(id, 40))
	}
	if _, err := ulid.ParseStrict(id); err != nil {
		return fmt.Errorf("%w: bad job id %q: a ULID is 26 characters of 0-9 and A-Z without I, L, O and U, the first 0 to 7", ErrInvalid, truncate(id, 40))
	}
	if up := strings.ToUpper(id); up != id {
		// ParseStrict reads either case; ids are stored upper-case.
		return fmt.Errorf("%w: bad job id %q: job ids are upper-case (%s)", ErrInvalid, id, up)
	}
	return nil
}

// ValidateQueue checks a queue name.
func ValidateQueue(q string) error {
	if q == "." || q == ".." {
		// Valid characters, but a path segment: /v1/queues/../pause
		// would name another path.
		return fmt.Errorf("%w: queue %q would be read as a path: use letters or digits in it", ErrInvalid, q)
	}
	return validName("queue", q)
}

// ValidateKind checks a kind name.
func ValidateKind(k string) error { return validName("kind", k) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// normalize validates p and fills defaults. It never writes.
func (p *EnqueueParams) normalize(maxPayload int) error {
	if err := ValidateKind(p.Kind); err != nil {
		return err
	}
	if p.Queue == "" {
		p.Queue = DefaultQueue
	}
	if err := ValidateQueue(p.Queue); err != nil {
		return err
	}
	if p.Priority == 0 {
		p.Priority = DefaultPriority
	}
	if p.Priority < 1 || p.Priority > 4 {
		return fmt.Errorf("%w: priority %d out of range: want 1 (first) to 4 (last)", ErrInvalid, p.Priority)
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.MaxAttempts < 1 {
		return fmt.Errorf("%w: max attempts %d: want at least 1", ErrInvalid, p.MaxAttempts)
	}
	if p.Timeout < 0 {
		return fmt.Errorf("%w: timeout %s is negative: use a positive duration, or 0 for the worker's default", ErrInvalid, p.Timeout)
	}
	if p.Timeout > 0 && p.Timeout < time.Millisecond {
		// Stored in whole milliseconds: it would become "no timeout".
		return fmt.Errorf("%w: timeout %s is not a duration of at least 1ms: use e.g. 30s, or 0 for the worker's default", ErrInvalid, p.Timeout)
	}
	if err := checkScheduledAt(p.ScheduledAt); err != nil {
		return err
	}
	if len(p.Payload) == 0 {
		p.Payload = json.RawMessage("{}")
	}
	if len(p.Payload) > maxPayload {
		return fmt.Errorf("%w: payload is %d bytes, over the %d-byte limit: use a smaller payload (store large data elsewhere and pass a reference)", ErrInvalid, len(p.Payload), maxPayload)
	}
	if err := checkJSONText("payload", p.Payload); err != nil {
		return err
	}
	if len(p.UniqueKey) > maxUniqueKeyLen {
		return fmt.Errorf("%w: unique key is %d bytes, over the %d-byte limit: use a shorter key (a digest of a long one, say)", ErrInvalid, len(p.UniqueKey), maxUniqueKeyLen)
	}
	if !utf8.ValidString(p.UniqueKey) {
		// The record is JSON, which would store the key changed: the job
		// could never free it.
		return fmt.Errorf("%w: unique key is not valid UTF-8: encode a binary key (hex or base64, say)", ErrInvalid)
	}
	if len(p.Metadata) > 0 {
		if err := checkJSONText("metadata", p.Metadata); err != nil {
			return err
		}
	}
	if len(p.Metadata) > MaxMetadataBytes {
		return fmt.Errorf("%w: metadata is %d bytes, over the %d-byte limit: send less (it is for small labels; data the handler needs goes in the payload)", ErrInvalid, len(p.Metadata), MaxMetadataBytes)
	}
	return p.Unique.validate()
}
