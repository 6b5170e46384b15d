package manager

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// lossBound is how soon an agent's loss must show (SECURITY.md PR-03, RL-03).
const lossBound = 5 * time.Second

// logRecorder keeps the messages logged at Warn and above, and passes every
// record on to the test's log.
type logRecorder struct {
	slog.Handler
	mu   *sync.Mutex
	msgs *[]string
}

func (h logRecorder) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.mu.Lock()
		*h.msgs = append(*h.msgs, r.Message)
		h.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}

func (h logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return logRecorder{h.Handler.WithAttrs(as), h.mu, h.msgs}
}

func (h logRecorder) WithGroup(name string) slog.Handler {
	return logRecorder{h.Handler.WithGroup(name), h.mu, h.msgs}
}

// recordLog makes e's next manager log through a recorder; the returned
// function lists the Warn+ messages so far.
func recordLog(t *testing.T) (func(*Options), func() []string) {
	var mu sync.Mutex
	var msgs []string
	tweak := func(o *Options) { o.Log = slog.New(logRecorder{testLog(t).Handler(), &mu, &msgs}) }
	return tweak, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(msgs)
	}
}

func lossLogged(msgs []string) bool {
	return slices.ContainsFunc(msgs, func(m string) bool {
		return strings.Contains(m, "agent lost") || strings.Contains(m, "agent of a warm sandbox lost")
	})
}

// watcherGoroutines counts the goroutines running an agent watcher.
func watcherGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return strings.Count(string(buf), "manager.(*watchers).run(")
}

// eventually polls cond for up to limit; it reports whether cond came true.
func eventually(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitState polls the record of id until its state is want, for up to limit.
func waitState(t *testing.T, m *Manager, id sandbox.ID, want sandbox.State, limit time.Duration) sandbox.Sandbox {
	t.Helper()
	var sb sandbox.Sandbox
	var err error
	if !eventually(limit, func() bool {
		sb, err = m.Get(t.Context(), id)
		return err == nil && sb.State == want
	}) {
		t.Fatalf("sandbox %s = %+v, %v after %v; want state %s", id, sb, err, limit, want)
	}
	return sb
}

// execAsync starts an exec on the fake agent (which never ends on its own) and
// returns its outcome once it ends.
func execAsync(t *testing.T, m *Manager, id sandbox.ID) (started <-chan struct{}, done <-chan execOutcome) {
	t.Helper()
	s := make(chan struct{})
	d := make(chan execOutcome, 1)
	go func() {
		var once sync.Once
		res, err := m.Exec(context.Background(), id, sandbox.ExecRequest{Shell: "sleep 1000"}, true, func(ev sandbox.ExecEvent) error {
			if ev.Started != nil {
				once.Do(func() { close(s) })
			}
			return nil
		})
		d <- execOutcome{res, err}
	}()
	return s, d
}

type execOutcome struct {
	res *sandbox.ExecResult
	err error
}

// awaitExec waits for an exec to end: within limit when limit > 0 (the loss
// bound), else within a minute as a hang guard.
func awaitExec(t *testing.T, done <-chan execOutcome, limit time.Duration) execOutcome {
	t.Helper()
	if limit <= 0 {
		limit = time.Minute
	}
	select {
	case o := <-done:
		return o
	case <-time.After(limit):
		t.Fatalf("the exec in flight did not end within %v", limit)
		return execOutcome{}
	}
}

func awaitStarted(t *testing.T, started <-chan struct{}) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the exec did not start")
	}
}

