// This file implements the adapter's process table: the processes it
// started on the remote through envd's process.Start, each followed by a
// goroutine of the sandbox that reads the remote's events into the
// process's output (capture, log, followers) and, at the end, its result.
// A process belongs to the sandbox, not to the call that started it: a
// dropped caller stops following it, never the process, and a broken
// remote stream is reattached by pid (process.Connect).

package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	ppb "sbx.dev/sbx/api/agent/process"
	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/ringlog"
	"sbx.dev/sbx/internal/sandbox"
)

// Retention of exited processes, the agent's: at least retainAge, unless
// retainCount newer ones exist.
const (
	retainAge   = 10 * time.Minute
	retainCount = 1000
)

// table is the adapter's process table of one sandbox.
type table struct {
	mu     sync.Mutex
	procs  map[string]*proc // guarded by mu
	exited []*proc          // guarded by mu: oldest first
}

func newTable() *table { return &table{procs: map[string]*proc{}} }

func (t *table) add(p *proc) {
	t.mu.Lock()
	t.procs[p.id] = p
	t.mu.Unlock()
}

func (t *table) get(id string) (*proc, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.procs[id]
	return p, ok
}

// list returns every process held, running or kept after exit, oldest first.
func (t *table) list() []*proc {
	t.mu.Lock()
	out := make([]*proc, 0, len(t.procs))
	for _, p := range t.procs {
		out = append(out, p)
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b *proc) int { return a.startedAt.Compare(b.startedAt) })
	return out
}

func (t *table) running() int {
	n := 0
	for _, p := range t.list() {
		if p.resultOrNil() == nil {
			n++
		}
	}
	return n
}

// retire keeps an exited process for Attach and Wait, evicting old ones.
func (t *table) retire(p *proc, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.exited = append(t.exited, p)
	for len(t.exited) > 1 {
		old := t.exited[0]
		if len(t.exited) <= retainCount && now.Sub(old.exitedAt) < retainAge {
			break
		}
		t.exited = t.exited[1:]
		if t.procs[old.id] == old {
			delete(t.procs, old.id)
		}
	}
}

// Kill reasons the adapter records for a result.
const (
	reasonTimeout = sandbox.ReasonTimeout
	reasonKilled  = sandbox.ReasonKilled
	// reasonSandboxKilled: the remote sandbox was killed (Stop, Destroy).
	reasonSandboxKilled = "sandbox_killed"
	// reasonLost: the remote no longer knows the process and its end was
	// not seen.
	reasonLost = sandbox.ReasonAgentLost
)

// proc is one process the adapter started on the remote.
type proc struct {
	id        string
	pid       uint32
	argv      []string
	cwd, tag  string
	pty       bool
	startedAt time.Time
	// askedAt is when the start was sent: the remote counts the timeout
	// from its receipt, before the start event reaches this side.
	askedAt time.Time
	timeout time.Duration // 0: none
	stdin   bool          // started with a stdin pipe
	// feed is written to stdin once it started, which is then closed with
	// feedEOF.
	feed    []byte
	feedEOF bool
	r       *remote

	done chan struct{} // closed once result is set

	stdinMu     sync.Mutex
	stdinClosed bool // guarded by stdinMu

	mu         sync.Mutex
	out        [2]*capture    // guarded by mu; nil once sealed
	log        *ringlog.Log   // guarded by mu; nil when not asked for
	subs       map[*sub]bool  // guarded by mu
	killReason string         // guarded by mu
	result     *pb.ExecResult // guarded by mu
	exitedAt   time.Time      // guarded by mu
	timer      *time.Timer    // guarded by mu: the timeout's backstop
}

func newProcID() string {
	var b [5]byte
	rand.Read(b[:])
	return "p" + hex.EncodeToString(b[:])
}

// resultOrNil returns the result, or nil while the process runs.
func (p *proc) resultOrNil() *pb.ExecResult {
	select {
	case <-p.done:
		return p.result
	default:
		return nil
	}
}

// setKillReason records why the adapter kills the process, unless a reason is set.
func (p *proc) setKillReason(reason string) {
	p.mu.Lock()
	if p.killReason == "" && p.result == nil {
		p.killReason = reason
	}
	p.mu.Unlock()
}

