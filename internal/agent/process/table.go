package process

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/ringlog"
)

// Defaults and bounds.
const (
	DefaultOutputLimit = 1 << 20
	DefaultSpillLimit  = 256 << 20
	// retention of exited processes: at least retainAge, unless retainCount
	// newer ones exist or their results hold more than retainBytes.
	retainAge   = 10 * time.Minute
	retainCount = 1000
	retainBytes = 64 << 20
	// drainGrace is how long a stream stays open once the output the
	// process left in its pipe at its exit has been read: a background
	// descendant may hold the pipe open, and the result waits for no one's
	// output but the process's own.
	drainGrace = 200 * time.Millisecond
	// subMax bounds the live output queued for one follower: a complete
	// follower that falls this far behind holds the process's pipes (the
	// process waits), a bounded one loses what does not fit.
	subMax = 1 << 20
)

// Exit reasons.
const (
	ReasonExited   = "exited"
	ReasonSignaled = "signaled"
	ReasonTimeout  = "timeout"
	ReasonKilled   = "killed"
	ReasonOOM      = "oom"
	// ReasonPidsExhausted: the process failed after the sandbox hit its
	// pids limit.
	ReasonPidsExhausted = "pids_exhausted"
	// ReasonDiskFull: the process failed and the sandbox's disk quota is
	// full (DiskFull says so when it ends).
	ReasonDiskFull = "disk_full"
)

// Streams.
const (
	Stdout = 1
	Stderr = 2
)

// Config configures a Table.
type Config struct {
	// OutputLimitBytes is the default per-stream cap on output kept; 0 means 1 MiB.
	OutputLimitBytes int64
	// SpillLimitBytes caps each spill file; 0 means 256 MiB.
	SpillLimitBytes int64
	// CgroupFD (v2) or FreezerFD (v1), when > 0, is the directory under which
	// each process gets its own group, so kill reaches its whole tree.
	CgroupFD, FreezerFD int
	// OOMFD, when > 0, holds the sandbox's oom_kill counter.
	OOMFD int
	// PidsFD, when > 0, is the pids.events of the group the processes count
	// against: its max counter tells that a fork hit the pids limit.
	PidsFD int
	// DiskFull, when set, reports whether the sandbox's disk is full: asked
	// when a process fails, whose reason is then disk_full.
	DiskFull func() bool
	// PidsJoinFD, when > 0, is a v1 pids group (the sandbox's work group)
	// each process starts in: the thread it is forked from joins it first.
	PidsJoinFD int
	// Confine, when set, confines the OS thread each process is forked from,
	// right before the fork, so the process starts with what that thread has
	// (a seccomp filter and a Landlock domain are both per thread, and
	// inherited). The thread is thrown away after the fork, never returned to
	// the scheduler.
	Confine func() error
	// Spill creates the file for the full output of a truncated stream, named
	// like "p1a2b3c4.stdout", and returns it with its wire path.
	Spill func(name string) (*os.File, string, error)
	Log   *slog.Logger
}

// Table is the agent's process table, shared by every service.
type Table struct {
	cfg    Config
	kind   treeKind
	groups groupPool

	spawnOnce sync.Once
	spawn     *spawnThread // set by spawnOnce

	mu sync.Mutex
	// devNull is /dev/null, opened once: the stdin of every process without
	// one. It is -1 when it could not be opened, or after Close; each Start
	// then opens its own.
	devNull  int              // guarded by mu
	procs    map[string]*Proc // guarded by mu
	exitedQ  []*Proc          // guarded by mu: exited processes, oldest first
	retained int64            // guarded by mu: bytes held by exitedQ's results
}

// NewTable returns a table and starts the reaper.
func NewTable(cfg Config) *Table {
	if cfg.OutputLimitBytes <= 0 {
		cfg.OutputLimitBytes = DefaultOutputLimit
	}
	if cfg.SpillLimitBytes <= 0 {
		cfg.SpillLimitBytes = DefaultSpillLimit
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	t := &Table{cfg: cfg, procs: map[string]*Proc{}, devNull: -1}
	if fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		t.devNull = fd
	}
	switch {
	case cfg.CgroupFD > 0:
		t.kind, t.groups.parent = treeV2, cfg.CgroupFD
	case cfg.FreezerFD > 0:
		t.kind, t.groups.parent = treeV1, cfg.FreezerFD
	}
	t.groups.kind = t.kind
	startReaper()
	if t.kind != treeV1 && (cfg.PidsJoinFD > 0 || cfg.Confine != nil) {
		t.spawner() // now, while the sandbox starts, not on its first exec
	}
	return t
}

