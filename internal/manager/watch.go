// This file implements agent loss detection (SECURITY.md PR-03, RL-03). Every
// sandbox this process can reach — created, warm in the pool, or re-adopted at
// start — has a watcher, which learns of its agent's end two ways: from the
// driver's Wait, where the driver holds the agent's process (a child, or a pidfd
// after a restart), with the exit status when it is known; and from the
// heartbeat, the agent's Health call every 2 seconds, for an agent that lives
// but no longer answers. A lost agent puts its sandbox in state error, persisted,
// with the reason; calls in flight end with agent_lost and later ones are
// refused, until the sandbox is deleted or expires. Delete, TTL expiry and Close
// end the watcher before they touch the sandbox, so none of them is taken for a
// loss.
//
// The heartbeat is one loop over all watchers, not a timer per sandbox: each
// round checks every agent in one burst, so an idle daemon wakes once a round
// however many sandboxes it holds. Scattered wakeups cost more CPU, in
// thread wakeups and scheduling, than the checks themselves.

package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

const (
	// DefaultHeartbeat is the time between the starts of two health checks.
	// The heartbeat only finds agents that live but do not answer: an agent
	// that ends is seen at once through the driver. Each check wakes an idle
	// agent, which costs about 1 ms of CPU on a 2-core VM: 100 idle sandboxes
	// checked every second take 13% of a core, every 2 s half that.
	DefaultHeartbeat = 2 * time.Second
	// A health check that fails or takes more than three quarters of the
	// interval (1.5 s) is a miss.
	// heartbeatMisses in a row make an agent lost. With the values above, an
	// agent that stops answering is declared lost at most
	// interval + (misses-1)·interval + timeout = 7.5 s later.
	heartbeatMisses = 3
	// heartbeatParallelism bounds the checks in flight in one round.
	heartbeatParallelism = 16
	// handoverPoll is how often a watcher whose sandbox is on its way into
	// the pool, or from it to a caller, looks again for where it went.
	handoverPoll = 50 * time.Millisecond
	// lossTimeout bounds what follows a loss: the store write and the kill.
	lossTimeout = 10 * time.Second
)

// errUnwatched ends a watcher: its sandbox is being deleted or discarded.
var errUnwatched = errors.New("sandbox no longer watched")

// watcher watches one sandbox's agent.
type watcher struct {
	id      sandbox.ID
	backend string
	driver  backend.Driver
	client  *agentclient.Client
	// ctx is the watcher's lifetime: it ends at remove or close.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// silent receives, once, why the heartbeat gave the agent up.
	silent chan string

	// misses and last are the heartbeat's: only its loop touches them.
	misses int
	last   error
}

// watchers runs the watchers of the agents the manager can reach and the one
// heartbeat loop over them, with its own lock and lifecycle: add and remove,
// stop (no watcher starts) and close (every watcher ends, and close waits for
// them). What a loss means for a sandbox (its record, the live map, the pool)
// is the manager's: watchers is given it as one function, lost, not the
// Manager, so it reaches neither the live map nor Manager.mu.
//
// Lock order: Manager.mu, then watchers.mu. destroy takes a sandbox out of the
// live map and removes its watcher as one step, lose checks under Manager.mu
// that its watcher is still current before it marks the sandbox lost, and
// Close stops the watchers as it marks the manager closed. watchers calls lost
// with mu not held.
type watchers struct {
	beat time.Duration // between the starts of two heartbeat rounds
	log  *slog.Logger
	// lost acts on the loss of w's agent, for why; kill says the agent may
	// still run. It runs on w's goroutine.
	lost func(ctx context.Context, w *watcher, why string, kill bool)

	ctx    context.Context // ends at close; every watcher's derives from it
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // the watchers' goroutines and the heartbeat's

	mu sync.Mutex
	// Everything below is guarded by mu.
	byID    map[sandbox.ID]*watcher
	beating bool // the heartbeat loop runs
	closed  bool
}

// newWatchers returns watchers that end at close, or with ctx.
func newWatchers(ctx context.Context, beat time.Duration, log *slog.Logger,
	lost func(ctx context.Context, w *watcher, why string, kill bool)) *watchers {
	ctx, cancel := context.WithCancelCause(ctx)
	return &watchers{beat: beat, log: log, lost: lost, ctx: ctx, cancel: cancel, byID: map[sandbox.ID]*watcher{}}
}

