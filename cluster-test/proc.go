package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one OS process the harness started: an etcd member or a daemon.
// Its stdout and stderr go to a log file; each line is also offered to
// onLine (to learn a daemon's worker id and readiness).
type proc struct {
	name   string
	binary string
	args   []string
	log    *os.File
	onLine func(line string)

	mu      sync.Mutex
	cmd     *exec.Cmd
	pid     int
	started time.Time
	done    chan struct{} // closed when the current process has exited
	exitErr error
	// expectExit is set before the harness stops or kills the process, so
	// that an exit without it is reported as unexpected.
	expectExit bool
	stopped    bool // SIGSTOPped
}

// allProcs lists every process ever started, so that an interrupted
// harness can kill them (by pid) on its way out.
var allProcs struct {
	sync.Mutex
	list []*proc
}

func newProc(name, binary, logPath string, args []string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, binary: binary, args: args, log: f}
	allProcs.Lock()
	allProcs.list = append(allProcs.list, p)
	allProcs.Unlock()
	return p, nil
}

// start starts a new instance of the process. The previous one must have
// exited.
func (p *proc) start(onExit func(p *proc, pid int, err error, expected bool)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s: still running (pid %d)", p.name, p.pid)
		}
	}
	cmd := exec.Command(p.binary, p.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	now := time.Now()
	fmt.Fprintf(p.log, "=== %s: starting %s %s\n", now.Format(time.RFC3339Nano), p.binary, strings.Join(p.args, " "))
	if err := cmd.Start(); err != nil {
		_ = pw.Close()
		return fmt.Errorf("%s: start: %w", p.name, err)
	}
	p.cmd, p.pid, p.started, p.exitErr, p.expectExit, p.stopped = cmd, cmd.Process.Pid, now, nil, false, false
	done := make(chan struct{})
	p.done = done
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			_, _ = p.log.WriteString(line + "\n")
			if p.onLine != nil {
				p.onLine(line)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	pid := p.pid
	go func() {
		err := cmd.Wait()
		_ = pw.Close()
		<-lines
		p.mu.Lock()
		p.exitErr = err
		expected := p.expectExit
		p.mu.Unlock()
		fmt.Fprintf(p.log, "=== %s: pid %d exited: %v\n", time.Now().Format(time.RFC3339Nano), pid, err)
		if onExit != nil {
			onExit(p, pid, err, expected)
		}
		close(done)
	}()
	return nil
}

// running reports whether the current instance has not exited.
func (p *proc) running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (p *proc) currentPID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// signal sends sig to the current instance (by its pid). expectExit marks
// that the process is meant to end.
func (p *proc) signal(sig syscall.Signal, expectExit bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.done == nil {
		return fmt.Errorf("%s: not started", p.name)
	}
	select {
	case <-p.done:
		return fmt.Errorf("%s: not running", p.name)
	default:
	}
	if expectExit {
		p.expectExit = true
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	return syscall.Kill(p.pid, sig)
}

// wait waits for the current instance to exit, up to d.
func (p *proc) wait(d time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// kill SIGKILLs the current instance and waits for it.
func (p *proc) kill() {
	if p.running() {
		p.mu.Lock()
		stopped := p.stopped
		p.mu.Unlock()
		_ = p.signal(syscall.SIGKILL, true)
		if stopped {
			_ = p.signal(syscall.SIGCONT, true)
		}
		p.wait(10 * time.Second)
	}
}

// terminate sends SIGTERM, waits up to grace, then SIGKILLs.
func (p *proc) terminate(grace time.Duration) (graceful bool) {
	if !p.running() {
		return true
	}
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		_ = p.signal(syscall.SIGCONT, false)
	}
	_ = p.signal(syscall.SIGTERM, true)
	if p.wait(grace) {
		return true
	}
	p.kill()
	return false
}

// killAllStarted kills every process the harness started that still runs.
func killAllStarted() {
	allProcs.Lock()
	list := append([]*proc(nil), allProcs.list...)
	allProcs.Unlock()
	for _, p := range list {
		p.kill()
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// logLine is the part of a daemon's JSON log line the harness reads.
type logLine struct {
	Msg    string `json:"msg"`
	Worker string `json:"worker"`
	Addr   string `json:"addr"`
	Level  string `json:"level"`
}

func parseLogLine(s string) (logLine, bool) {
	var l logLine
	if !strings.HasPrefix(s, "{") || json.Unmarshal([]byte(s), &l) != nil {
		return l, false
	}
	return l, true
}