// TreeKill reports whether kill reaches whole trees (a cgroup per process).
func (t *Table) TreeKill() bool { return t.kind != treePgrp }

// Size is a terminal size.
type Size struct{ Cols, Rows uint16 }

// Spec is a command to start.
type Spec struct {
	Argv []string
	Env  []string
	// Dir is the directory to start in, as the agent can open it (a host path
	// or /proc/self/fd/N); Cwd is the same as seen on the wire.
	Dir, Cwd string
	Stdin    bool // a pipe; else /dev/null
	PTY      *Size
	Tag      string
	Timeout  time.Duration
	// OutputLimitBytes overrides the table's default cap.
	OutputLimitBytes int64
	// NoSpill keeps head and tail only, never the whole output in a file:
	// for a process whose caller follows all its output as it comes.
	NoSpill bool
	// OutputLogBytes, when > 0, keeps the last this many bytes of the
	// process's combined output for ReadOutput (at most MaxOutputLog).
	OutputLogBytes int64
	// Envs are the request's own variables, for envd's List.
	Envs map[string]string
	// Unlisted is the agent's own process: no caller sees it (it is not in
	// the table's list, nor kept once it exited).
	Unlisted bool
}

// Result is how a process ended and what it printed.
type Result struct {
	ExitCode int
	Reason   string
	Signal   int
	Duration time.Duration
	// Stdout and Stderr are head, notice and tail of each stream.
	Stdout, Stderr               []byte
	Truncated                    bool
	StdoutDropped, StderrDropped int64
	StdoutPath, StderrPath       string
	StdoutBytes, StderrBytes     int64
}

// Event is a chunk of output, or, when Dropped is set, the number of bytes of
// Stream a follower did not get at this point of the stream.
type Event struct {
	Stream  int
	Data    []byte
	Dropped int64
	chunk   *chunk // Data's buffer when it is shared and reused, else nil
}

// Release says ev's Data will not be read again: a buffer shared with the
// process's other followers is reused once each of them has released it.
// Call it after the last use of Data, or never (the buffer is then left to
// the garbage collector).
func (ev Event) Release() { ev.chunk.release() }

// chunk is a buffer of bulk output queued on the Subs of a process, reused
// once the last of them has released it. A process that writes fast (a file
// cat'ed, a build's log) is read bulkReadSize bytes at a time; a fresh copy of
// each read for its followers made the agent's garbage collector its largest
// cost (half of its CPU, with the small heap the agent keeps).
type chunk struct {
	b    []byte
	refs atomic.Int32
}

// chunks holds the reusable chunks; only reads larger than smallChunk use
// them, so a sandbox that never streams in bulk keeps no such buffer.
var chunks = sync.Pool{New: func() any { return &chunk{b: make([]byte, 0, bulkReadSize)} }}

const smallChunk = 32 << 10

// shareChunk returns a copy of data for refs holders: a chunk from the pool
// for a bulk read, else a plain copy (nil chunk).
func shareChunk(data []byte, refs int) ([]byte, *chunk) {
	if len(data) <= smallChunk || len(data) > bulkReadSize {
		return bytes.Clone(data), nil
	}
	c := chunks.Get().(*chunk)
	c.b = append(c.b[:0], data...)
	c.refs.Store(int32(refs))
	return c.b, c
}

func (c *chunk) release() {
	if c == nil {
		return
	}
	switch n := c.refs.Add(-1); {
	case n == 0:
		chunks.Put(c)
	case n < 0:
		panic("process: output chunk released more often than shared")
	}
}

