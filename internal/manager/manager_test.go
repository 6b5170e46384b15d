package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/internal/backend/fake"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/store"
)

// clock is an injected pair of clocks the tests move by hand: the wall
// clock and the monotonic one. Advance moves both, as time passing does;
// Jump moves the wall clock alone, as an operator or NTP step does.
type clock struct {
	mu      sync.Mutex
	t       time.Time
	elapsed time.Duration
}

func (c *clock) Elapsed() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.elapsed
}

func (c *clock) Jump(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.elapsed += d
	c.mu.Unlock()
}

type env struct {
	m     *Manager
	st    *store.Store
	clock *clock
	fakes []*fake.Driver
	opts  Options
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newEnv opens a store in a temp dir and a manager over fakes named names (one
// "fake" by default), recovered and ready. tweak may change the options.
func newEnv(t *testing.T, tweak func(*Options), names ...string) *env {
	t.Helper()
	if len(names) == 0 {
		names = []string{"fake"}
	}
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &env{st: st, clock: &clock{t: time.UnixMilli(1_800_000_000_000)}}
	for _, n := range names {
		d := fake.New(n)
		t.Cleanup(func() { d.Close() })
		e.fakes = append(e.fakes, d)
		e.opts.Drivers = append(e.opts.Drivers, NamedDriver{Name: n, Driver: d})
	}
	e.opts.Store = st
	e.opts.Policy = sandbox.DefaultPolicy()
	e.opts.Log = testLog(t)
	e.opts.Now = e.clock.Now
	e.opts.Elapsed = e.clock.Elapsed
	if tweak != nil {
		tweak(&e.opts)
	}
	e.m = e.start(t)
	return e
}

// start opens a manager on e's store and drivers and recovers it, as a daemon start.
func (e *env) start(t *testing.T) *Manager {
	t.Helper()
	m, err := New(t.Context(), e.opts)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	if err := m.Recover(t.Context()); err != nil {
		t.Fatalf("Recover = %v", err)
	}
	return m
}

func (e *env) create(t *testing.T, req sandbox.CreateRequest) sandbox.Sandbox {
	t.Helper()
	sb, err := e.m.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("Create(%+v) = %v", req, err)
	}
	return sb
}

func TestLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	a := e.create(t, sandbox.CreateRequest{Labels: map[string]string{"team": "a"}})
	if a.State != sandbox.StateRunning || a.Backend != "fake" || a.Isolation.Backend != "fake" {
		t.Errorf("Create = %+v, want running on fake", a)
	}
	if want := e.clock.Now().Add(300 * time.Second); !a.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want the policy's default TTL: %v", a.ExpiresAt, want)
	}
	b := e.create(t, sandbox.CreateRequest{Labels: map[string]string{"team": "b"}})

	got, err := e.m.Get(ctx, a.ID)
	if err != nil || got.ID != a.ID || got.State != sandbox.StateRunning || string(got.Saved) != "fake:"+string(a.ID) {
		t.Errorf("Get(%s) = %+v, %v", a.ID, got, err)
	}
	all, err := e.m.List(ctx, nil)
	if err != nil || len(all) != 2 {
		t.Errorf("List(nil) = %d sandboxes, %v; want 2", len(all), err)
	}
	only, _ := e.m.List(ctx, map[string]string{"team": "b"})
	if len(only) != 1 || only[0].ID != b.ID {
		t.Errorf("List(team=b) = %v, want [%s]", only, b.ID)
	}

	ttl := time.Hour
	upd, err := e.m.Update(ctx, a.ID, Update{Timeout: &ttl, Labels: map[string]string{"team": "c"}})
	if err != nil {
		t.Fatalf("Update = %v", err)
	}
	if !upd.ExpiresAt.Equal(e.clock.Now().Add(time.Hour)) || upd.Spec.Labels["team"] != "c" {
		t.Errorf("Update = %+v, want expiry in 1h and team=c", upd)
	}
	bad := time.Duration(0)
	if _, err := e.m.Update(ctx, a.ID, Update{Timeout: &bad}); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("Update(timeout 0) = %v, want ErrInvalid naming timeout", err)
	}

	if err := e.m.Delete(ctx, a.ID); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if n := e.fakes[0].Called("Destroy", a.ID); n != 1 {
		t.Errorf("Destroy called %d times, want 1", n)
	}
	err = e.m.Delete(ctx, a.ID)
	if !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), string(a.ID)) {
		t.Errorf("Delete twice = %v, want ErrNotFound naming %s", err, a.ID)
	}
	if _, err := e.m.Get(ctx, a.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
}

