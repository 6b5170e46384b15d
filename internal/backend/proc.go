// This file holds what the drivers that run a sandbox as a host process tree
// (native, local) share: the hold on the sandbox's first process — a child of
// the daemon, or after a restart a process pinned by a pidfd — and the registry
// of the sandboxes a driver holds.

package backend

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/sandbox"
)

// Proc is a driver's hold on a sandbox's first process: the agent, or the init
// stage that goes on as the agent. The zero value holds nothing (a sandbox known
// only by its id) and counts as exited.
type Proc struct {
	Pid int
	// Start is the process's start time (/proc/<pid>/stat field 22, clock
	// ticks since boot): it tells the process from a later one with its pid.
	Start uint64
	PidFD *os.File
	done  chan struct{} // closed once the process has exited; nil when none is held
	exit  sandbox.Exit  // set before done is closed
}

// HoldChild makes p the hold on child, a process this one started with
// SysProcAttr.PidFD pointing at pidfd: a goroutine reaps it (no zombie stays
// behind) and records how it ended. It reads the child's start time.
func (p *Proc) HoldChild(child *os.Process, pidfd int) error {
	p.Pid, p.PidFD, p.done = child.Pid, os.NewFile(uintptr(pidfd), "pidfd"), make(chan struct{})
	go func() {
		ps, _ := child.Wait()
		p.exit = ExitOf(ps)
		close(p.done)
	}()
	st, err := ProcStart(p.Pid)
	if err != nil {
		return fmt.Errorf("reading the start time of pid %d: %w", p.Pid, err)
	}
	p.Start = st
	return nil
}

// Pin returns a hold on process pid, not this process's child, if it is still
// the one that started at start: after a daemon restart. Its exit status will
// be unknown (code -1). The error says why it cannot be held.
func Pin(pid int, start uint64) (*Proc, error) {
	if st, err := ProcStart(pid); err != nil || st != start {
		return nil, fmt.Errorf("process %d is gone", pid)
	}
	pidfd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("process %d is gone: %w", pid, err)
	}
	// The pid may have been reused between the check and pidfd_open: check
	// again, now that the pidfd pins the process.
	if st, err := ProcStart(pid); err != nil || st != start {
		unix.Close(pidfd)
		return nil, fmt.Errorf("process %d is gone", pid)
	}
	p := &Proc{Pid: pid, Start: start, PidFD: os.NewFile(uintptr(pidfd), "pidfd")}
	return p, nil
}

// Watch starts watching a pinned process (Pin) for its exit, before the hold is
// shared; Close ends the watch.
func (p *Proc) Watch() {
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		p.exit = sandbox.Exit{Code: -1, Reason: sandbox.ReasonExited}
		waitPidfd(p.PidFD)
	}()
}

// HoldSpawned makes p the hold on pid, a process another started for this
// one (the native driver's spawner), which passed its pidfd: exit gets how it
// ended, or is closed without a value if that other process is gone first,
// and then the pidfd tells the exit (code unknown, -1). It reads the start
// time.
func (p *Proc) HoldSpawned(pid, pidfd int, exit <-chan sandbox.Exit) error {
	p.Pid, p.PidFD, p.done = pid, os.NewFile(uintptr(pidfd), "pidfd"), make(chan struct{})
	go func() {
		e, ok := <-exit
		if !ok {
			waitPidfd(p.PidFD)
			e = sandbox.Exit{Code: -1, Reason: sandbox.ReasonExited}
		}
		p.exit = e
		close(p.done)
	}()
	st, err := ProcStart(pid)
	if err != nil {
		return fmt.Errorf("reading the start time of pid %d: %w", pid, err)
	}
	p.Start = st
	return nil
}

// waitPidfd returns once the process of pidfd has exited, or the pidfd is
// closed.
func waitPidfd(pidfd *os.File) {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return
	}
	// The runtime's poller wakes this when the pidfd becomes readable: the
	// process has exited. It returns early if the pidfd is closed.
	// A signal pending as it polls (the runtime's preemption, SIGURG) fails
	// the poll with EINTR, which says nothing of the process: poll again.
	rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, 0)
			if err != unix.EINTR {
				return err != nil || n > 0
			}
		}
	})
}