// Proc is one process the agent started. Its exported fields do not change.
type Proc struct {
	ID        string
	Pid       int
	Argv      []string
	Cwd       string
	Tag       string
	PTY       bool
	Envs      map[string]string
	StartedAt time.Time

	t        *Table
	unlisted bool // Spec.Unlisted
	group    *group
	oom0     int64
	pids0    int64 // the sandbox's pids.events max count at start, or -1
	done     chan struct{}
	// exit is closed once the exit status is in (before done, which waits
	// for the output too).
	exit chan struct{}

	stdinMu sync.Mutex
	stdin   *os.File // guarded by stdinMu; nil once closed or when none
	ptmx    *os.File

	mu         sync.Mutex
	out        [2]*capture  // guarded by mu; nil once finished
	log        *ringlog.Log // guarded by mu; nil when not asked for, kept after the exit
	subs       map[*Sub]struct{}
	status     *syscall.WaitStatus
	exitedAt   time.Time
	killReason string
	pending    int // streams still open, plus one for the exit status
	timer      *time.Timer
	result     *Result
	// readers are the ends of the process's pipes (or its terminal) that
	// the agent reads; set before the reading starts, never changed.
	readers []*os.File
	gone    atomic.Bool // the exit status is in: each stream ends once it has delivered what its pipe then held (read)
}

// Done is closed once the result is set.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Result returns the result, or nil while the process runs.
func (p *Proc) Result() *Result {
	select {
	case <-p.done:
		return p.result
	default:
		return nil
	}
}

// Running reports whether the process has not exited yet (it may still be
// being reaped or drained: then Result is still nil).
func (p *Proc) Running() bool { return p.Result() == nil }

func newID() string {
	var b [5]byte
	rand.Read(b[:])
	return "p" + hex.EncodeToString(b[:])
}

// Get returns process id.
func (t *Table) Get(id string) (*Proc, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.procs[id]
	return p, ok
}

// ByPid returns the newest process with the given pid.
func (t *Table) ByPid(pid int) (*Proc, bool) {
	return t.find(func(p *Proc) bool { return p.Pid == pid && pid != 0 })
}

// ByTag returns the newest process with tag.
func (t *Table) ByTag(tag string) (*Proc, bool) {
	return t.find(func(p *Proc) bool { return p.Tag == tag && tag != "" })
}

func (t *Table) find(f func(*Proc) bool) (*Proc, bool) {
	var best *Proc
	for _, p := range t.List() {
		if f(p) && (best == nil || p.StartedAt.After(best.StartedAt) || (best.Result() != nil && p.Result() == nil)) {
			best = p
		}
	}
	return best, best != nil
}

// List returns every process the table holds, running or kept after exit,
// oldest first.
func (t *Table) List() []*Proc {
	t.mu.Lock()
	out := make([]*Proc, 0, len(t.procs))
	for _, p := range t.procs {
		out = append(out, p)
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b *Proc) int { return a.StartedAt.Compare(b.StartedAt) })
	return out
}

// Running returns the number of processes still running.
func (t *Table) Running() int {
	n := 0
	for _, p := range t.List() {
		if p.Running() {
			n++
		}
	}
	return n
}

// Close releases what the table holds open. Processes started after it get
// /dev/null opened for them.
func (t *Table) Close() {
	t.spawnOnce.Do(func() {}) // no spawn thread from now on
	if t.spawn != nil {
		t.spawn.close()
	}
	t.groups.close()
	t.groups.awaitReleased(time.Second)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.devNull >= 0 {
		unix.Close(t.devNull)
		t.devNull = -1
	}
}

// KillAll kills every running tree (the agent is stopping).
func (t *Table) KillAll() {
	for _, p := range t.List() {
		if p.Running() {
			p.Kill(ReasonKilled)
		}
	}
}

// WaitAll waits until every process has a result, or ctx ends.
func (t *Table) WaitAll(ctx context.Context) {
	for _, p := range t.List() {
		select {
		case <-p.done:
		case <-ctx.Done():
			return
		}
	}
}

// Kill kills the process's whole tree with reason recorded for its result. It
// reports whether the process had already exited.
func (p *Proc) Kill(reason string) (alreadyExited bool, err error) {
	if p.group == nil { // never started
		return true, nil
	}
	if p.group.kind != treePgrp {
		p.mu.Lock()
		exited := p.status != nil
		if !exited && p.killReason == "" {
			p.killReason = reason
		}
		p.mu.Unlock()
		return exited, p.group.kill(p.Pid) // stragglers die too
	}
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	p.mu.Lock()
	exited := p.status != nil
	if !exited && p.killReason == "" {
		p.killReason = reason
	}
	p.mu.Unlock()
	if exited {
		return true, nil
	}
	return false, p.group.kill(p.Pid)
}