// add starts a watcher for sandbox id, reached through client and driven by d,
// unless one runs already (a warm sandbox handed out keeps the one it had in
// the pool) or d is nil. After stop it does nothing.
func (ws *watchers) add(id sandbox.ID, backendName string, d backend.Driver, client *agentclient.Client) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed || d == nil || ws.byID[id] != nil {
		return
	}
	ctx, cancel := context.WithCancelCause(ws.ctx)
	w := &watcher{id: id, backend: backendName, driver: d, client: client, ctx: ctx, cancel: cancel,
		silent: make(chan string, 1)}
	ws.byID[id] = w
	ws.wg.Go(func() { ws.run(ctx, w) })
	if !ws.beating {
		ws.beating = true
		ws.wg.Go(ws.heartbeat)
	}
}

// remove ends sandbox id's watcher, if any. Whatever the watcher sees
// afterwards is not taken for a loss: callers remove it before they stop or
// destroy the sandbox.
func (ws *watchers) remove(id sandbox.ID) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w := ws.byID[id]; w != nil {
		delete(ws.byID, id)
		w.cancel(errUnwatched)
	}
}

// current reports whether w still watches its sandbox: it was not removed.
func (ws *watchers) current(w *watcher) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.byID[w.id] == w
}

// stop makes add do nothing from here on; the watchers running go on until
// close. It does not wait.
func (ws *watchers) stop() {
	ws.mu.Lock()
	ws.closed = true
	ws.mu.Unlock()
}

// close stops the watchers, ends every one of them and the heartbeat, and
// waits for their goroutines, a call of lost in flight included. Ending a
// watcher is not a loss: a shutdown is not one.
func (ws *watchers) close() {
	ws.stop()
	ws.cancel(errShutdown)
	ws.wg.Wait()
}

// run waits for the agent's exit, or for the heartbeat to give it up, until
// ctx ends (remove, close).
func (ws *watchers) run(ctx context.Context, w *watcher) {
	exited := make(chan sandbox.Exit, 1)
	waiting := make(chan struct{})
	go func() { // ended by ctx at the latest; run waits for it
		defer close(waiting)
		exit, err := w.driver.Wait(ctx, w.id)
		switch {
		case err == nil:
			exited <- exit
		case ctx.Err() == nil:
			ws.log.DebugContext(ctx, "the driver cannot wait for this agent; the heartbeat alone watches it",
				logkey.SandboxID, w.id, logkey.Backend, w.backend, logkey.Err, err)
		}
	}()
	defer func() {
		w.cancel(errUnwatched)
		<-waiting
	}()
	select {
	case <-ctx.Done():
	case exit := <-exited:
		ws.lost(ctx, w, describeExit(exit), false)
	case why := <-w.silent:
		select {
		case exit := <-exited: // it ended meanwhile: its exit says more than silence
			ws.lost(ctx, w, describeExit(exit), false)
		default:
			ws.lost(ctx, w, why, true)
		}
	}
}

// heartbeat checks every watched agent once per interval until close. A round
// runs its checks in parallel and ends when the slowest has answered or timed
// out, within the interval, so rounds do not overlap.
func (ws *watchers) heartbeat() {
	t := time.NewTicker(ws.beat)
	defer t.Stop()
	sem := make(chan struct{}, heartbeatParallelism)
	var round []*watcher
	for {
		select {
		case <-ws.ctx.Done():
			return
		case <-t.C:
		}
		round = round[:0]
		ws.mu.Lock()
		for _, w := range ws.byID {
			round = append(round, w)
		}
		ws.mu.Unlock()
		var checks sync.WaitGroup
		for _, w := range round {
			sem <- struct{}{}
			checks.Go(func() {
				defer func() { <-sem }()
				ws.check(w)
			})
		}
		checks.Wait()
	}
}

// check is one health check of w's agent; the heartbeatMisses-th miss in a row
// hands the agent to its watcher as lost.
func (ws *watchers) check(w *watcher) {
	if w.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(w.ctx, ws.beat*3/4)
	err := w.client.Health(ctx)
	cancel()
	if w.ctx.Err() != nil {
		return // removed or closing meanwhile: not a miss
	}
	if err == nil {
		w.misses = 0
		return
	}
	w.misses++
	w.last = err
	if w.misses == heartbeatMisses {
		w.silent <- fmt.Sprintf("the agent did not answer %d health checks in a row (last: %v)", w.misses, unwrapOp(w.last))
	}
}