func TestUnknownID(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	unknown := sandbox.NewID()
	calls := map[string]func(sandbox.ID) error{
		"get":    func(id sandbox.ID) error { _, err := e.m.Get(ctx, id); return err },
		"delete": func(id sandbox.ID) error { return e.m.Delete(ctx, id) },
		"update": func(id sandbox.ID) error { _, err := e.m.Update(ctx, id, Update{}); return err },
		"exec": func(id sandbox.ID) error {
			_, err := e.m.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"true"}}, false, nil)
			return err
		},
		"read_file": func(id sandbox.ID) error { _, err := e.m.ReadFile(ctx, id, "/x", 0, 0); return err },
	}
	for op, call := range calls {
		for _, id := range []sandbox.ID{unknown, "not-an-id"} {
			err := call(id)
			want := fmt.Sprintf("%s %s: sandbox not found", op, id)
			if !errors.Is(err, sandbox.ErrNotFound) || err.Error() != want {
				t.Errorf("%s(%s) = %v, want %q", op, id, err, want)
			}
		}
	}
}

func TestCreateInvalid(t *testing.T) {
	e := newEnv(t, nil)
	_, err := e.m.Create(t.Context(), sandbox.CreateRequest{MemoryBytes: 1 * sandbox.MiB})
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "memory_mb") {
		t.Errorf("Create(1 MB) = %v, want ErrInvalid naming memory_mb", err)
	}
	if n := e.fakes[0].Called("Start", ""); n != 0 {
		t.Errorf("Start called %d times for an invalid spec", n)
	}
}

func TestStartFailureLeavesNothing(t *testing.T) {
	e := newEnv(t, nil)
	boom := errors.New("boom")
	e.fakes[0].FailNextStart(boom)
	_, err := e.m.Create(t.Context(), sandbox.CreateRequest{})
	if !errors.Is(err, boom) {
		t.Fatalf("Create = %v, want %v", err, boom)
	}
	var se *sandbox.Error
	if !errors.As(err, &se) || se.Op != "create" || se.ID == "" {
		t.Fatalf("Create error = %#v, want *sandbox.Error{Op: create, ID: set}", err)
	}
	if n := e.fakes[0].Called("Destroy", se.ID); n != 1 {
		t.Errorf("Destroy(%s) called %d times after a failed Start, want 1", se.ID, n)
	}
	if all, _ := e.m.List(t.Context(), nil); len(all) != 0 {
		t.Errorf("records after a failed create: %v", all)
	}
}

func TestRequiredLayerMissing(t *testing.T) {
	e := newEnv(t, nil)
	e.fakes[0].SetLayer(sandbox.LayerNetNS, sandbox.Missing)
	_, err := e.m.Create(t.Context(), sandbox.CreateRequest{})
	if !errors.Is(err, sandbox.ErrIsolation) || !strings.Contains(err.Error(), sandbox.LayerNetNS) {
		t.Fatalf("Create = %v, want ErrIsolation naming %s", err, sandbox.LayerNetNS)
	}
	id := sandbox.IDOf(err)
	if n := e.fakes[0].Called("Destroy", id); n != 1 {
		t.Errorf("Destroy(%s) called %d times, want 1", id, n)
	}
	if all, _ := e.m.List(t.Context(), nil); len(all) != 0 || len(e.fakes[0].Held()) != 0 {
		t.Errorf("left behind: records %v, held %v", all, e.fakes[0].Held())
	}
}

func TestNonSandboxBackendSkipsLayers(t *testing.T) {
	e := newEnv(t, nil, "local")
	e.fakes[0].SetSandbox(false)
	e.m.probeAll(t.Context())
	sb := e.create(t, sandbox.CreateRequest{})
	if sb.Isolation.Sandbox || len(sb.Spec.RequireLayers) != 0 {
		t.Errorf("Create on a non-sandbox backend = %+v, want no required layers and sandbox false", sb)
	}
}

