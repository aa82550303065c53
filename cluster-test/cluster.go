package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/leasehold/leasehold/coordinator/etcdtest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// member is one etcd member process.
type member struct {
	name      string
	clientURL string
	peerURL   string
	proc      *proc
}

// daemon is one daemon slot (a lane in the picture): a process restarted
// many times, each instance with its own worker id, all reaching etcd
// through the slot's proxies (one per member).
type daemon struct {
	slot    int
	name    string
	proc    *proc
	proxies []*etcdtest.Proxy
	listen  string // embedded mode: fixed API address

	mu     sync.Mutex
	worker string        // worker id of the current instance, once ready
	addr   string        // API address of the current instance
	ready  chan struct{} // closed when the current instance logged "listening"
	wantUp bool          // the supervisor restarts it if it exits while true
}

// instance is one daemon process's life.
type instance struct {
	Slot    int       `json:"slot"`
	Worker  string    `json:"worker"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended,omitzero"`
	// How is how it ended: killed, terminated, exited (unexpectedly), or
	// empty while running.
	How string `json:"how,omitempty"`
	// Term is when the harness sent SIGTERM (a graceful stop).
	Term time.Time `json:"term,omitzero"`
}

func (h *harness) startEtcd(ctx context.Context) error {
	names := []string{"n1", "n2", "n3"}
	var initial []string
	for _, n := range names {
		cp, err := freePort()
		if err != nil {
			return err
		}
		pp, err := freePort()
		if err != nil {
			return err
		}
		m := &member{name: n, clientURL: fmt.Sprintf("http://127.0.0.1:%d", cp), peerURL: fmt.Sprintf("http://127.0.0.1:%d", pp)}
		h.members = append(h.members, m)
		initial = append(initial, n+"="+m.peerURL)
	}
	for _, m := range h.members {
		args := []string{"etcd", "--name", m.name, "--data", filepath.Join(h.dataDir, "etcd-"+m.name),
			"--listen-client", m.clientURL, "--listen-peer", m.peerURL,
			"--initial-cluster", strings.Join(initial, ","),
			"--election-timeout", "1s", "--heartbeat-interval", "100ms", "--log-format", "json"}
		p, err := newProc("etcd-"+m.name, h.binary, filepath.Join(h.logDir, "etcd-"+m.name+".log"), args)
		if err != nil {
			return err
		}
		m.proc = p
		if err := h.startMember(m); err != nil {
			return err
		}
	}
	var eps []string
	for _, m := range h.members {
		eps = append(eps, m.clientURL)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: eps, DialTimeout: 5 * time.Second,
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 5 * time.Second,
		Logger: zap.NewNop(),
	})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	h.cli = cli
	return h.waitLeader(ctx, 60*time.Second)
}

func (h *harness) startMember(m *member) error {
	return m.proc.start(func(p *proc, pid int, err error, expected bool) {
		if !expected {
			h.anomaly("etcd member %s (pid %d) exited unexpectedly: %v", m.name, pid, err)
		}
	})
}

// status asks one member for its status.
func (h *harness) status(ctx context.Context, m *member) (*clientv3.StatusResponse, error) {
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return h.cli.Status(sctx, m.clientURL)
}

// leader returns the index of the leader among the members, asking each
// running member; -1 if none knows one.
func (h *harness) leader(ctx context.Context) int {
	for _, m := range h.members {
		if !m.proc.running() {
			continue
		}
		st, err := h.status(ctx, m)
		if err != nil || st.Leader == 0 {
			continue
		}
		for j, m2 := range h.members {
			if !m2.proc.running() {
				continue
			}
			st2, err := h.status(ctx, m2)
			if err == nil && st2.Header.MemberId == st.Leader {
				return j
			}
		}
	}
	return -1
}