// output records a chunk of stream and queues it for the followers; it
// returns the complete followers whose queues are full.
func (p *proc) output(stream int, data []byte) (full []*sub) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.result != nil || len(data) == 0 {
		return nil
	}
	if p.log != nil {
		p.log.Write(data, time.Now())
	}
	p.out[stream-1].write(data)
	for s := range p.subs {
		if s.push(event{stream: stream, data: data}) {
			full = append(full, s)
		}
	}
	return full
}

// subscribe follows the output from now on; with replay, what was kept so
// far (head, a dropped event for what was not kept, tail) is queued first.
// On an exited process it queues the replay only.
func (p *proc) subscribe(replay, bounded bool) *sub {
	s := newSub(bounded)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.result != nil {
		if replay {
			for i, b := range [][]byte{p.result.GetStdout(), p.result.GetStderr()} {
				if len(b) > 0 {
					s.push(event{stream: i + 1, data: b})
				}
			}
		}
		return s
	}
	if replay {
		for i, c := range p.out {
			switch {
			case c.total == 0:
			case c.dropped() > 0:
				s.push(event{stream: i + 1, data: slices.Clone(c.head)})
				s.push(event{stream: i + 1, dropped: c.dropped()})
				s.push(event{stream: i + 1, data: c.tailBytes()})
			default:
				s.push(event{stream: i + 1, data: c.bytes()})
			}
		}
	}
	if p.subs == nil {
		p.subs = map[*sub]bool{}
	}
	p.subs[s] = true
	return s
}

func (p *proc) unsubscribe(s *sub) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
	s.close()
}