// An agent that dies is seen through the driver's Wait: within the bound the
// record says error, agent_lost and the signal; the exec in flight ends with
// reason agent_lost; later calls get ErrAgentLost naming the sandbox and its
// state; delete still works and ends the watcher.
func TestAgentExitIsLost(t *testing.T) {
	tweak, logged := recordLog(t)
	e := newEnv(t, tweak)
	ctx := t.Context()
	sb := e.create(t, sandbox.CreateRequest{})
	other := e.create(t, sandbox.CreateRequest{})
	started, done := execAsync(t, e.m, sb.ID)
	awaitStarted(t, started)

	e.fakes[0].Kill(sb.ID, sandbox.Exit{Code: 137, Signal: int(syscall.SIGKILL), Reason: sandbox.ReasonSignaled})
	o := awaitExec(t, done, lossBound)
	if o.err != nil || o.res == nil || o.res.Reason != sandbox.ReasonAgentLost || o.res.ProcessID != "fake-1" || o.res.PID != 42 {
		t.Errorf("exec in flight when the agent died = %+v, %v; want a result, reason agent_lost, naming process fake-1", o.res, o.err)
	}
	got := waitState(t, e.m, sb.ID, sandbox.StateError, lossBound)
	if !strings.Contains(got.Error, "agent_lost") || !strings.Contains(got.Error, "signal 9") {
		t.Errorf("record error = %q, want agent_lost and the signal", got.Error)
	}
	stored, err := e.st.GetSandbox(ctx, sb.ID)
	if err != nil || stored.State != sandbox.StateError {
		t.Errorf("store: %+v, %v; want state error persisted", stored, err)
	}
	_, err = e.m.Exec(ctx, sb.ID, sandbox.ExecRequest{Argv: []string{"true"}}, false, nil)
	if !errors.Is(err, sandbox.ErrAgentLost) || !strings.Contains(err.Error(), string(sb.ID)) || !strings.Contains(err.Error(), "error") {
		t.Errorf("Exec after the loss = %v, want ErrAgentLost naming %s and its state", err, sb.ID)
	}
	if _, err := e.m.ReadFile(ctx, sb.ID, "/etc/hostname", 0, 0); !errors.Is(err, sandbox.ErrAgentLost) {
		t.Errorf("ReadFile after the loss = %v, want ErrAgentLost", err)
	}
	if !lossLogged(logged()) {
		t.Errorf("no loss logged: %q", logged())
	}
	// The sibling is untouched (control).
	if got, err := e.m.Get(ctx, other.ID); err != nil || got.State != sandbox.StateRunning {
		t.Errorf("sibling after the loss = %+v, %v; want running", got, err)
	}
	if err := e.m.Delete(ctx, sb.ID); err != nil {
		t.Fatalf("Delete of a lost sandbox = %v", err)
	}
	if _, err := e.m.Get(ctx, sb.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
	if e.fakes[0].Held() == nil || slices.Contains(e.fakes[0].Held(), sb.ID) {
		t.Errorf("driver still holds %s after Delete: %v", sb.ID, e.fakes[0].Held())
	}
	if !eventually(time.Minute, func() bool { return watcherGoroutines() == 1 }) {
		t.Errorf("%d watcher goroutines after the lost sandbox's delete, want 1 (the sibling's)", watcherGoroutines())
	}
}

// An agent that lives but stops answering is lost by the heartbeat: the exec in
// flight ends with agent_lost, the record says why, and the sandbox's processes
// are killed so nothing runs unwatched.
func TestHungAgentIsLost(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Heartbeat = 300 * time.Millisecond }) // lost within 1.1 s
	sb := e.create(t, sandbox.CreateRequest{})
	started, done := execAsync(t, e.m, sb.ID)
	awaitStarted(t, started)

	e.fakes[0].Hang(sb.ID)
	o := awaitExec(t, done, lossBound)
	if o.err != nil || o.res == nil || o.res.Reason != sandbox.ReasonAgentLost {
		t.Errorf("exec in flight when the agent hung = %+v, %v; want reason agent_lost", o.res, o.err)
	}
	got := waitState(t, e.m, sb.ID, sandbox.StateError, time.Second) // the exec ended after the loss was declared
	if !strings.Contains(got.Error, "agent_lost") || !strings.Contains(got.Error, "health") {
		t.Errorf("record error = %q, want agent_lost and the missed health checks", got.Error)
	}
	if !eventually(time.Minute, func() bool { return e.fakes[0].Called("Stop", sb.ID) == 1 }) {
		t.Errorf("Stop(%s) called %d times, want 1", sb.ID, e.fakes[0].Called("Stop", sb.ID))
	}
	if err := e.m.Delete(t.Context(), sb.ID); err != nil {
		t.Errorf("Delete of a lost sandbox = %v", err)
	}
}

// Deleting a sandbox ends its agent deliberately: no loss is recorded or
// logged, the exec in flight ends killed, not agent_lost, and the watcher ends.
func TestDeleteIsNotAgentLoss(t *testing.T) {
	tweak, logged := recordLog(t)
	e := newEnv(t, tweak)
	sb := e.create(t, sandbox.CreateRequest{})
	if !eventually(time.Minute, func() bool { return watcherGoroutines() == 1 }) {
		t.Fatalf("%d watcher goroutines for one sandbox, want 1", watcherGoroutines())
	}
	started, done := execAsync(t, e.m, sb.ID)
	awaitStarted(t, started)
	if err := e.m.Delete(t.Context(), sb.ID); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	o := awaitExec(t, done, 0)
	if o.err != nil || o.res == nil || o.res.Reason != sandbox.ReasonKilled {
		t.Errorf("exec in flight at Delete = %+v, %v; want reason killed", o.res, o.err)
	}
	if !eventually(time.Minute, func() bool { return watcherGoroutines() == 0 }) {
		t.Errorf("%d watcher goroutines after Delete, want 0", watcherGoroutines())
	}
	e.m.watchers.mu.Lock()
	n := len(e.m.watchers.byID)
	e.m.watchers.mu.Unlock()
	if n != 0 {
		t.Errorf("%d watchers registered after Delete, want 0", n)
	}
	if lossLogged(logged()) {
		t.Errorf("a deliberate delete was logged as a loss: %q", logged())
	}
}