// Signal sends sig to the process's group. It reports whether the process had
// already exited.
func (p *Proc) Signal(sig syscall.Signal) (alreadyExited bool, err error) {
	if sig == syscall.SIGKILL {
		return p.Kill(ReasonKilled)
	}
	if p.group == nil {
		return true, nil
	}
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	p.mu.Lock()
	exited := p.status != nil
	p.mu.Unlock()
	if exited {
		return true, nil
	}
	if err := syscall.Kill(-p.Pid, sig); err != nil && err != syscall.ESRCH {
		return false, err
	}
	return false, nil
}

// ErrStdinClosed is returned when writing to a closed or absent stdin.
var ErrStdinClosed = errors.New("stdin not enabled or closed")

// WriteStdin writes data to the process's stdin (its terminal for a PTY), then
// closes it when eof is set. ctx bounds a write the process does not read.
func (p *Proc) WriteStdin(ctx context.Context, data []byte, eof bool) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	f := p.stdin
	if p.PTY {
		f = p.ptmx
	}
	if f == nil || p.Result() != nil {
		return ErrStdinClosed
	}
	if len(data) > 0 {
		if dl, ok := ctx.Deadline(); ok {
			f.SetWriteDeadline(dl)
		} else {
			f.SetWriteDeadline(time.Time{})
		}
		stop := context.AfterFunc(ctx, func() { f.SetWriteDeadline(time.Now()) })
		_, err := f.Write(data)
		stop()
		if err != nil {
			return fmt.Errorf("writing stdin: %w", err)
		}
	}
	if eof && !p.PTY {
		p.stdin.Close()
		p.stdin = nil
	}
	return nil
}

// CloseStdin closes the process's stdin.
func (p *Proc) CloseStdin() error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return ErrStdinClosed
	}
	p.stdin.Close()
	p.stdin = nil
	return nil
}

// Resize changes the terminal size of a PTY process.
func (p *Proc) Resize(sz Size) error {
	if !p.PTY {
		return errors.New("process has no terminal")
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.ptmx == nil {
		return errors.New("process has exited")
	}
	return pty.Setsize(p.ptmx, &pty.Winsize{Cols: sz.Cols, Rows: sz.Rows})
}

// Sub follows the output of one process. A Sub is complete unless made
// bounded: once subMax bytes wait in its queue, the process's output is not
// read further until the follower drains it, so the pipes fill and the
// process waits for its slowest complete follower; nothing is lost. A bounded
// Sub never slows the process: what does not fit is dropped, and Drain
// reports how much with a Dropped event where it happened.
type Sub struct {
	bounded bool
	ready   chan struct{}

	mu     sync.Mutex
	room   *sync.Cond // on mu: the queue went below subMax, or the Sub closed
	q      []Event    // guarded by mu
	size   int        // guarded by mu
	lost   [2]int64   // guarded by mu: bytes dropped per stream since the last event queued
	closed bool       // guarded by mu: no longer followed
}

func newSub(bounded bool) *Sub {
	s := &Sub{bounded: bounded, ready: make(chan struct{}, 1)}
	s.room = sync.NewCond(&s.mu)
	return s
}

// Ready is signalled when events are queued.
func (s *Sub) Ready() <-chan struct{} { return s.ready }

// Drain returns the queued events, and lets the process's output be read
// again if the queue held it back. The caller releases each (Event.Release).
func (s *Sub) Drain() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.q
	q = s.appendLost(q)
	s.q, s.size = nil, 0
	s.room.Broadcast()
	return q
}

// appendLost appends a Dropped event for each stream that lost bytes.
func (s *Sub) appendLost(q []Event) []Event {
	for i, n := range s.lost {
		if n > 0 {
			q = append(q, Event{Stream: i + 1, Dropped: n})
			s.lost[i] = 0
		}
	}
	return q
}

// push queues ev; it reports whether it did (a closed Sub, or a bounded one
// out of room, does not) and whether the queue is full, which for a complete
// Sub means the reader must wait (waitRoom) before reading on.
func (s *Sub) push(ev Event) (queued, full bool) {
	s.mu.Lock()
	switch {
	case s.closed:
	case s.bounded && ev.Dropped == 0 && s.size+len(ev.Data) > subMax:
		s.lost[ev.Stream-1] += int64(len(ev.Data))
	default:
		if s.bounded {
			s.q = s.appendLost(s.q) // where the loss happened, before what follows it
		}
		s.q = append(s.q, ev)
		s.size += len(ev.Data)
		queued, full = true, !s.bounded && s.size >= subMax
	}
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
	return queued, full
}