func TestFallback(t *testing.T) {
	e := newEnv(t, nil, "first", "second")
	e.fakes[0].SetAvailable(false, "not on this host")
	e.m.probeAll(t.Context())
	sb := e.create(t, sandbox.CreateRequest{})
	if sb.Backend != "second" || sb.Isolation.Backend != "second" {
		t.Errorf("Create = backend %q, isolation.backend %q; want second", sb.Backend, sb.Isolation.Backend)
	}
	if n := e.fakes[0].Called("Start", ""); n != 0 {
		t.Errorf("the unavailable driver was started %d times", n)
	}
	h := e.m.Health(t.Context())
	if len(h) != 2 || h[0].Available || h[0].Primary || !h[1].Primary || len(h[0].Reasons) == 0 {
		t.Errorf("Health = %+v, want first unavailable with reasons, second primary", h)
	}
}

func TestBurstWaitsInQueue(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.MaxConcurrentCreates = 4 })
	e.fakes[0].SetStartDelay(2 * time.Millisecond)
	const n = 200
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := e.m.Create(t.Context(), sandbox.CreateRequest{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Create in a burst = %v", err)
		}
	}
	if all, _ := e.m.List(t.Context(), nil); len(all) != n {
		t.Errorf("List = %d sandboxes, want %d", len(all), n)
	}
}

func TestQueueTimeout(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.MaxConcurrentCreates = 1
		o.QueueTimeout = 20 * time.Millisecond
	})
	e.fakes[0].SetStartDelay(time.Hour) // held until its ctx ends
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() {
		_, err := e.m.Create(ctx, sandbox.CreateRequest{})
		first <- err
	}()
	for e.fakes[0].Called("Start", "") == 0 { // the slot is taken
		time.Sleep(time.Millisecond)
	}
	_, err := e.m.Create(t.Context(), sandbox.CreateRequest{})
	if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("Create with a full queue = %v, want ErrUnavailable", err)
	}
	if after, ok := RetryAfter(err); !ok || after <= 0 {
		t.Errorf("RetryAfter(%v) = %v, %v; want a hint", err, after, ok)
	}
	cancel()
	if err := <-first; err == nil {
		t.Errorf("a create whose ctx ended mid-start succeeded")
	}
	if all, _ := e.m.List(t.Context(), nil); len(all) != 0 {
		t.Errorf("records after a cancelled create: %v", all)
	}
}

func TestTTLExpiry(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, sandbox.CreateRequest{Timeout: 10 * time.Second})
	keep := e.create(t, sandbox.CreateRequest{Timeout: time.Hour})
	e.clock.Advance(5 * time.Second)
	e.m.nudge()
	if _, err := e.m.Get(t.Context(), sb.ID); err != nil {
		t.Fatalf("Get before expiry = %v", err)
	}
	e.clock.Advance(6 * time.Second)
	e.m.nudge()
	waitGone(t, e.m, sb.ID)
	if n := e.fakes[0].Called("Destroy", sb.ID); n != 1 {
		t.Errorf("Destroy of the expired sandbox called %d times, want 1", n)
	}
	if _, err := e.m.Get(t.Context(), keep.ID); err != nil {
		t.Errorf("Get(sandbox with 1h TTL) = %v", err)
	}
}

// RL-07: the wall clock jumping an hour either way expires nothing; time
// passing on the monotonic clock still does.
func TestTTLWallClockJump(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	sb := e.create(t, sandbox.CreateRequest{Timeout: 10 * time.Second})
	keep := e.create(t, sandbox.CreateRequest{Timeout: time.Hour})
	for _, jump := range []time.Duration{time.Hour, -2 * time.Hour, time.Hour} {
		e.clock.Jump(jump)
		if next, ok := e.m.expireDue(ctx); !ok || next != 10*time.Second {
			t.Errorf("after a %s jump the reaper's next due time = %s, %v; want 10s, true", jump, next, ok)
		}
		for _, id := range []sandbox.ID{sb.ID, keep.ID} {
			if _, err := e.m.Get(ctx, id); err != nil {
				t.Fatalf("Get(%s) after a %s wall-clock jump = %v; want it kept", id, jump, err)
			}
		}
	}
	// A PATCH during a jump: expires_at is on the wall clock as it reads
	// now; the time left is what the caller asked for.
	e.clock.Jump(time.Hour)
	ttl := 20 * time.Second
	upd, err := e.m.Update(ctx, sb.ID, Update{Timeout: &ttl})
	if err != nil {
		t.Fatalf("Update = %v", err)
	}
	if want := e.clock.Now().Add(ttl); !upd.ExpiresAt.Equal(want) {
		t.Errorf("expires_at after PATCH = %v, want %v", upd.ExpiresAt, want)
	}
	e.clock.Advance(19 * time.Second)
	e.m.expireDue(ctx)
	if _, err := e.m.Get(ctx, sb.ID); err != nil {
		t.Fatalf("Get 19 s into a 20 s TTL = %v", err)
	}
	e.clock.Advance(time.Second)
	e.m.expireDue(ctx)
	if _, err := e.m.Get(ctx, sb.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get after the TTL ran out on the monotonic clock = %v, want not found", err)
	}
	if _, err := e.m.Get(ctx, keep.ID); err != nil {
		t.Errorf("Get(sandbox with 1h TTL) = %v", err)
	}
}