// finish seals the result from end (the remote's end event), or, with end
// nil, from why the end was not seen. The first call's result stays.
func (p *proc) finish(end *ppb.ProcessEvent_EndEvent, why string) {
	now := time.Now()
	p.mu.Lock()
	if p.result != nil {
		p.mu.Unlock()
		return
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	res := p.exitOf(end, why, now)
	for i, c := range p.out {
		b, d, n := c.bytes(), c.dropped(), c.total
		if d > 0 {
			res.Truncated = true
		}
		if i == 0 {
			res.Stdout, res.StdoutDropped, res.StdoutBytes = b, d, n
		} else {
			res.Stderr, res.StderrDropped, res.StderrBytes = b, d, n
		}
	}
	p.out = [2]*capture{}
	p.result, p.exitedAt = res, now
	p.subs = nil // each follower drains its queue at done
	if p.log != nil {
		p.log.Close()
	}
	close(p.done)
	p.mu.Unlock()
	p.r.table.retire(p, now)
}

// exitOf is the result's exit code, reason and signal, as the agent gives
// them: 124 for a timeout, 137 for the adapter's kill, 128+n for signal n.
// p.mu is held.
func (p *proc) exitOf(end *ppb.ProcessEvent_EndEvent, why string, now time.Time) *pb.ExecResult {
	res := &pb.ExecResult{DurationMs: now.Sub(p.startedAt).Milliseconds()}
	overdue := p.timeout > 0 && now.Sub(p.askedAt) >= p.timeout
	if end == nil {
		switch {
		case why == reasonSandboxKilled:
			res.ExitCode, res.Reason, res.Signal = 128+int32(syscall.SIGKILL), reasonKilled, int32(syscall.SIGKILL)
		case p.killReason == reasonTimeout || overdue:
			// The remote ends a process at the lifetime the adapter gave it
			// (SIGKILL), and may end its stream with it.
			res.ExitCode, res.Reason, res.Signal = 124, reasonTimeout, int32(syscall.SIGKILL)
		default:
			res.ExitCode, res.Reason = -1, reasonLost
		}
		return res
	}
	status := end.GetStatus()
	name, signaled := strings.CutPrefix(status, "signal: ")
	if !signaled {
		res.ExitCode, res.Reason = end.GetExitCode(), sandbox.ReasonExited
		return res
	}
	sig := signalNumber(strings.TrimSuffix(name, " (core dumped)"))
	res.Signal = int32(sig)
	switch {
	case p.killReason == reasonTimeout || (overdue && sig == syscall.SIGKILL):
		res.ExitCode, res.Reason = 124, reasonTimeout
	case p.killReason == reasonKilled && sig == syscall.SIGKILL:
		res.ExitCode, res.Reason = 137, reasonKilled
	case sig > 0:
		res.ExitCode, res.Reason = 128+int32(sig), sandbox.ReasonSignaled
	default: // a signal whose name this side does not know
		res.ExitCode, res.Reason = -1, sandbox.ReasonSignaled
	}
	return res
}

// signalNames maps Go's signal descriptions ("killed", the text envd's end
// event carries after "signal: ") to their numbers.
var signalNames = sync.OnceValue(func() map[string]syscall.Signal {
	m := map[string]syscall.Signal{}
	for i := syscall.Signal(1); i <= 64; i++ {
		if s := i.String(); !strings.HasPrefix(s, "signal ") {
			m[s] = i
		}
	}
	return m
})

func signalNumber(name string) syscall.Signal {
	if s, ok := signalNames()[name]; ok {
		return s
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(name, "signal ")); err == nil && n > 0 && n <= 64 {
		return syscall.Signal(n)
	}
	return 0
}

// status is p as sbxagent.ProcessStatus.
func (p *proc) status() *pb.ProcessStatus {
	st := &pb.ProcessStatus{Id: p.id, Pid: p.pid, Argv: p.argv, Cwd: p.cwd, State: "running",
		StartedAt: timestamppb.New(p.startedAt), Tag: p.tag, Pty: p.pty}
	if r := p.resultOrNil(); r != nil {
		st.State, st.Result = "exited", r
	}
	return st
}

// events is a remote stream of process events: Start's or Connect's.
type events struct {
	next  func() (*ppb.ProcessEvent, bool)
	err   func() error
	close func() error
}

func startEvents(st *connect.ServerStreamForClient[ppb.StartResponse]) events {
	return events{next: func() (*ppb.ProcessEvent, bool) {
		if !st.Receive() {
			return nil, false
		}
		return st.Msg().GetEvent(), true
	}, err: st.Err, close: st.Close}
}

func connectEvents(st *connect.ServerStreamForClient[ppb.ConnectResponse]) events {
	return events{next: func() (*ppb.ProcessEvent, bool) {
		if !st.Receive() {
			return nil, false
		}
		return st.Msg().GetEvent(), true
	}, err: st.Err, close: st.Close}
}

// errNoStart is a stream that ended before the process's start event.
var errNoStart = errors.New("the remote ended the stream before the process started")

// awaitStart reads ev up to the start event and returns the pid.
func awaitStart(ev events) (uint32, error) {
	for {
		e, ok := ev.next()
		if !ok {
			if err := ev.err(); err != nil {
				return 0, err
			}
			return 0, errNoStart
		}
		if s := e.GetStart(); s != nil {
			return s.GetPid(), nil
		}
		if e.GetEnd() != nil {
			return 0, errNoStart
		}
	}
}

// Reattaching a broken stream: attempts, and the wait before each.
const (
	reattachTries = 5
	reattachDelay = 500 * time.Millisecond
)

// pump reads p's events from ev until its end, reattaching by pid when the
// stream breaks; it runs on the sandbox's goroutine group.
func (r *remote) pump(p *proc, ev events) {
	for {
		ended := r.read(p, ev)
		ev.close()
		if ended {
			return
		}
		if r.ctx.Err() != nil {
			return // let go of (the processes run on, or died with the sandbox)
		}
		next, why := r.reattach(p)
		if next == nil {
			p.finish(nil, why)
			return
		}
		ev = *next
	}
}

// read delivers ev's events into p until its end event (true) or the
// stream's end (false).
func (r *remote) read(p *proc, ev events) bool {
	for {
		e, ok := ev.next()
		if !ok {
			if err := ev.err(); err != nil && r.ctx.Err() == nil {
				r.d.log.Debug("a process's remote stream broke", logkey.SandboxID, r.id, logkey.Process, p.id, logkey.Err, err)
			}
			return false
		}
		switch {
		case e.GetData() != nil:
			d := e.GetData()
			stream, data := stdout, d.GetStdout()
			switch {
			case d.GetPty() != nil:
				data = d.GetPty()
			case d.GetStderr() != nil:
				stream, data = stderr, d.GetStderr()
			}
			for _, s := range p.output(stream, data) {
				s.waitRoom(r.ctx.Done()) // a complete follower holds the stream
			}
		case e.GetEnd() != nil:
			p.finish(e.GetEnd(), "")
			return true
		}
	}
}

// reattach follows p again by pid after its stream broke: the remote's
// Connect gives its start, new output and its end. It returns nil and why
// when the remote no longer knows p (its end was missed) or cannot be
// reached.
func (r *remote) reattach(p *proc) (*events, string) {
	for i := range reattachTries {
		t := time.NewTimer(time.Duration(i) * reattachDelay)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return nil, reasonLost
		case <-t.C:
		}
		st, err := r.proc.Connect(r.ctx, connect.NewRequest(&ppb.ConnectRequest{Process: pidSelector(p.pid)}))
		if err == nil {
			ev := connectEvents(st)
			if _, err = awaitStart(ev); err == nil {
				return &ev, ""
			}
			ev.close()
		}
		if connect.CodeOf(err) == connect.CodeNotFound {
			return nil, reasonLost
		}
		r.d.log.Debug("reattaching to a process", logkey.SandboxID, r.id, logkey.Process, p.id, "try", i+1, logkey.Err, err)
	}
	return nil, reasonLost
}

