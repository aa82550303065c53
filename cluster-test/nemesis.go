package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"
)

// Fault kinds.
const (
	fKillDaemon      = "kill-daemon"          // SIGKILL, restart
	fPauseDaemon     = "pause-daemon"         // SIGSTOP past the TTL, SIGCONT
	fPartition       = "partition"            // daemon cut off from etcd, both directions
	fPartitionReq    = "partition-requests"   // daemon's requests dropped (one direction)
	fPartitionReply  = "partition-replies"    // etcd's replies dropped (the other direction)
	fLatency         = "latency"              // 150-400 ms each way on a daemon's etcd traffic
	fDropConns       = "drop-connections"     // TCP resets of a daemon's etcd connections
	fKillLeader      = "kill-etcd-leader"     // SIGKILL the raft leader, restart
	fKillFollower    = "kill-etcd-follower"   // SIGKILL a follower, restart
	fPauseMember     = "pause-etcd-member"    // SIGSTOP the leader or a follower, SIGCONT
	fQuorumLoss      = "quorum-loss"          // SIGKILL two members, restart both
	fRollingRestart  = "rolling-restart"      // SIGTERM each daemon in turn, restart
	fRestartEmbedded = "terminate-daemon"     // embedded: SIGTERM, restart
	fKillEmbedded    = "kill-daemon-embedded" // embedded: SIGKILL mid-workload, restart
)

// leaseLossKinds are the faults after which a daemon's jobs must move to
// other daemons through lease expiry: the reclaim delay is measured for them.
var leaseLossKinds = map[string]bool{fKillDaemon: true, fPauseDaemon: true, fPartition: true, fPartitionReq: true, fPartitionReply: true}