// waitRoom blocks while the queue is full and the Sub followed.
func (s *Sub) waitRoom() {
	s.mu.Lock()
	for s.size >= subMax && !s.closed {
		s.room.Wait()
	}
	s.mu.Unlock()
}

// close ends following: queued events are dropped, a reader waiting for room
// goes on.
func (s *Sub) close() {
	s.mu.Lock()
	s.closed = true
	for _, ev := range s.q {
		ev.Release()
	}
	s.q, s.size = nil, 0
	s.room.Broadcast()
	s.mu.Unlock()
}

// Subscribe follows the process's output from now on, completely (see Sub);
// with replay, the output kept so far (head, a Dropped event for what was
// not kept, tail) is queued first. On an exited process it queues the replay
// only. Every Sub must end with Unsubscribe.
func (p *Proc) Subscribe(replay bool) *Sub { return p.subscribe(replay, false) }

// SubscribeBounded is Subscribe for a bounded live view (see Sub).
func (p *Proc) SubscribeBounded(replay bool) *Sub { return p.subscribe(replay, true) }

func (p *Proc) subscribe(replay, bounded bool) *Sub {
	s := newSub(bounded)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.result != nil {
		if replay {
			for i, b := range [][]byte{p.result.Stdout, p.result.Stderr} {
				if len(b) > 0 {
					s.push(Event{Stream: i + 1, Data: b})
				}
			}
		}
		return s
	}
	if replay {
		for i, c := range p.out {
			if c == nil || c.total == 0 {
				continue
			}
			if c.dropped() > 0 {
				s.push(Event{Stream: i + 1, Data: bytes.Clone(c.head)})
				s.push(Event{Stream: i + 1, Dropped: c.dropped()})
				s.push(Event{Stream: i + 1, Data: bytes.Clone(c.tailBytes())})
			} else {
				s.push(Event{Stream: i + 1, Data: c.bytes()})
			}
		}
	}
	if p.subs == nil {
		p.subs = map[*Sub]struct{}{}
	}
	p.subs[s] = struct{}{}
	return s
}

// Unsubscribe stops following.
func (p *Proc) Unsubscribe(s *Sub) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
	s.close()
}

// output records a chunk of stream and queues it for the followers; it
// returns the complete followers whose queues are full, for which the reader
// must wait before it reads on.
func (p *Proc) output(stream int, data []byte) (full []*Sub) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.result != nil {
		return nil // a descendant writes after the result was sealed
	}
	if p.log != nil {
		p.log.Write(data, time.Now())
	}
	c := p.out[stream-1]
	c.write(data, func() (*os.File, string, error) {
		suffix := ".stdout"
		if stream == Stderr {
			suffix = ".stderr"
		}
		if p.t.cfg.Spill == nil {
			return nil, "", errors.New("no output directory")
		}
		f, path, err := p.t.cfg.Spill(p.ID + suffix)
		if err != nil {
			p.t.cfg.Log.Warn("saving full output", "process_id", p.ID, "err", err)
		}
		return f, path, err
	})
	if len(p.subs) > 0 {
		// One reference per Sub and one for this loop, so a Sub that
		// sends and releases it at once cannot free it under the others.
		d, c := shareChunk(data, len(p.subs)+1)
		for s := range p.subs {
			queued, isFull := s.push(Event{Stream: stream, Data: d, chunk: c})
			if !queued {
				c.release()
			}
			if isFull {
				full = append(full, s)
			}
		}
		c.release()
	}
	return full
}

// streamDone is called when a stream reaches EOF.
func (p *Proc) streamDone() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending--
	if p.pending == 0 {
		p.finishLocked()
	}
}

// exited is called by the reaper with the process's status.
func (p *Proc) exited(ws syscall.WaitStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status = &ws
	p.exitedAt = time.Now()
	if p.timer != nil {
		p.timer.Stop()
	}
	// A reader blocked on an empty pipe wakes by drainGrace at the latest
	// and sees the exit (read); set before gone, so that a reader that
	// already saw gone has cleared or replaced this deadline.
	for _, f := range p.readers {
		f.SetReadDeadline(time.Now().Add(drainGrace))
	}
	p.gone.Store(true)
	close(p.exit)
	p.pending--
	if p.pending == 0 {
		p.finishLocked()
	}
}

