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
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sbx/internal/agentclient"
	"sbx/internal/backend"
	"sbx/internal/logkey"
	"sbx/internal/sandbox"
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
	// handoverPoll is how often a watcher whose sandbox is being handed from the
	// pool to a caller looks again for where it went.
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
	// ctx is the watcher's lifetime: it ends at unwatch or Close.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// silent receives, once, why the heartbeat gave the agent up.
	silent chan string

	// misses and last are the heartbeat's: only its loop touches them.
	misses int
	last   error
}

// watch starts a watcher for sandbox id unless one runs already (a warm sandbox
// handed out keeps the one it had in the pool). After Close it does nothing.
func (m *Manager) watch(id sandbox.ID, backendName string, client *agentclient.Client) {
	d := m.driver(backendName)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || d == nil || m.watchers[id] != nil {
		return
	}
	ctx, cancel := context.WithCancelCause(m.lifetime)
	w := &watcher{id: id, backend: backendName, driver: d, client: client, ctx: ctx, cancel: cancel,
		silent: make(chan string, 1)}
	m.watchers[id] = w
	m.watching.Go(func() { m.runWatcher(ctx, w) })
	if !m.beating {
		m.beating = true
		m.watching.Go(m.heartbeat)
	}
}

// unwatch ends sandbox id's watcher, if any.
func (m *Manager) unwatch(id sandbox.ID) {
	m.mu.Lock()
	m.unwatchLocked(id)
	m.mu.Unlock()
}

// unwatchLocked is unwatch with m.mu held. Whatever the watcher sees afterwards
// is not taken for a loss: callers unwatch before they stop or destroy.
func (m *Manager) unwatchLocked(id sandbox.ID) {
	if w := m.watchers[id]; w != nil {
		delete(m.watchers, id)
		w.cancel(errUnwatched)
	}
}

// runWatcher waits for the agent's exit, or for the heartbeat to give it up,
// until ctx ends (unwatch, Close).
func (m *Manager) runWatcher(ctx context.Context, w *watcher) {
	exited := make(chan sandbox.Exit, 1)
	waiting := make(chan struct{})
	go func() { // ended by ctx at the latest; runWatcher waits for it
		defer close(waiting)
		exit, err := w.driver.Wait(ctx, w.id)
		switch {
		case err == nil:
			exited <- exit
		case ctx.Err() == nil:
			m.log.DebugContext(ctx, "the driver cannot wait for this agent; the heartbeat alone watches it",
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
		m.lose(ctx, w, describeExit(exit), false)
	case why := <-w.silent:
		select {
		case exit := <-exited: // it ended meanwhile: its exit says more than silence
			m.lose(ctx, w, describeExit(exit), false)
		default:
			m.lose(ctx, w, why, true)
		}
	}
}

// heartbeat checks every watched agent once per interval until Close. A round
// runs its checks in parallel and ends when the slowest has answered or timed
// out, within the interval, so rounds do not overlap.
func (m *Manager) heartbeat() {
	t := time.NewTicker(m.beat)
	defer t.Stop()
	sem := make(chan struct{}, heartbeatParallelism)
	var ws []*watcher
	for {
		select {
		case <-m.lifetime.Done():
			return
		case <-t.C:
		}
		ws = ws[:0]
		m.mu.Lock()
		for _, w := range m.watchers {
			ws = append(ws, w)
		}
		m.mu.Unlock()
		var round sync.WaitGroup
		for _, w := range ws {
			sem <- struct{}{}
			round.Go(func() {
				defer func() { <-sem }()
				m.check(w)
			})
		}
		round.Wait()
	}
}

// check is one health check of w's agent; the heartbeatMisses-th miss in a row
// hands the agent to its watcher as lost.
func (m *Manager) check(w *watcher) {
	if w.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(w.ctx, m.beat*3/4)
	err := w.client.Health(ctx)
	cancel()
	if w.ctx.Err() != nil {
		return // unwatched or closing meanwhile: not a miss
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
// one is discarded. A sandbox on its way from the pool to a caller is neither
// for a moment: lose waits for it to land. An unwatched sandbox (deleted,
// discarded, or the manager closing) is left alone.
func (m *Manager) lose(ctx context.Context, w *watcher, why string, kill bool) {
	for {
		m.mu.Lock()
		if m.watchers[w.id] != w {
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