// Held reports whether p holds a process, running or exited.
func (p *Proc) Held() bool { return p.done != nil }

// Done is closed once the process has exited; nil when none is held.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited; true when none is held.
func (p *Proc) Exited() bool {
	if p.done == nil {
		return true
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitStatus is how the process ended; valid once Done is closed.
func (p *Proc) ExitStatus() sandbox.Exit { return p.exit }

// Signal sends sig to the process through its pidfd, if it still runs.
func (p *Proc) Signal(sig syscall.Signal) {
	if p.PidFD != nil && !p.Exited() {
		unix.PidfdSendSignal(int(p.PidFD.Fd()), sig, nil, 0)
	}
}

// Wait is Driver.Wait for sandbox id whose first process p is.
func (p *Proc) Wait(ctx context.Context, id sandbox.ID) (sandbox.Exit, error) {
	return WaitExit(ctx, id, p.done, &p.exit)
}

// Close drops the pidfd.
func (p *Proc) Close() {
	if p.PidFD != nil {
		p.PidFD.Close()
	}
}

// ExitOf is how a process that ps describes ended; a nil ps (the wait failed)
// is a lost agent.
func ExitOf(ps *os.ProcessState) sandbox.Exit {
	if ps == nil {
		return sandbox.Exit{Code: -1, Reason: sandbox.ReasonAgentLost}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		return ExitOfStatus(ws)
	}
	return sandbox.Exit{Code: ps.ExitCode(), Reason: sandbox.ReasonExited}
}

// ExitOfStatus is how a process that ended with wait status ws ended.
func ExitOfStatus(ws syscall.WaitStatus) sandbox.Exit {
	if ws.Signaled() {
		return sandbox.Exit{Code: 128 + int(ws.Signal()), Signal: int(ws.Signal()), Reason: sandbox.ReasonSignaled}
	}
	return sandbox.Exit{Code: ws.ExitStatus(), Reason: sandbox.ReasonExited}
}

// DescribeExit says how a process ended, for an error message.
func DescribeExit(e sandbox.Exit) string {
	if e.Signal != 0 {
		return fmt.Sprintf("signal %d", e.Signal)
	}
	return fmt.Sprintf("code %d", e.Code)
}

// ProcStart reads the start time of pid: field 22 of /proc/<pid>/stat.
func ProcStart(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: skip past its last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	const field = 22 - 3 // fields after the name start at 3
	if len(f) <= field {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	return strconv.ParseUint(f[field], 10, 64)
}

// Registry is the set of sandboxes a driver holds, by id. B is the driver's
// record of one (a pointer). It is safe for concurrent use.
type Registry[B comparable] struct {
	mu sync.Mutex
	m  map[sandbox.ID]B
}

// Claim adds b under id for a create; it fails with ErrExists when id is held.
func (r *Registry[B]) Claim(id sandbox.ID, b B) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.m[id]; dup {
		return &sandbox.Error{Op: "create", ID: id, Err: fmt.Errorf("sandbox %w", sandbox.ErrExists)}
	}
	if r.m == nil {
		r.m = map[sandbox.ID]B{}
	}
	r.m[id] = b
	return nil
}

// Get returns the record held under id.
func (r *Registry[B]) Get(id sandbox.ID) (B, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.m[id]
	return b, ok
}

// Adopt adds b under id, unless keep says the record held there already is to
// stay; it returns the record that is held afterwards.
func (r *Registry[B]) Adopt(id sandbox.ID, b B, keep func(held B) bool) B {
	r.mu.Lock()
	defer r.mu.Unlock()
	if held, ok := r.m[id]; ok && keep(held) {
		return held
	}
	if r.m == nil {
		r.m = map[sandbox.ID]B{}
	}
	r.m[id] = b
	return b
}

// Forget removes b from under id, if it is what id holds.
func (r *Registry[B]) Forget(id sandbox.ID, b B) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if held, ok := r.m[id]; ok && held == b {
		delete(r.m, id)
	}
}