// finishLocked seals the result once the process has exited.
func (p *Proc) finishLocked() {
	if p.result != nil || p.status == nil {
		return
	}
	ws := *p.status
	r := &Result{Duration: p.exitedAt.Sub(p.StartedAt)}
	if ws.Signaled() {
		r.Signal = int(ws.Signal())
	}
	switch {
	case p.killReason == ReasonTimeout && ws.Signaled():
		r.ExitCode, r.Reason = 124, ReasonTimeout
	case ws.Signaled() && ws.Signal() == syscall.SIGKILL && p.oom0 >= 0 && oomKills(p.t.cfg.OOMFD) > p.oom0:
		r.ExitCode, r.Reason = 137, ReasonOOM
	case !ws.Signaled() && ws.ExitStatus() == 128+int(syscall.SIGKILL) && p.oom0 >= 0 && oomKills(p.t.cfg.OOMFD) > p.oom0:
		// A shell reporting that the OOM killer took its child (sh -c 'python3 …').
		r.ExitCode, r.Reason = 137, ReasonOOM
	case p.killReason == ReasonKilled && ws.Signaled():
		r.ExitCode, r.Reason = 137, ReasonKilled
	case (ws.Signaled() || ws.ExitStatus() != 0) && p.pids0 >= 0 && pidsMax(p.t.cfg.PidsFD) > p.pids0:
		// It failed, and a fork in the sandbox hit the pids limit meanwhile:
		// the likeliest cause, which the caller should see (a fork bomb).
		r.ExitCode, r.Reason = 128+int(ws.Signal()), ReasonPidsExhausted
		if !ws.Signaled() {
			r.ExitCode = ws.ExitStatus()
		}
	case (ws.Signaled() || ws.ExitStatus() != 0) && p.t.cfg.DiskFull != nil && p.t.cfg.DiskFull():
		// It failed with the disk full: the likeliest cause (ENOSPC or
		// EDQUOT inside), which the caller should see.
		r.ExitCode, r.Reason = 128+int(ws.Signal()), ReasonDiskFull
		if !ws.Signaled() {
			r.ExitCode = ws.ExitStatus()
		}
	case ws.Signaled():
		r.ExitCode, r.Reason = 128+int(ws.Signal()), ReasonSignaled
	default:
		r.ExitCode, r.Reason = ws.ExitStatus(), ReasonExited
	}
	p.seal(r)
}

// seal sets the result from the captures, frees them and wakes followers.
func (p *Proc) seal(r *Result) {
	for i, c := range p.out {
		if c == nil {
			continue
		}
		b, d, path, n := c.bytes(), c.dropped(), c.spillPath, c.total
		c.closeSpill()
		if d > 0 {
			r.Truncated = true
		}
		if i == 0 {
			r.Stdout, r.StdoutDropped, r.StdoutPath, r.StdoutBytes = b, d, path, n
		} else {
			r.Stderr, r.StderrDropped, r.StderrPath, r.StderrBytes = b, d, path, n
		}
	}
	p.out = [2]*capture{}
	p.result = r
	p.subs = nil
	if p.log != nil {
		p.log.Close() // after the result is set: a reader woken now sees it
	}
	// The group goes back before anyone hears of the result, so the next
	// process a caller starts can have it.
	if p.group != nil {
		releaseGroup(p.group)
	}
	close(p.done)
	go p.CloseStdin() // not under p.mu: a write to stdin may be in progress
	p.t.retire(p, p.retainedBytes())
}

// retainedBytes is what an exited process holds in memory: its result's
// output and its output log. Neither changes once the result is sealed.
func (p *Proc) retainedBytes() int64 {
	n := int64(len(p.result.Stdout) + len(p.result.Stderr))
	if p.log != nil {
		n += p.log.Held()
	}
	return n
}

// retire keeps an exited process for Attach and Wait, evicting old ones.
func (t *Table) retire(p *Proc, size int64) {
	if p.unlisted {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.exitedQ = append(t.exitedQ, p)
	t.retained += size
	now := time.Now()
	for len(t.exitedQ) > 1 {
		old := t.exitedQ[0]
		if len(t.exitedQ) <= retainCount && t.retained <= retainBytes && now.Sub(old.exitedAt) < retainAge {
			break
		}
		t.exitedQ = t.exitedQ[1:]
		t.retained -= old.retainedBytes()
		if t.procs[old.ID] == old {
			delete(t.procs, old.ID)
		}
	}
}