func pidSelector(pid uint32) *ppb.ProcessSelector {
	return &ppb.ProcessSelector{Selector: &ppb.ProcessSelector_Pid{Pid: pid}}
}

// signal sends sig (SIGTERM or SIGKILL, all envd knows) to the remote process pid.
func (r *remote) signal(ctx context.Context, pid uint32, sig syscall.Signal) error {
	s := ppb.Signal_SIGNAL_SIGKILL
	if sig == syscall.SIGTERM {
		s = ppb.Signal_SIGNAL_SIGTERM
	}
	_, err := r.proc.SendSignal(ctx, connect.NewRequest(&ppb.SendSignalRequest{Process: pidSelector(pid), Signal: s}))
	return err
}

// keepaliveSeconds is the Keepalive-Ping-Interval the adapter asks of the
// remote's streams: a silent process's stream still carries something
// through the proxies between, often enough for their idle timeouts.
const keepaliveSeconds = "30"

// startTimeout bounds the wait for a process's start event.
const startTimeout = 60 * time.Second

// timeoutGrace is how long past a process's timeout the adapter waits for
// the remote to end it before killing it itself.
const timeoutGrace = 2 * time.Second

// launch starts spec on the remote and follows it on the sandbox's
// goroutine group. The process is in the table once its start event came;
// started receives it, or the error that kept it from starting. What the
// caller does afterwards does not touch it.
func (r *remote) launch(req *ppb.StartRequest, p *proc, started chan<- error) {
	ctx := r.ctx
	if p.timeout > 0 {
		ctx = context.WithValue(ctx, timeoutKey{}, p.timeout)
	}
	creq := connect.NewRequest(req)
	creq.Header().Set("Keepalive-Ping-Interval", keepaliveSeconds)
	r.wg.Go(func() {
		// A remote that never sends the start gives up the call after
		// startTimeout; once started, the stream lasts as long as the process.
		ctx, giveUp := context.WithCancel(ctx)
		timer := time.AfterFunc(startTimeout, giveUp)
		p.askedAt = time.Now()
		st, err := r.proc.Start(ctx, creq)
		var pid uint32
		var ev events
		if err == nil {
			ev = startEvents(st)
			if pid, err = awaitStart(ev); err != nil {
				ev.close()
			}
		}
		if !timer.Stop() && err != nil && r.ctx.Err() == nil {
			err = connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: its remote envd did not start the process within %s", r.id, startTimeout))
		}
		if err != nil {
			giveUp()
			if errors.Is(err, errNoStart) {
				err = connect.NewError(connect.CodeInternal, errNoStart)
			}
			started <- r.remoteErr(err)
			return
		}
		p.pid, p.startedAt = pid, time.Now()
		if p.timeout > 0 {
			p.mu.Lock()
			p.timer = time.AfterFunc(p.timeout+timeoutGrace, func() { r.expire(p) })
			p.mu.Unlock()
		}
		r.table.add(p)
		started <- nil
		if len(p.feed) > 0 || p.feedEOF {
			r.wg.Go(func() { r.feed(p, p.feed, p.feedEOF) })
		}
		r.pump(p, ev)
	})
}

// expire kills p once its timeout (and the grace for the remote to act on
// it) has passed.
func (r *remote) expire(p *proc) {
	if p.resultOrNil() != nil || r.ctx.Err() != nil {
		return
	}
	p.setKillReason(reasonTimeout)
	ctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	defer cancel()
	if err := r.signal(ctx, p.pid, syscall.SIGKILL); err != nil && connect.CodeOf(err) != connect.CodeNotFound {
		r.d.log.Warn("killing a process past its timeout", logkey.SandboxID, r.id, logkey.Process, p.id, logkey.Err, err)
	}
}
