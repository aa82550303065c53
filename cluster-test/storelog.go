package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// StoreEvent is one change of a job's record (j/ID), ownership key (o/ID),
// cancel request or index entries, or of a queue's configuration or
// global-limit slots, in etcd,
// in revision order: the store's own history, which the checker uses to
// place writes exactly (a fencing token is a revision).
type StoreEvent struct {
	Rev int64 `json:"rev"`
	// Key is the kind of key: "j" the record, "o" the ownership key, "c"
	// a cancel request, "r" the running index, "q" the available index,
	// "t" the timer index, "f" the finished index; "qm" a queue's
	// configuration, "qs" a slot of its global limit.
	Key string `json:"key"`
	// Index is an index key below the namespace (q, t, f), for timelines.
	Index     string `json:"index,omitempty"`
	Job       string `json:"job"`
	Delete    bool   `json:"delete,omitempty"`
	CreateRev int64  `json:"create_rev,omitempty"`
	// Seen is when the harness's watch received the event: the commit time,
	// give or take the watch's lag.
	Seen time.Time `json:"seen"`
	// Rec is the record written by a put of j/ID.
	Rec *coordinator.Job `json:"rec,omitempty"`
	// Conf is the configuration written by a put of qm/c/QUEUE (key
	// "qm", Job the queue's name).
	Conf *coordinator.QueueConfig `json:"conf,omitempty"`
	// Holder is the job a put of a global-limit slot qm/s/QUEUE/N names
	// (key "qs", Job the queue's name, Index the slot's key); a delete
	// names none.
	Holder string `json:"holder,omitempty"`
}

// storeLog watches the namespace from the start of the run and keeps
// every record and ownership-key change.
type storeLog struct {
	prefix string
	f      *bufio.Writer
	file   *os.File

	mu       sync.Mutex
	events   []StoreEvent
	lastRev  int64
	gap      string // why the log is incomplete, if it is
	progress chan int64
	done     chan struct{}
	cancel   context.CancelFunc
}

func startStoreLog(ctx context.Context, cli *clientv3.Client, ns, path string) (*storeLog, error) {
	prefix := "/leasehold/" + ns + "/"
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	resp, err := cli.Get(gctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return nil, fmt.Errorf("store log: %w", err)
	}
	if resp.Count != 0 {
		return nil, fmt.Errorf("store log: namespace %s is not empty", ns)
	}
	file, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	ctx, cancel = context.WithCancel(ctx)
	l := &storeLog{prefix: prefix, f: bufio.NewWriter(file), file: file, lastRev: resp.Header.Revision,
		progress: make(chan int64, 16), done: make(chan struct{}), cancel: cancel}
	wch := cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1), clientv3.WithProgressNotify())
	go l.run(ctx, cli, wch)
	return l, nil
}

func (l *storeLog) run(ctx context.Context, cli *clientv3.Client, wch clientv3.WatchChan) {
	defer close(l.done)
	for {
		for wr := range wch {
			if wr.CompactRevision != 0 {
				l.setGap(fmt.Sprintf("watch compacted at revision %d", wr.CompactRevision))
				return
			}
			if err := wr.Err(); err != nil {
				break // re-watch from the last revision seen
			}
			if wr.IsProgressNotify() {
				select {
				case l.progress <- wr.Header.Revision:
				default:
				}
				continue
			}
			for _, ev := range wr.Events {
				l.add(ev)
			}
		}
		if ctx.Err() != nil {
			return
		}
		// The watch ended (no leader, say): resume after the last revision.
		l.mu.Lock()
		from := l.lastRev + 1
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
		wch = cli.Watch(clientv3.WithRequireLeader(ctx), l.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	}
}

func (l *storeLog) setGap(why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gap == "" {
		l.gap = why
	}
}

func (l *storeLog) add(ev *clientv3.Event) {
	rest := strings.TrimPrefix(string(ev.Kv.Key), l.prefix)
	l.mu.Lock()
	defer l.mu.Unlock()
	if ev.Kv.ModRevision > l.lastRev {
		l.lastRev = ev.Kv.ModRevision
	}
	se := StoreEvent{Rev: ev.Kv.ModRevision, Delete: ev.Type == clientv3.EventTypeDelete, CreateRev: ev.Kv.CreateRevision, Seen: time.Now()}
	undecodable := func(what string, err error) {
		if l.gap == "" {
			l.gap = fmt.Sprintf("undecodable %s at revision %d: %v", what, se.Rev, err)
		}
	}
	switch {
	case strings.HasPrefix(rest, "qm/c/"):
		se.Key, se.Job = "qm", strings.TrimPrefix(rest, "qm/c/")
		if !se.Delete {
			var conf coordinator.QueueConfig
			if err := json.Unmarshal(ev.Kv.Value, &conf); err != nil {
				undecodable("queue configuration", err)
				return
			}
			se.Conf = &conf
		}
	case strings.HasPrefix(rest, "qm/s/"):
		se.Key, se.Index = "qs", rest
		se.Job, _, _ = strings.Cut(strings.TrimPrefix(rest, "qm/s/"), "/")
		if !se.Delete {
			se.Holder = string(ev.Kv.Value)
		}
	case len(rest) >= 3 && rest[1] == '/' && strings.Contains("jocrqtf", rest[:1]):
		se.Key, se.Job = rest[:1], rest[strings.LastIndexByte(rest, '/')+1:]
		if strings.Contains("qtf", se.Key) {
			se.Index = rest
		}
		if se.Key == "j" && !se.Delete {
			j, err := coordinator.DecodeJob(string(ev.Kv.Key), ev.Kv.Value)
			if err != nil {
				undecodable("record", err)
				return
			}
			se.Rec = j
		}
	default:
		return
	}
	l.events = append(l.events, se)
	b, _ := json.Marshal(se)
	_, _ = l.f.Write(append(b, '\n'))
}

// catchUp waits until the log has seen every revision up to rev.
func (l *storeLog) catchUp(ctx context.Context, cli *clientv3.Client, rev int64) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		seen := l.lastRev
		l.mu.Unlock()
		if seen >= rev {
			return nil
		}
		// The request goes to the watch's own stream only with the same
		// metadata as the watch (require-leader); on another stream its
		// notification reaches no watcher of this log.
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = cli.RequestProgress(clientv3.WithRequireLeader(rctx))
		cancel()
		select {
		case r := <-l.progress:
			l.mu.Lock()
			if r > l.lastRev {
				l.lastRev = r
			}
			l.mu.Unlock()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return fmt.Errorf("store log did not catch up with revision %d", rev)
}

// result stops the watch and returns the events and, if the log is
// incomplete, why.
func (l *storeLog) result() ([]StoreEvent, string) {
	l.cancel()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file != nil {
		_ = l.f.Flush()
		_ = l.file.Close()
		l.file = nil
	}
	return append([]StoreEvent(nil), l.events...), l.gap
}

// readStoreLog reads a store.jsonl written by a run.
func readStoreLog(path string) ([]StoreEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []StoreEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var e StoreEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}