// Fault is one executed fault.
type Fault struct {
	Group int    `json:"group"` // faults of one group are one scheduled fault (a rolling restart)
	Kind  string `json:"kind"`
	// Slot is the daemon lane (0-based), or -1 for a fault of etcd.
	Slot    int       `json:"slot"`
	Members []string  `json:"members,omitempty"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Note    string    `json:"note,omitempty"`
}

// plan is one scheduled fault: what, to whom, for how long, after what gap.
type plan struct {
	Kind string        `json:"kind"`
	Slot int           `json:"slot"`
	Pick int           `json:"pick"` // picks a follower or members, by index
	Dur  time.Duration `json:"dur"`
	Gap  time.Duration `json:"gap"`
}

// schedule draws the fault plan from the seed: rounds in which every kind
// appears once in random order, until budget is spent (at least minRounds
// rounds). The same seed gives the same plan.
func schedule(seed uint64, mode string, daemons int, ttl, budget time.Duration, minRounds int) []plan {
	r := rand.New(rand.NewPCG(seed, 0x6e656d65))
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+r.IntN(hi-lo+1)) * time.Millisecond }
	var out []plan
	var used time.Duration
	for round := 0; ; round++ {
		var kinds []string
		if mode == "embedded" {
			kinds = []string{fKillEmbedded, fKillEmbedded, fKillEmbedded, fKillEmbedded, fRestartEmbedded}
		} else {
			oneWay := fPartitionReq
			if round%2 == 1 {
				oneWay = fPartitionReply
			}
			kinds = []string{fKillDaemon, fPauseDaemon, fPartition, oneWay, fLatency, fDropConns,
				fKillLeader, fKillFollower, fPauseMember, fQuorumLoss, fRollingRestart}
		}
		r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		for _, k := range kinds {
			p := plan{Kind: k, Slot: r.IntN(daemons), Pick: r.IntN(1 << 20), Gap: ms(1000, 2500)}
			switch k {
			case fKillDaemon:
				p.Dur = ms(500, 3000)
			case fPauseDaemon, fPartition, fPartitionReq, fPartitionReply:
				p.Dur = ttl + ms(1000, 2500)
			case fLatency:
				p.Dur = ms(2500, 5000)
			case fDropConns:
				p.Dur = ms(1000, 3000)
			case fKillLeader, fKillFollower:
				p.Dur = ms(1000, 4000)
			case fPauseMember:
				p.Dur = ms(2000, 6000)
			case fQuorumLoss:
				p.Dur = ttl + ms(1500, 3000)
			case fRollingRestart:
				p.Dur = time.Duration(daemons) * 3 * time.Second // estimate
			case fKillEmbedded:
				p.Dur, p.Gap = ms(200, 2000), ms(1500, 6000)
			case fRestartEmbedded:
				p.Dur, p.Gap = ms(200, 1000), ms(1500, 6000)
			}
			if round >= minRounds && used+p.Gap+p.Dur > budget {
				return out
			}
			used += p.Gap + p.Dur + estOverhead(k)
			out = append(out, p)
		}
	}
}

// estOverhead is the time a fault takes beyond its planned duration
// (restarts, elections), for the schedule's budget and the ETA.
func estOverhead(kind string) time.Duration {
	switch kind {
	case fKillDaemon, fRestartEmbedded, fKillEmbedded:
		return time.Second
	case fKillLeader, fKillFollower, fPauseMember, fQuorumLoss:
		return 2 * time.Second
	}
	return 0
}

// nemesis executes the plan, up to deadline (if not zero): a fault that
// would not end by then is not started. Each fault holds faultMu, so the
// supervisor does not restart what a fault keeps down.
func (h *harness) nemesis(ctx context.Context, plans []plan, deadline time.Time) error {
	for i, p := range plans {
		if !deadline.IsZero() && time.Now().Add(p.Gap+p.Dur+estOverhead(p.Kind)).After(deadline) {
			h.logf("nemesis: --duration is up after %d faults", i)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(p.Gap):
		}
		h.faultMu.Lock()
		err := h.runFault(ctx, i+1, p)
		h.faultMu.Unlock()
		if err != nil {
			return fmt.Errorf("fault %d (%s): %w", i+1, p.Kind, err)
		}
		h.faultsDone.Add(1)
	}
	return nil
}

func (h *harness) sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (h *harness) record(f *Fault) {
	h.mu.Lock()
	h.faults = append(h.faults, f)
	h.mu.Unlock()
	h.logf("fault %d: %s %s (%s)%s", f.Group, f.Kind, faultTarget(f), f.End.Sub(f.Start).Round(10*time.Millisecond), noteSuffix(f.Note))
}

func noteSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func faultTarget(f *Fault) string {
	if f.Slot >= 0 {
		return fmt.Sprintf("d%d", f.Slot+1)
	}
	return fmt.Sprint(f.Members)
}

// A pause's, a partition's or a latency's end is stamped before the harness lifts it,
// not after: the daemon records its held-up events (a start whose claim
// reply waited, a verdict) as soon as it runs again, and the checker
// excuses a late event only if it was recorded at or after the fault's
// end (pausedRecording). Stamped after the SIGCONT or the heal, the end
// could fall after such an event and turn it into a token-order,
// stale-write or cancel-dropped violation that did not happen.
//
// liftedHook runs right after a fault is lifted; a test stands it in for
// the daemon's first event.
var liftedHook = func() {}

func (h *harness) runFault(ctx context.Context, group int, p plan) error {
	// The fault's own context: the harness's end interrupts the waiting,
	// never the repair.
	heal := context.WithoutCancel(ctx)
	f := &Fault{Group: group, Kind: p.Kind, Slot: -1}
	if p.Slot < len(h.daemons) && p.Kind != fKillLeader && p.Kind != fKillFollower && p.Kind != fPauseMember && p.Kind != fQuorumLoss && p.Kind != fRollingRestart {
		f.Slot = p.Slot
	}
	var d *daemon
	if f.Slot >= 0 {
		d = h.daemons[f.Slot]
	}
	h.setCurrent(p.Kind + " " + faultTarget(f))
	defer h.setCurrent("")
	switch p.Kind {
	case fKillDaemon, fKillEmbedded:
		f.Start = time.Now()
		h.killDaemon(d)
		h.sleep(ctx, p.Dur)
		if err := h.startDaemon(heal, d); err != nil {
			return err
		}
		f.End = time.Now()
	case fRestartEmbedded:
		f.Start = time.Now()
		if !h.terminateDaemon(d) {
			f.Note = "did not stop within 20s of SIGTERM: killed"
		}
		h.sleep(ctx, p.Dur)
		if err := h.startDaemon(heal, d); err != nil {
			return err
		}
		f.End = time.Now()
	case fPauseDaemon:
		f.Start = time.Now()
		if err := d.proc.signal(syscall.SIGSTOP, false); err != nil {
			return err
		}
		h.sleep(ctx, p.Dur)
		f.End = time.Now() // before lifting it: see liftedHook
		if err := d.proc.signal(syscall.SIGCONT, false); err != nil {
			return err
		}
		liftedHook()
	case fPartition, fPartitionReq, fPartitionReply:
		toServer, toClient := p.Kind != fPartitionReply, p.Kind != fPartitionReq
		f.Start = time.Now()
		for _, x := range d.proxies {
			x.BlackholeDirection(toServer, toClient)
		}
		h.sleep(ctx, p.Dur)
		f.End = time.Now() // before lifting it: see liftedHook
		for _, x := range d.proxies {
			x.Heal()
		}
		liftedHook()
	case fLatency:
		lat := time.Duration(150+p.Pick%250) * time.Millisecond
		f.Note = fmt.Sprintf("%s each way", lat)
		f.Start = time.Now()
		for _, x := range d.proxies {
			x.Delay(lat)
		}
		h.sleep(ctx, p.Dur)
		f.End = time.Now() // before lifting it: see liftedHook
		for _, x := range d.proxies {
			x.Heal()
		}
		liftedHook()
	case fDropConns:
		f.Start = time.Now()
		end := f.Start.Add(p.Dur)
		n := 0
		for time.Now().Before(end) && ctx.Err() == nil {
			for _, x := range d.proxies {
				x.DropConnections()
			}
			n++
			h.sleep(ctx, 300*time.Millisecond)
		}
		f.Note = fmt.Sprintf("%d resets", n)
		f.End = time.Now()
	case fKillLeader, fKillFollower, fPauseMember, fQuorumLoss:
		leader := -1
		for range 20 {
			if leader = h.leader(ctx); leader >= 0 {
				break
			}
			h.sleep(ctx, 250*time.Millisecond)
		}
		var victims []int
		switch p.Kind {
		case fKillLeader:
			if leader < 0 {
				return fmt.Errorf("no etcd leader found")
			}
			victims = []int{leader}
		case fPauseMember:
			// The leader in one pause of two: its followers elect
			// another while it hangs.
			if leader < 0 {
				return fmt.Errorf("no etcd leader found")
			}
			victims = []int{leader}
			if p.Pick%2 == 1 {
				victims = []int{(leader + 1 + (p.Pick/2)%2) % len(h.members)}
			}
		case fKillFollower:
			var fs []int
			for i := range h.members {
				if i != leader {
					fs = append(fs, i)
				}
			}
			victims = []int{fs[p.Pick%len(fs)]}
		case fQuorumLoss:
			a := p.Pick % 3
			victims = []int{a, (a + 1 + (p.Pick/3)%2) % 3}
		}
		for _, v := range victims {
			f.Members = append(f.Members, h.members[v].name)
			if v == leader {
				f.Note = "leader " + h.members[v].name
			}
		}
		f.Start = time.Now()
		if p.Kind == fPauseMember {
			v := h.members[victims[0]].proc
			if err := v.signal(syscall.SIGSTOP, false); err != nil {
				return err
			}
			h.sleep(ctx, p.Dur)
			if err := v.signal(syscall.SIGCONT, false); err != nil {
				return err
			}
		} else {
			for _, v := range victims {
				h.members[v].proc.kill()
			}
			h.sleep(ctx, p.Dur)
			for _, v := range victims {
				if err := h.startMember(h.members[v]); err != nil {
					return err
				}
			}
		}
		if err := h.waitLeader(heal, 60*time.Second); err != nil {
			return err
		}
		f.End = time.Now()
	case fRollingRestart:
		for _, d := range h.daemons {
			g := &Fault{Group: group, Kind: p.Kind, Slot: d.slot, Start: time.Now()}
			if !h.terminateDaemon(d) {
				g.Note = "did not stop within 20s of SIGTERM: killed"
			}
			if err := h.startDaemon(heal, d); err != nil {
				return err
			}
			g.End = time.Now()
			h.record(g)
			h.sleep(ctx, 500*time.Millisecond)
		}
		return nil
	default:
		return fmt.Errorf("unknown fault kind %q", p.Kind)
	}
	h.record(f)
	return nil
}
