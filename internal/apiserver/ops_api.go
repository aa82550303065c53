package apiserver

// Operations of the HTTP API beyond enqueue and inspect (issue 6):
//
//	POST   /v1/jobs/{id}/retry      200 {"job":JOB}  discarded or cancelled
//	                                (or scheduled/retryable) job available now;
//	                                ?state=S: only if it is in state S (409)
//	DELETE /v1/jobs/{id}            200 {"job":JOB}  the finished job deleted
//	POST   /v1/jobs/cancel          body {"state":"","kind":"","queue":""}
//	    200 {"cancelled":N,"cancel_requested":M}  bulk cancel by filter (at
//	                                least one field, or "all":true)
//	GET    /v1/queues               200 {"queues":[QUEUE,...]}  every queue
//	GET    /v1/queues?limit=&after= 200 {"queues":[QUEUE,...],"next":"CURSOR"}
//	                                a page in name order (limit 1 to 10000,
//	                                100 if only after is given); next is
//	                                absent on the last page; pass it as after=
//	POST   /v1/queues/{queue}/pause     ?force=true for a queue not known yet
//	POST   /v1/queues/{queue}/resume
//	PUT    /v1/queues/{queue}/limit     body {"limit":N} (0: none), ?force=true
//	    200 {"queue":CONFIG,"changed":bool}
//	GET    /v1/periodic             200 {"periodic":[SCHEDULE,...]}
//
// A retry or delete in a state where it makes no sense is 409 with a
// message saying why and what to do; an unknown queue is 400.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/leasehold/leasehold/coordinator"
)

// UniqueRequest is CreateRequest.unique.
type UniqueRequest struct {
	ByArgs   bool     `json:"by_args,omitempty"`
	ByQueue  bool     `json:"by_queue,omitempty"`
	ByPeriod string   `json:"by_period,omitempty"`
	ByState  []string `json:"by_state,omitempty"`
}

// apply sets p.Unique from u (nil: nothing).
func (u *UniqueRequest) apply(p *coordinator.EnqueueParams) error {
	if u == nil {
		return nil
	}
	o := &coordinator.UniqueOpts{ByArgs: u.ByArgs, ByQueue: u.ByQueue}
	if u.ByPeriod != "" {
		d, err := time.ParseDuration(u.ByPeriod)
		if err != nil || d <= 0 {
			return badRequest("unique.by_period %q is not a positive duration: use e.g. 1h or 24h", TruncateString(u.ByPeriod, 40))
		}
		o.ByPeriod = d
	}
	for _, s := range u.ByState {
		st, err := coordinator.ParseState(s)
		if err != nil || !st.Final() {
			return badRequest("unique.by_state %q: want %s (unfinished jobs always count as duplicates)", TruncateString(s, 40), UniqueStates)
		}
		o.ByState = append(o.ByState, st)
	}
	p.Unique = o
	return nil
}

// UniqueStates are the states unique.by_state (--unique-states) takes:
// the finished ones.
const UniqueStates = "completed, discarded or cancelled"

