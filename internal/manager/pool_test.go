package manager

import (
	"context"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// waitReady polls the pool until it holds n ready sandboxes; the deadline is a
// hang guard, not a timing assertion.
func waitReady(t *testing.T, m *Manager, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for m.Pool().Ready < n {
		if time.Now().After(deadline) {
			t.Fatalf("pool ready = %d, want %d", m.Pool().Ready, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPoolHandsOutWarmSandboxes(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.PoolSize = 2 })
	waitReady(t, e.m, 2)

	// Warm sandboxes are the daemon's own: not listed.
	if l, err := e.m.List(t.Context(), nil); err != nil || len(l) != 0 {
		t.Fatalf("List with only warm sandboxes = %v, %v; want none", l, err)
	}

	sb, err := e.m.Create(t.Context(), sandbox.CreateRequest{MemoryBytes: 256 * sandbox.MiB, Labels: map[string]string{"a": "b"}})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if sb.State != sandbox.StateRunning || sb.Spec.MemoryBytes != 256*sandbox.MiB || sb.Spec.Labels["a"] != "b" {
		t.Errorf("handed-out sandbox = %+v", sb)
	}
	if got := e.fakes[0].Called("Resize", sb.ID); got != 1 {
		t.Errorf("Resize(%s) called %d times, want 1 (limits differ from the pool's)", sb.ID, got)
	}
	if e.fakes[0].Called("Start", sb.ID) != 1 {
		t.Errorf("the handed-out sandbox was not one the pool started")
	}
	got, err := e.m.Get(t.Context(), sb.ID)
	if err != nil || got.State != sandbox.StateRunning {
		t.Errorf("Get(%s) = %+v, %v", sb.ID, got, err)
	}
	// What the hand-out answered is what it stored.
	if !reflect.DeepEqual(got.Isolation, sb.Isolation) || got.Backend != sb.Backend || got.OwnerKey != sb.OwnerKey ||
		!got.CreatedAt.Equal(sb.CreatedAt) || !got.ExpiresAt.Equal(sb.ExpiresAt) ||
		!reflect.DeepEqual(got.Spec.Labels, sb.Spec.Labels) || got.Spec.MemoryBytes != sb.Spec.MemoryBytes {
		t.Errorf("hand-out answered %+v, stored %+v", sb, got)
	}
	// The pool refills.
	waitReady(t, e.m, 2)

	// A request the pool cannot serve (its env is fixed at start) starts cold.
	cold, err := e.m.Create(t.Context(), sandbox.CreateRequest{Env: map[string]string{"K": "v"}})
	if err != nil {
		t.Fatalf("Create with env: %v", err)
	}
	if e.fakes[0].Called("Resize", cold.ID) != 0 {
		t.Errorf("a cold create was resized")
	}

	// Close destroys the warm ones, and only those.
	e.m.Close(t.Context())
	held := e.fakes[0].Held()
	if len(held) != 2 || !slices.Contains(held, sb.ID) || !slices.Contains(held, cold.ID) {
		t.Errorf("after Close the driver holds %v, want exactly the two handed-out sandboxes", held)
	}
}

func TestRecoverDestroysWarmLeftovers(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.PoolSize = 1 })
	waitReady(t, e.m, 1)
	rows, _ := e.st.ListSandboxes(t.Context())
	if len(rows) != 1 || rows[0].State != sandbox.StateWarm {
		t.Fatalf("store rows = %+v, want one warm", rows)
	}
	warmID := rows[0].ID
	// A crash: no Close. The next start destroys what the pool left.
	e.opts.PoolSize = 0
	e.m = e.start(t)
	if e.fakes[0].Called("Destroy", warmID) == 0 {
		t.Errorf("Recover did not destroy warm sandbox %s", warmID)
	}
	if _, err := e.st.GetSandbox(t.Context(), warmID); err == nil {
		t.Errorf("warm record %s survived Recover", warmID)
	}
}

// A refill waits while a create or exec is in flight (up to quietMax) and for
// quietGap after the last one ended; with nobody calling it goes at once. Only
// lower bounds are asserted, and a generous upper one.
func TestRefillWaitsForQuiet(t *testing.T) {
	p := &warmPool{stopping: make(chan struct{})}
	elapsed := func() time.Duration {
		start := time.Now()
		p.quiet()
		return time.Since(start)
	}
	if d := elapsed(); d > time.Second {
		t.Errorf("no caller ever: quiet took %v", d)
	}
	done := p.calling()
	if d := elapsed(); d < quietMax {
		t.Errorf("a caller in flight: quiet returned after %v, before quietMax %v", d, quietMax)
	}
	done()
	if d := elapsed(); d < quietGap/2 {
		t.Errorf("a caller just ended: quiet returned after %v; want about quietGap %v", d, quietGap)
	}
	close(p.stopping)
	p.calling()
	if d := elapsed(); d > time.Second {
		t.Errorf("closing: quiet took %v", d)
	}
}

// A refilled sandbox is watched before a create can take it. Watched after, a
// hand-out that failed in between would discard it with no watcher to remove,
// and the watch that followed would outlive the sandbox until Close; so would
// one that followed a hand-out and a Delete.
func TestRefillWatchesBeforeHandOut(t *testing.T) {
	w := &warm{id: sandbox.NewID(), driver: NamedDriver{Name: "fake"}}
	var p *warmPool
	var taken *warm
	p = newWarmPool(1, 1, make(chan struct{}, 1),
		func(context.Context) (*warm, error) { return w, nil },
		func(context.Context, *warm) {},
		func(*warm) { taken = p.take("fake", w.spec) }) // a create at the moment it is watched
	if !p.refillOne(t.Context()) {
		t.Fatalf("refillOne = false, want true after a start")
	}
	if taken != nil {
		t.Errorf("a create took warm sandbox %s before it was watched", w.id)
	}
	if got := p.take("fake", w.spec); got != w {
		t.Errorf("take after the refill = %v, want %s", got, w.id)
	}
}

// A create answers the record it stored, cold or from the pool, with an
// idempotency key or without: the commit writes the manager's record whole
// instead of reading it back, so the two must not drift.
func TestCreateAnswersWhatItStored(t *testing.T) {
	for _, pool := range []int{0, 1} {
		e := newEnv(t, func(o *Options) { o.PoolSize = pool })
		e.clock.mu.Lock()
		e.clock.t = e.clock.t.Add(1234567 * time.Nanosecond) // between milliseconds, which the store keeps
		e.clock.mu.Unlock()
		waitReady(t, e.m, pool)
		for _, key := range []string{"", "op-1"} {
			req := sandbox.CreateRequest{Labels: map[string]string{"k": key}}
			var sb sandbox.Sandbox
			var err error
			if key == "" {
				sb, err = e.m.Create(t.Context(), req)
			} else {
				sb, _, err = e.m.CreateIdempotent(t.Context(), req, key)
			}
			if err != nil {
				t.Fatalf("pool %d, key %q: Create: %v", pool, key, err)
			}
			got, err := e.m.Get(t.Context(), sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			sb.Spec.Env, got.Spec.Env = nil, nil
			if !reflect.DeepEqual(got, sb) {
				t.Errorf("pool %d, key %q: create answered\n%+v\nGet reads\n%+v", pool, key, sb, got)
			}
			waitReady(t, e.m, pool)
		}
	}
}

// A hand-out takes the sandbox readied last: the one idle the shortest,
// whose caches the machine has evicted least (on the development VM its
// first exec took 0.2-0.3 ms less than the oldest's). One that does not fit
// is passed over; the rest stay in their order.
func TestTakeNewestFirst(t *testing.T) {
	p := newWarmPool(4, 1, nil, nil, nil, nil)
	spec := sandbox.Spec{Template: "default", MemoryBytes: sandbox.MiB}
	other := spec
	other.Template = "other"
	ws := []*warm{
		{id: "w1", driver: NamedDriver{Name: "native"}, spec: spec},
		{id: "w2", driver: NamedDriver{Name: "native"}, spec: spec},
		{id: "w3", driver: NamedDriver{Name: "native"}, spec: other},
	}
	p.ready = slices.Clone(ws)
	if w := p.take("native", spec); w == nil || w.id != "w2" {
		t.Fatalf("take = %v, want w2, the newest that fits", w)
	}
	if w := p.take("native", spec); w == nil || w.id != "w1" {
		t.Fatalf("second take = %v, want w1", w)
	}
	if w := p.take("native", spec); w != nil {
		t.Fatalf("third take = %v, want none (w3 is of another template)", w.id)
	}
	if len(p.ready) != 1 || p.ready[0].id != "w3" {
		t.Errorf("left ready: %v, want w3", p.ready)
	}
}

// A create that finds the pool empty while a warm start is in flight waits
// for that start and gets it, rather than starting its own; the start sees
// it waiting (startWarm then skips the warm-up). One that would not fit, or
// with nothing in flight, does not wait.
func TestAwaitInFlight(t *testing.T) {
	spec := sandbox.Spec{Template: "default", MemoryBytes: sandbox.MiB}
	release := make(chan struct{})
	sawWaiter := make(chan bool, 4)
	var p *warmPool
	n := 0
	newWarm := func(ctx context.Context) (*warm, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		sawWaiter <- p.awaited()
		n++
		return &warm{id: sandbox.ID("w" + strconv.Itoa(n)), driver: NamedDriver{Name: "native"}, spec: spec}, nil
	}
	p = newWarmPool(1, 1, make(chan struct{}, 4), newWarm, func(context.Context, *warm) {}, func(*warm) {})
	p.awaitMax = time.Minute // a hang guard: the wait ends with the start released below
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p.start(ctx)
	defer p.close(context.Background())

	release <- struct{}{}
	if <-sawWaiter {
		t.Error("the first start saw a create waiting: there was none")
	}
	until(t, "the first start ready", func() bool { return counts(p).ready > 0 })
	if w := p.take("native", spec); w == nil || w.id != "w1" {
		t.Fatalf("take = %v, want w1", w)
	}
	// The pool refills: a start in flight, held until released.
	until(t, "a refill in flight", func() bool { return counts(p).filling > 0 })
	other := spec
	other.Template = "other"
	if w := p.await(t.Context(), "native", other); w != nil {
		t.Errorf("await of a spec the start would not fit = %v, want none at once", w.id)
	}
	got := make(chan *warm, 1)
	go func() { got <- p.await(t.Context(), "native", spec) }()
	until(t, "the create waiting", p.awaited)
	release <- struct{}{}
	if !<-sawWaiter {
		t.Error("the refill did not see the create waiting for it")
	}
	if w := <-got; w == nil || w.id != "w2" {
		t.Fatalf("await = %v, want w2, the start it waited for", w)
	}
	// Nothing in flight once the refill after w2 is released and taken:
	// await returns at once.
	release <- struct{}{}
	<-sawWaiter
	until(t, "the third start ready", func() bool { return counts(p).ready > 0 })
	p.take("native", spec)
	p.stop() // no refill from here
	if w := p.await(t.Context(), "native", spec); w != nil {
		t.Errorf("await with nothing in flight = %v, want none", w.id)
	}
}

// counts reads the pool's ready and in-flight counts.
func counts(p *warmPool) (c struct{ ready, filling int }) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.ready, c.filling = len(p.ready), p.filling
	return c
}

// until polls cond; the deadline is a hang guard, not a timing assertion.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
	}
}
