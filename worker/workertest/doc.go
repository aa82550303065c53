// Package workertest runs leasehold handlers through a real worker inside
// a Go test: each job is enqueued into a store of the test's own, claimed
// under a session, run with its fencing token, its checkpoints and result
// written under the fence, and its outcome recorded, as in production,
// without a daemon.
//
//	func TestSendEmail(t *testing.T) {
//		tw := workertest.New(t, workertest.Config{})
//		tw.Worker().Handle("email", sendEmail)
//		res, err := tw.Work(ctx, coordinator.EnqueueParams{Kind: "email", Payload: []byte(`{"to":"a@example.com"}`)})
//		// res.Outcome.Op is "complete", res.Job.State completed, res.Job.Result what the handler set
//	}
//
// Work runs one attempt: a failed job is left retryable (its next attempt
// is not run unless the worker maintains, worker.Config.Maintain), a
// snoozed one scheduled. Wait waits for the next outcome of a job that
// the code under test enqueued itself, and RequireEnqueued checks that it
// did. The store is a Pebble directory in t.TempDir() unless Config.Store
// gives another (an etcd store over coordinator/etcdtest for shared
// mode). The worker is stopped and the store closed when the test ends.
package workertest