// waitGone waits until id is gone. It bounds the wait so a broken reaper fails
// the test instead of hanging it; nothing is asserted about how fast.
func waitGone(t *testing.T, m *Manager, id sandbox.ID) {
	t.Helper()
	for range 30_000 {
		if _, err := m.Get(t.Context(), id); errors.Is(err, sandbox.ErrNotFound) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("sandbox %s did not expire", id)
}

func TestRecover(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	d := e.fakes[0]
	keep := e.create(t, sandbox.CreateRequest{})
	expired := e.create(t, sandbox.CreateRequest{Timeout: 10 * time.Second})
	lost := e.create(t, sandbox.CreateRequest{})
	// A record whose saved state no longer matches: Recover fails for it.
	e.st.UpdateSandbox(ctx, lost.ID, func(r *sandbox.Sandbox) error { r.Saved = []byte("stale"); return nil })
	// An interrupted create and an interrupted delete.
	interrupted := map[sandbox.State]sandbox.ID{}
	for _, st := range []sandbox.State{sandbox.StateCreating, sandbox.StateDeleting} {
		id := sandbox.NewID()
		d.Hold(id)
		if err := e.st.PutSandbox(ctx, sandbox.Sandbox{ID: id, State: st, Backend: "fake", CreatedAt: e.clock.Now()}); err != nil {
			t.Fatal(err)
		}
		interrupted[st] = id
	}
	// A record of a backend this configuration does not have.
	other := sandbox.NewID()
	e.st.PutSandbox(ctx, sandbox.Sandbox{ID: other, State: sandbox.StateRunning, Backend: "gone",
		CreatedAt: e.clock.Now(), ExpiresAt: e.clock.Now().Add(time.Hour)})
	// Resources no record names.
	orphan := sandbox.NewID()
	d.Hold(orphan)

	// Restart: a new manager on the same store and driver.
	if err := e.m.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	e.clock.Advance(20 * time.Second)
	m := e.start(t)

	got, err := m.Get(ctx, keep.ID)
	if err != nil || got.State != sandbox.StateRunning {
		t.Errorf("Get(running sandbox) after restart = %+v, %v; want running", got, err)
	}
	if n := d.Called("Recover", keep.ID); n != 1 {
		t.Errorf("Recover(%s) called %d times, want 1", keep.ID, n)
	}
	if _, err := m.client(ctx, "exec", keep.ID); err != nil {
		t.Errorf("no agent client for the re-adopted sandbox: %v", err)
	}
	for name, id := range map[string]sandbox.ID{"expired": expired.ID, "lost": lost.ID, "creating": interrupted[sandbox.StateCreating],
		"deleting": interrupted[sandbox.StateDeleting], "orphan": orphan} {
		if _, err := m.Get(ctx, id); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Get(%s sandbox) after restart = %v, want ErrNotFound", name, err)
		}
		if n := d.Called("Destroy", id); n != 1 {
			t.Errorf("Destroy(%s sandbox) called %d times, want 1", name, n)
		}
	}
	if held := d.Held(); len(held) != 1 || held[0] != keep.ID {
		t.Errorf("driver holds %v after recovery, want only %s", held, keep.ID)
	}
	rr, err := m.Get(ctx, other)
	if err != nil || rr.State != sandbox.StateRecoveryRequired || !strings.Contains(rr.Error, "gone") {
		t.Errorf("Get(sandbox of an unconfigured backend) = %+v, %v; want recovery_required naming the backend", rr, err)
	}
	if err := m.Delete(ctx, other); err != nil {
		t.Errorf("Delete(recovery_required) = %v", err)
	}
}