// CancelManyRequest is the body of POST /v1/jobs/cancel.
type CancelManyRequest struct {
	State string `json:"state,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Queue string `json:"queue,omitempty"`
	All   bool   `json:"all,omitempty"`
}

// CancelManyErrorResponse is the error answer of POST /v1/jobs/cancel
// once the cancel has begun: beside the error, the jobs it cancelled (and
// asked to stop) before it failed, as the coordinator returns them.
type CancelManyErrorResponse struct {
	Error string `json:"error"`
	coordinator.CancelManyResult
}

// cancelManyBody is the body of POST /v1/jobs/cancel.
var cancelManyBody = bodySpec{
	limit:   64 << 10,
	fields:  "the fields are " + jsonFields(CancelManyRequest{}) + " (filters of the jobs to cancel)",
	example: `{"queue":"default"} or {"all":true}`,
	tooBig:  "send only the filters, such as {\"queue\":\"default\"}",
}

// QueuesResponse answers GET /v1/queues.
type QueuesResponse struct {
	Queues []coordinator.QueueInfo `json:"queues"`
	// Next is the after of the following page, when the request asked
	// for a page (limit or after) and more queues follow.
	Next string `json:"next,omitempty"`
}

// QueueResponse answers the changes of one queue (pause, resume, limit).
type QueueResponse struct {
	Queue   coordinator.QueueConfig `json:"queue"`
	Changed bool                    `json:"changed"`
}

// LimitRequest is the body of PUT /v1/queues/{queue}/limit.
type LimitRequest struct {
	Limit *int `json:"limit"`
}

// limitBody is the body of PUT /v1/queues/{queue}/limit.
var limitBody = bodySpec{
	limit:   4 << 10,
	fields:  "the field is limit",
	example: `{"limit":10} (0: no limit)`,
	tooBig:  "send only {\"limit\":N}",
}

// PeriodicResponse answers GET /v1/periodic.
type PeriodicResponse struct {
	Periodic []coordinator.PeriodicState `json:"periodic"`
	// Leader is the worker that leads maintenance, and so enqueues its
	// own schedules ("": none leads now).
	Leader string `json:"leader,omitempty"`
	// Declared maps each schedule name that live daemons declare to
	// their worker ids (registrations of builds from before 2026-12-05
	// declare none).
	Declared map[string][]string `json:"declared,omitempty"`
}

func (a *Handler) routeOps() {
	a.mux.HandleFunc("POST /v1/jobs/{id}/retry", a.retryJob)
	a.mux.HandleFunc("DELETE /v1/jobs/{id}", a.jobOp(a.cfg.Coord.Delete))
	a.mux.HandleFunc("POST /v1/jobs/cancel", a.cancelMany)
	a.mux.HandleFunc("GET /v1/queues", a.listQueues)
	a.mux.HandleFunc("POST /v1/queues/{queue}/pause", a.pauseQueue)
	a.mux.HandleFunc("POST /v1/queues/{queue}/resume", a.resumeQueue)
	a.mux.HandleFunc("PUT /v1/queues/{queue}/limit", a.limitQueue)
	a.mux.HandleFunc("GET /v1/periodic", a.listPeriodic)
}

// wrongState answers a coordinator ErrWrongState as 409 with its reason.
func (a *Handler) failOp(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, coordinator.ErrWrongState) {
		msg := strings.TrimPrefix(CleanCoordError(err), strings.TrimPrefix(coordinator.ErrWrongState.Error(), "coordinator: ")+": ")
		WriteError(w, http.StatusConflict, msg)
		return
	}
	a.fail(w, r, err)
}

// jobOp serves an operation on one job (POST .../retry, DELETE .../ID):
// it answers with the job as the operation left it.
func (a *Handler) jobOp(op func(context.Context, string) (*coordinator.Job, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := cmp.Or(checkQuery(r), checkNoBody(r)); err != nil {
			a.fail(w, r, err)
			return
		}
		j, err := op(r.Context(), r.PathValue("id"))
		if err != nil {
			a.failOp(w, r, err)
			return
		}
		WriteJSON(w, http.StatusOK, JobResponse{Job: j})
	}
}

// retryJob serves POST /v1/jobs/{id}/retry[?state=S]: with state, only
// if the job is in state S (what the caller saw: the dashboard's buttons
// send it), 409 otherwise.
func (a *Handler) retryJob(w http.ResponseWriter, r *http.Request) {
	if err := cmp.Or(checkQuery(r, "state"), checkNoBody(r)); err != nil {
		a.fail(w, r, err)
		return
	}
	var from coordinator.State
	if s := r.URL.Query().Get("state"); s != "" {
		st, err := coordinator.ParseState(s)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		from = st
	}
	j, err := a.cfg.Coord.RetryFrom(r.Context(), r.PathValue("id"), from)
	if err != nil {
		a.failOp(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, JobResponse{Job: j})
}

func (a *Handler) cancelMany(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		a.fail(w, r, err)
		return
	}
	var req CancelManyRequest
	if err := decodeBody(w, r, cancelManyBody, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	filtered := req.State != "" || req.Kind != "" || req.Queue != ""
	switch {
	case !filtered && !req.All:
		a.fail(w, r, badRequest(`no filter: set "state", "kind" or "queue", or "all":true to cancel every unfinished job`))
		return
	case filtered && req.All:
		// As the CLI's --all: which one was meant is not for the API to
		// guess, and the wrong guess cancels too much or too little.
		a.fail(w, r, badRequest(`"all":true cancels every unfinished job: send it alone, or the filters without it`))
		return
	}
	res, err := a.cfg.Coord.CancelMany(r.Context(), coordinator.CancelFilter{State: coordinator.State(req.State), Kind: req.Kind, Queue: req.Queue})
	if err != nil {
		a.failWith(w, r, err, func(msg string) any { return CancelManyErrorResponse{Error: msg, CancelManyResult: res} })
		return
	}
	WriteJSON(w, http.StatusOK, res)
}

func (a *Handler) listQueues(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r, "limit", "after"); err != nil {
		a.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	if q.Has("limit") || q.Has("after") {
		// A page, as GET /v1/jobs pages; without either, every queue,
		// as before paging came (2026-12-06).
		p := coordinator.QueueListParams{After: q.Get("after")}
		var ok bool
		if p.Limit, ok = a.pageLimit(w, r); !ok {
			return
		}
		page, err := a.cfg.Coord.QueuePage(r.Context(), p)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		WriteJSON(w, http.StatusOK, QueuesResponse{Queues: page.Queues, Next: page.Next})
		return
	}
	qs, err := a.cfg.Coord.Queues(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, QueuesResponse{Queues: qs})
}

// knownQueue refuses a queue nobody knows (no daemon serves it, it has no
// jobs available and no configuration) unless force: most likely a typo.
// Scheduled and retryable jobs are not counted (their index is not kept
// by queue), so force is also the way to configure a queue whose jobs are
// all waiting for their time.
func (a *Handler) knownQueue(r *http.Request, q string, force bool, hint string) error {
	if err := coordinator.ValidateQueue(q); err != nil {
		return err
	}
	if force {
		return nil
	}
	if ok, err := a.cfg.Coord.KnownQueue(r.Context(), q); ok || err != nil {
		return err
	}
	qs, err := a.cfg.Coord.Queues(r.Context())
	if err != nil {
		return err
	}
	// At most knownQueuesNamed names: the error is one line, whatever the
	// number of queues.
	names := make([]string, 0, min(len(qs), knownQueuesNamed))
	for _, x := range qs[:min(len(qs), knownQueuesNamed)] {
		names = append(names, x.Name)
	}
	known := "none"
	if len(names) > 0 {
		known = strings.Join(names, ", ")
	}
	if more := len(qs) - len(names); more > 0 {
		known += fmt.Sprintf(" and %d more: see GET /v1/queues", more)
	}
	return badRequest("unknown queue %s: no daemon serves it and it has no available jobs (known queues: %s); check the name%s", q, known, hint)
}

func forceParam(r *http.Request) (bool, error) {
	if err := checkQuery(r, "force"); err != nil {
		return false, err
	}
	switch r.URL.Query().Get("force") {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, badRequest("force %q: want true or false", TruncateString(r.URL.Query().Get("force"), 20))
}

func (a *Handler) pauseQueue(w http.ResponseWriter, r *http.Request) {
	a.changeQueue(w, r, forceHint, func(q string) (coordinator.QueueConfig, bool, error) {
		return a.cfg.Coord.PauseQueue(r.Context(), q)
	})
}

func (a *Handler) resumeQueue(w http.ResponseWriter, r *http.Request) {
	a.changeQueue(w, r, "", func(q string) (coordinator.QueueConfig, bool, error) {
		return a.cfg.Coord.ResumeQueue(r.Context(), q)
	})
}

func (a *Handler) limitQueue(w http.ResponseWriter, r *http.Request) {
	var req LimitRequest
	if err := decodeBody(w, r, limitBody, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	if req.Limit == nil {
		a.fail(w, r, badRequest(`limit is missing: send {"limit":N} with N from 0 (no limit) to %d`, coordinator.MaxQueueLimit))
		return
	}
	a.changeQueue(w, r, forceHint, func(q string) (coordinator.QueueConfig, bool, error) {
		return a.cfg.Coord.SetQueueLimit(r.Context(), q, *req.Limit)
	})
}

// knownQueuesNamed bounds the known queues that the unknown-queue error
// names.
const knownQueuesNamed = 20

// forceHint ends the unknown-queue error of pause and limit.
const forceHint = ", or pass force=true to configure a queue before any daemon serves it or while its jobs are all scheduled or retryable (those are not counted)"

func (a *Handler) changeQueue(w http.ResponseWriter, r *http.Request, hint string, change func(q string) (coordinator.QueueConfig, bool, error)) {
	force, err := forceParam(r)
	if err == nil {
		err = checkNoBody(r)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	q := r.PathValue("queue")
	if err := a.knownQueue(r, q, force, hint); err != nil {
		a.fail(w, r, err)
		return
	}
	conf, changed, err := change(q)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, QueueResponse{Queue: conf, Changed: changed})
}

func (a *Handler) listPeriodic(w http.ResponseWriter, r *http.Request) {
	if err := checkQuery(r); err != nil {
		a.fail(w, r, err)
		return
	}
	ps, err := a.cfg.Coord.ListPeriodic(r.Context())
	if err != nil {
		a.fail(w, r, fmt.Errorf("list periodic jobs: %w", err))
		return
	}
	resp := PeriodicResponse{Periodic: ps}
	if resp.Leader, err = a.cfg.Coord.Leader(r.Context(), coordinator.MaintenanceElection); err != nil {
		a.fail(w, r, fmt.Errorf("list periodic jobs: %w", err))
		return
	}
	ws, err := a.cfg.Coord.Workers(r.Context())
	if err != nil {
		a.fail(w, r, fmt.Errorf("list periodic jobs: %w", err))
		return
	}
	for _, wk := range ws {
		for _, name := range wk.Periodic {
			if resp.Declared == nil {
				resp.Declared = map[string][]string{}
			}
			resp.Declared[name] = append(resp.Declared[name], wk.ID)
		}
	}
	WriteJSON(w, http.StatusOK, resp)
}