// lose acts on the loss of w's agent: a live sandbox goes to state error; a warm
// one is discarded. A sandbox on its way into the pool, or from it to a caller,
// is neither for a moment: lose waits for it to land. An unwatched sandbox
// (deleted, discarded, or the manager closing) is left alone.
func (m *Manager) lose(ctx context.Context, w *watcher, why string, kill bool) {
	for {
		m.mu.Lock()
		if !m.watchers.current(w) { // Manager.mu, then watchers.mu
			m.mu.Unlock()
			return
		}
		if l := m.live[w.id]; l != nil {
			l.lost = why
			m.mu.Unlock()
			m.loseLive(ctx, w, why, kill)
			return
		}
		if p := m.pool.remove(w.id); p != nil { // Manager.mu, then warmPool.mu
			m.mu.Unlock()
			m.log.WarnContext(ctx, "agent of a warm sandbox lost; discarding it", logkey.SandboxID, w.id,
				logkey.Backend, w.backend, "reason", why)
			m.discardWarm(context.WithoutCancel(ctx), p)
			m.pool.wake()
			return
		}
		m.mu.Unlock()
		t := time.NewTimer(handoverPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// loseLive records the loss of a live sandbox's agent: the calls in flight end,
// the store says error with the reason, and, when the agent may still run (it
// stopped answering), the sandbox's processes are killed, so nothing runs on
// unwatched. Its files stay until Delete or expiry.
func (m *Manager) loseLive(ctx context.Context, w *watcher, why string, kill bool) {
	log := m.log.With(logkey.SandboxID, w.id, logkey.Backend, w.backend)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lossTimeout)
	defer cancel()
	w.client.Lose(why)
	log.WarnContext(cctx, "agent lost; the sandbox is in state error until deleted", "reason", why)
	_, err := m.store.UpdateSandbox(cctx, w.id, func(r *sandbox.Sandbox) error {
		if r.State != sandbox.StateRunning {
			return wrongState(r.State)
		}
		r.State = sandbox.StateError
		r.Error = lostText(why)
		return nil
	})
	if err != nil && !errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrWrongState) {
		log.ErrorContext(cctx, "recording a lost agent", logkey.Err, err)
	}
	if kill && ctx.Err() == nil {
		if err := w.driver.Stop(cctx, w.id, 0); err != nil {
			log.WarnContext(cctx, "killing the processes of a sandbox whose agent is lost", logkey.Err, err)
		}
	}
}

// lostText is the record's error for an agent lost for why.
func lostText(why string) string { return sandbox.ReasonAgentLost + ": " + why }

// lostError is the error of a call on a sandbox whose agent was lost for why.
func lostError(op string, id sandbox.ID, why string) error {
	return &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("%w: sandbox is %s (%s)", sandbox.ErrAgentLost, sandbox.StateError, why)}
}

// describeExit says how an agent ended, in the words of a loss reason.
func describeExit(e sandbox.Exit) string {
	switch {
	case e.Signal > 0:
		return fmt.Sprintf("the agent was killed by signal %d (%s)", e.Signal, unix.SignalName(syscall.Signal(e.Signal)))
	case e.Code >= 0:
		return fmt.Sprintf("the agent exited with status %d", e.Code)
	default:
		return "the agent exited; its exit status is unknown (it was started before the daemon restarted)"
	}
}

// unwrapOp drops the "op id:" prefix of a *sandbox.Error, for a reason that
// names the sandbox elsewhere.
func unwrapOp(err error) error {
	var se *sandbox.Error
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}

// cutShort turns the failure of an exec or attach whose process had started into
// its result, when the failure is the agent's end: agent_lost, or killed when
// the sandbox is being deleted (a deliberate end is not a loss). ok is false
// for any other failure, which stays an error.
func (m *Manager) cutShort(id sandbox.ID, p sandbox.ProcessInfo, err error) (_ *sandbox.ExecResult, ok bool) {
	if !errors.Is(err, sandbox.ErrAgentLost) {
		return nil, false
	}
	m.mu.Lock()
	_, live := m.live[id]
	deleting := m.deleting[id]
	m.mu.Unlock()
	res := &sandbox.ExecResult{ProcessID: p.ID, PID: p.PID, ExitCode: -1, Reason: sandbox.ReasonAgentLost}
	if !p.StartedAt.IsZero() {
		res.Duration = time.Since(p.StartedAt)
	}
	if deleting || !live {
		res.Reason, res.Signal, res.ExitCode = sandbox.ReasonKilled, int(syscall.SIGKILL), 128+int(syscall.SIGKILL)
	}
	return res, true
}