// TTL expiry ends the agent deliberately too.
func TestExpiryIsNotAgentLoss(t *testing.T) {
	tweak, logged := recordLog(t)
	e := newEnv(t, tweak)
	sb := e.create(t, sandbox.CreateRequest{Timeout: 10 * time.Second})
	e.clock.Advance(11 * time.Second)
	e.m.nudge()
	waitGone(t, e.m, sb.ID)
	if !eventually(time.Minute, func() bool { return watcherGoroutines() == 0 }) {
		t.Errorf("%d watcher goroutines after expiry, want 0", watcherGoroutines())
	}
	if lossLogged(logged()) {
		t.Errorf("an expiry was logged as a loss: %q", logged())
	}
}

// Close ends every watcher before it returns, and a shutdown is no loss: the
// records stay running. Sandboxes re-adopted by the next start are watched
// again, and their loss is seen (the pidfd path of a real driver).
func TestCloseEndsWatchersAndRecoverRewatches(t *testing.T) {
	tweak, logged := recordLog(t)
	e := newEnv(t, tweak)
	ctx := t.Context()
	var ids []sandbox.ID
	for range 3 {
		ids = append(ids, e.create(t, sandbox.CreateRequest{}).ID)
	}
	if !eventually(time.Minute, func() bool { return watcherGoroutines() == 3 }) {
		t.Fatalf("%d watcher goroutines for 3 sandboxes, want 3", watcherGoroutines())
	}
	if err := e.m.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if n := watcherGoroutines(); n != 0 {
		t.Errorf("%d watcher goroutines after Close returned, want 0", n)
	}
	for _, id := range ids {
		if sb, err := e.st.GetSandbox(ctx, id); err != nil || sb.State != sandbox.StateRunning {
			t.Errorf("record of %s after Close = %+v, %v; want running", id, sb, err)
		}
	}
	if lossLogged(logged()) {
		t.Errorf("a shutdown was logged as a loss: %q", logged())
	}

	m := e.start(t)
	if !eventually(time.Minute, func() bool { return watcherGoroutines() == 3 }) {
		t.Fatalf("%d watcher goroutines after recovery of 3 sandboxes, want 3", watcherGoroutines())
	}
	e.fakes[0].Kill(ids[0], sandbox.Exit{Code: 3, Reason: sandbox.ReasonExited})
	got := waitState(t, m, ids[0], sandbox.StateError, lossBound)
	if !strings.Contains(got.Error, "agent_lost") || !strings.Contains(got.Error, "status 3") {
		t.Errorf("record of a re-adopted sandbox whose agent exited = %q, want agent_lost and status 3", got.Error)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if n := watcherGoroutines(); n != 0 {
		t.Errorf("%d watcher goroutines after the second Close, want 0", n)
	}
}

// A warm sandbox whose agent dies is discarded, and the pool refills.
func TestWarmAgentLossDiscards(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.PoolSize = 1 })
	waitReady(t, e.m, 1)
	e.m.pool.mu.Lock()
	id := e.m.pool.ready[0].id
	e.m.pool.mu.Unlock()
	e.fakes[0].Kill(id, sandbox.Exit{Code: 137, Signal: int(syscall.SIGKILL), Reason: sandbox.ReasonSignaled})
	if !eventually(lossBound, func() bool { return e.fakes[0].Called("Destroy", id) == 1 }) {
		t.Fatalf("the warm sandbox whose agent died was not destroyed")
	}
	if _, err := e.st.GetSandbox(t.Context(), id); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("record of the discarded warm sandbox = %v, want ErrNotFound", err)
	}
	var fresh sandbox.ID
	if !eventually(time.Minute, func() bool {
		e.m.pool.mu.Lock()
		defer e.m.pool.mu.Unlock()
		if len(e.m.pool.ready) == 1 {
			fresh = e.m.pool.ready[0].id
		}
		return fresh != "" && fresh != id
	}) {
		t.Fatalf("the pool did not refill")
	}
	// What the pool hands out now serves.
	sb := e.create(t, sandbox.CreateRequest{})
	if sb.ID != fresh {
		t.Errorf("Create = %s, want the refilled warm sandbox %s", sb.ID, fresh)
	}
	if _, err := e.m.client(t.Context(), "exec", sb.ID); err != nil {
		t.Errorf("client of the handed-out sandbox: %v", err)
	}
}