// waitLeader waits until every running member answers and a leader is
// known, and a linearizable read succeeds.
func (h *harness) waitLeader(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ok := true
		for _, m := range h.members {
			if !m.proc.running() {
				continue
			}
			if _, err := h.status(ctx, m); err != nil {
				ok = false
			}
		}
		if ok && h.leader(ctx) >= 0 {
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := h.cli.Get(gctx, "/leasehold-cluster-test/probe")
			cancel()
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("etcd cluster has no leader after %s", d)
}

func (h *harness) setupDaemons() error {
	execArg, err := writeExecScript(h.out, filepath.Join(h.histDir, execRunsFile))
	if err != nil {
		return err
	}
	for i := range h.cfg.daemons {
		d := &daemon{slot: i, name: fmt.Sprintf("d%d", i+1), wantUp: true}
		var args []string
		if h.cfg.mode == "shared" {
			var eps []string
			for _, m := range h.members {
				p, err := etcdtest.StartProxy(m.clientURL)
				if err != nil {
					return err
				}
				d.proxies = append(d.proxies, p)
				eps = append(eps, p.URL())
			}
			args = []string{"daemon", "--etcd", strings.Join(eps, ","), "--namespace", h.namespace,
				"--lease-ttl", h.cfg.leaseTTL.String(), "--listen", "127.0.0.1:0",
				"--reap-interval", "1s"}
		} else {
			port, err := freePort()
			if err != nil {
				return err
			}
			d.listen = fmt.Sprintf("127.0.0.1:%d", port)
			args = []string{"daemon", "--data", filepath.Join(h.dataDir, "pebble"), "--listen", d.listen}
		}
		args = append(args, "--concurrency", strconv.Itoa(h.cfg.concurrency), "--queues", "default,"+limitedQueue,
			"--periodic", tickName+"|"+tickSpec+"|history|"+`{"ms":20}`, "--history-dir", h.histDir, "--exec", execArg,
			"--log-format", "json", "--shutdown-timeout", h.cfg.shutdownTimeout.String())
		p, err := newProc(d.name, h.binary, filepath.Join(h.logDir, d.name+".log"), args)
		if err != nil {
			return err
		}
		p.onLine = func(line string) {
			l, ok := parseLogLine(line)
			if !ok {
				return
			}
			if l.Msg == "listening" && l.Worker != "" {
				d.mu.Lock()
				d.worker, d.addr = l.Worker, l.Addr
				ready := d.ready
				d.mu.Unlock()
				if ready != nil {
					select {
					case <-ready:
					default:
						close(ready)
					}
				}
			}
		}
		d.proc = p
		h.daemons = append(h.daemons, d)
	}
	return nil
}

// startDaemon starts a new instance of d and waits until it serves. It
// retries a few times: a daemon that cannot reach etcd exits.
func (h *harness) startDaemon(ctx context.Context, d *daemon) error {
	var last error
	for try := range 6 {
		if try > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(try) * 500 * time.Millisecond):
			}
		}
		ready := make(chan struct{})
		d.mu.Lock()
		d.ready, d.worker, d.wantUp = ready, "", true
		d.mu.Unlock()
		in := &instance{Slot: d.slot, Started: time.Now()}
		err := d.proc.start(func(p *proc, pid int, err error, expected bool) {
			h.mu.Lock()
			in.Ended = time.Now()
			if in.How == "" {
				in.How = "exited"
			}
			h.mu.Unlock()
			if !expected {
				h.anomaly("daemon %s (pid %d, worker %s) exited unexpectedly: %v", d.name, pid, in.Worker, err)
			}
		})
		if err != nil {
			return err
		}
		h.mu.Lock()
		in.PID = d.proc.currentPID()
		h.instances = append(h.instances, in)
		h.mu.Unlock()
		select {
		case <-ready:
			d.mu.Lock()
			w := d.worker
			d.mu.Unlock()
			h.mu.Lock()
			in.Worker = w
			h.mu.Unlock()
			return nil
		case <-time.After(30 * time.Second):
			last = fmt.Errorf("daemon %s did not start serving within 30s", d.name)
			h.endInstance(d, "killed")
			d.proc.kill()
		case <-d.proc.doneChan():
			last = fmt.Errorf("daemon %s exited during start: see %s", d.name, d.proc.log.Name())
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return last
}

// endInstance labels how the current instance of d is about to end.
func (h *harness) endInstance(d *daemon, how string) {
	pid := d.proc.currentPID()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, in := range h.instances {
		if in.Slot == d.slot && in.PID == pid && in.How == "" {
			in.How = how
			if how == "terminated" {
				in.Term = time.Now()
			}
		}
	}
}

func (p *proc) doneChan() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return p.done
}

func (h *harness) killDaemon(d *daemon) {
	d.mu.Lock()
	d.wantUp = false
	d.mu.Unlock()
	h.endInstance(d, "killed")
	d.proc.kill()
}

func (h *harness) terminateDaemon(d *daemon) bool {
	d.mu.Lock()
	d.wantUp = false
	d.mu.Unlock()
	h.endInstance(d, "terminated")
	return d.proc.terminate(20 * time.Second)
}

// supervise restarts daemons that exited while they should run, until ctx
// ends. An etcd member that exits unexpectedly is not restarted: it fails the run.
func (h *harness) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		h.faultMu.Lock()
		for _, d := range h.daemons {
			d.mu.Lock()
			want := d.wantUp
			d.mu.Unlock()
			if want && !d.proc.running() {
				h.logf("supervisor: restarting daemon %s", d.name)
				if err := h.startDaemon(ctx, d); err != nil {
					h.anomaly("supervisor: cannot restart daemon %s: %v", d.name, err)
				}
			}
		}
		h.faultMu.Unlock()
	}
}

// instancesSnapshot returns the daemon instances so far, by start time.
func (h *harness) instancesSnapshot() []instance {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]instance, 0, len(h.instances))
	for _, in := range h.instances {
		out = append(out, *in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

func (h *harness) stopAll() {
	for _, d := range h.daemons {
		if d.proc.running() {
			h.terminateDaemon(d)
		}
	}
	for _, m := range h.members {
		m.proc.terminate(10 * time.Second)
	}
	for _, d := range h.daemons {
		for _, p := range d.proxies {
			_ = p.Close()
		}
	}
}

var errInterrupted = errors.New("interrupted")

func removeAllQuiet(dir string) { _ = os.RemoveAll(dir) }