func TestRecoverFailureDestroys(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, sandbox.CreateRequest{})
	e.m.Close(t.Context())
	e.fakes[0].FailRecover(fmt.Errorf("agent gone: %w", sandbox.ErrNotFound))
	m := e.start(t)
	if _, err := m.Get(t.Context(), sb.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get after a failed recover = %v, want ErrNotFound", err)
	}
	if n := e.fakes[0].Called("Destroy", sb.ID); n != 1 {
		t.Errorf("Destroy called %d times, want 1", n)
	}
}

func TestDestroyFailureKeepsRecord(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	sb := e.create(t, sandbox.CreateRequest{})
	e.fakes[0].FailNextDestroy(errors.New("EBUSY"))
	if err := e.m.Delete(ctx, sb.ID); err == nil {
		t.Fatal("Delete with a failing Destroy succeeded")
	}
	got, err := e.m.Get(ctx, sb.ID)
	if err != nil || got.State != sandbox.StateQuarantined || !strings.Contains(got.Error, "EBUSY") {
		t.Errorf("Get after a failed teardown = %+v, %v; want state quarantined naming the cause", got, err)
	}
	if q := e.m.Quarantined(ctx); len(q) != 1 || q[0] != sb.ID {
		t.Errorf("Quarantined = %v, want [%s]", q, sb.ID)
	}
	_, err = e.m.Exec(ctx, sb.ID, sandbox.ExecRequest{Argv: []string{"true"}}, false, nil)
	if !errors.Is(err, sandbox.ErrWrongState) || !strings.Contains(err.Error(), "quarantined") {
		t.Errorf("Exec on a quarantined sandbox = %v, want ErrWrongState naming the state", err)
	}
	if err := e.m.Delete(ctx, sb.ID); err != nil {
		t.Errorf("Delete retry = %v", err)
	}
}

func TestCloseStopsAdmitting(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, sandbox.CreateRequest{})
	if err := e.m.Close(t.Context()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	_, err := e.m.Create(t.Context(), sandbox.CreateRequest{})
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("Create after Close = %v, want ErrUnavailable: shutting down", err)
	}
	if n := e.fakes[0].Called("Destroy", sb.ID); n != 0 {
		t.Errorf("Close destroyed a sandbox; sandboxes keep running")
	}
}

func TestAuthenticate(t *testing.T) {
	e := newEnv(t, nil)
	secret, k, err := e.st.CreateKey(t.Context(), "admin")
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.m.Authenticate(t.Context(), secret)
	if err != nil || got.ID != k.ID || got.Name != "admin" {
		t.Errorf("Authenticate(secret) = %+v, %v", got, err)
	}
	for _, bad := range []string{"", "sbx_nope", secret + "x"} {
		_, err := e.m.Authenticate(t.Context(), bad)
		if !errors.Is(err, sandbox.ErrUnauthenticated) || (bad != "" && strings.Contains(err.Error(), bad)) {
			t.Errorf("Authenticate(bad) = %v, want ErrUnauthenticated not echoing the token", err)
		}
	}
}

// A call whose agent connection breaks because its sandbox is deleted meanwhile
// fails as not found; while the sandbox lives, a broken connection is a loss.
func TestCallCutByDelete(t *testing.T) {
	e := newEnv(t, nil)
	sb := e.create(t, sandbox.CreateRequest{})
	broken := &sandbox.Error{Op: "grep", ID: sb.ID, Err: fmt.Errorf("%w: the connection to the agent broke", sandbox.ErrAgentLost)}
	if err := e.m.callErr("grep", sb.ID, broken); !errors.Is(err, sandbox.ErrAgentLost) {
		t.Fatalf("live sandbox: callErr = %v, want agent lost", err)
	}
	if err := e.m.Delete(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	err := e.m.callErr("grep", sb.ID, broken)
	if !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), string(sb.ID)) || !strings.Contains(err.Error(), "deleted or expired") {
		t.Fatalf("deleted sandbox: callErr = %v, want not found naming %s", err, sb.ID)
	}
}
