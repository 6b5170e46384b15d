package manager

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// as returns ctx carrying the (non-admin) API key id.
func as(ctx context.Context, id string) context.Context {
	return WithKey(ctx, Key{ID: id, Name: id})
}

// wantLimit checks that err is a limit refusal whose message holds want and
// which says when to retry.
func wantLimit(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s = %v, want ErrLimit containing %q", what, err, want)
	}
	if after, ok := RetryAfter(err); !ok || after <= 0 {
		t.Errorf("RetryAfter(%v) = %v, %v; want a positive hint", err, after, ok)
	}
}

func TestPerKeyLimit(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits = Limits{MaxSandboxesPerKey: 2} })
	ctx := t.Context()
	a, b := as(ctx, "key_a"), as(ctx, "key_b")
	first, err := e.m.Create(a, sandbox.CreateRequest{})
	if err != nil {
		t.Fatalf("Create 1 = %v", err)
	}
	if first.OwnerKey != "key_a" {
		t.Errorf("OwnerKey = %q, want key_a", first.OwnerKey)
	}
	if got, _ := e.st.GetSandbox(ctx, first.ID); got.OwnerKey != "key_a" {
		t.Errorf("stored owner_key = %q, want key_a", got.OwnerKey)
	}
	if _, err := e.m.Create(a, sandbox.CreateRequest{}); err != nil {
		t.Fatalf("Create 2 = %v", err)
	}
	starts := e.fakes[0].Called("Start", "")
	_, err = e.m.Create(a, sandbox.CreateRequest{})
	wantLimit(t, "Create 3", err, "key key_a has 2 live sandboxes, the limit is 2")
	if after, _ := RetryAfter(err); after != countRetryAfter {
		t.Errorf("RetryAfter = %v, want %v for a count limit", after, countRetryAfter)
	}
	if n := e.fakes[0].Called("Start", ""); n != starts {
		t.Errorf("a refused create started %d sandboxes", n-starts)
	}
	if all, _ := e.st.ListSandboxes(ctx); len(all) != 2 {
		t.Errorf("records after a refused create = %d, want 2", len(all))
	}
	// Another key has its own count.
	if _, err := e.m.Create(b, sandbox.CreateRequest{}); err != nil {
		t.Errorf("Create by another key = %v", err)
	}
	// A delete frees the place.
	if err := e.m.Delete(a, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Create(a, sandbox.CreateRequest{}); err != nil {
		t.Errorf("Create after a delete = %v", err)
	}
}

func TestGlobalLimit(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits = Limits{MaxSandboxes: 2, MaxSandboxesPerKey: 10} })
	ctx := t.Context()
	for _, k := range []string{"key_a", "key_b"} {
		if _, err := e.m.Create(as(ctx, k), sandbox.CreateRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.m.Create(as(ctx, "key_c"), sandbox.CreateRequest{})
	wantLimit(t, "Create beyond the global limit", err, "the daemon has 2 live sandboxes, the limit is 2")
}

// Concurrent creates cannot over-admit: the check and the reservation are one
// step, taken before any side effect.
func TestLimitUnderBurst(t *testing.T) {
	const limit, n = 5, 60
	e := newEnv(t, func(o *Options) {
		o.Limits = Limits{MaxSandboxesPerKey: limit}
		o.MaxConcurrentCreates = 4
	})
	e.fakes[0].SetStartDelay(time.Millisecond)
	ctx := as(t.Context(), "key_a")
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		ok, lim  int
		unwanted []error
	)
	for range n {
		wg.Go(func() {
			_, err := e.m.Create(ctx, sandbox.CreateRequest{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, sandbox.ErrLimit):
				lim++
			default:
				unwanted = append(unwanted, err)
			}
		})
	}
	wg.Wait()
	if ok != limit || lim != n-limit || len(unwanted) > 0 {
		t.Errorf("burst of %d: %d created, %d refused, other errors %v; want %d and %d", n, ok, lim, unwanted, limit, n-limit)
	}
	if starts := e.fakes[0].Called("Start", ""); starts != limit {
		t.Errorf("Start called %d times, want %d", starts, limit)
	}
}

func TestFailedCreateFreesPlace(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits = Limits{MaxSandboxesPerKey: 1} })
	ctx := as(t.Context(), "key_a")
	e.fakes[0].FailNextStart(errors.New("boom"))
	if _, err := e.m.Create(ctx, sandbox.CreateRequest{}); err == nil || errors.Is(err, sandbox.ErrLimit) {
		t.Fatalf("Create with a failing Start = %v, want its error", err)
	}
	if _, err := e.m.Create(ctx, sandbox.CreateRequest{}); err != nil {
		t.Errorf("Create after a failed create = %v; the failed one kept its place", err)
	}
	if n, total := e.m.limits.counts("key_a"); n != 1 || total != 1 {
		t.Errorf("counts = %d, %d; want 1, 1", n, total)
	}
}

func TestExpiryFreesPlace(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits = Limits{MaxSandboxesPerKey: 1} })
	ctx := as(t.Context(), "key_a")
	sb, err := e.m.Create(ctx, sandbox.CreateRequest{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(11 * time.Second)
	e.m.nudge()
	waitGone(t, e.m, sb.ID)
	if _, err := e.m.Create(ctx, sandbox.CreateRequest{}); err != nil {
		t.Errorf("Create after the expiry = %v", err)
	}
}

func TestCreateRate(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits = Limits{CreateRate: 1, CreateBurst: 2} })
	ctx := as(t.Context(), "key_a")
	for i := range 2 {
		if _, err := e.m.Create(ctx, sandbox.CreateRequest{}); err != nil {
			t.Fatalf("Create %d within the burst = %v", i, err)
		}
	}
	_, err := e.m.Create(ctx, sandbox.CreateRequest{})
	wantLimit(t, "Create beyond the burst", err, "key key_a is over its create rate of 1/s (burst 2")
	if after, _ := RetryAfter(err); after != time.Second {
		t.Errorf("RetryAfter = %v, want the refill time 1s", after)
	}
	// Another key has its own bucket; the clock refills this one.
	if _, err := e.m.Create(as(t.Context(), "key_b"), sandbox.CreateRequest{}); err != nil {
		t.Errorf("Create by another key = %v", err)
	}
	e.clock.Advance(time.Second)
	if _, err := e.m.Create(ctx, sandbox.CreateRequest{}); err != nil {
		t.Errorf("Create after a refill = %v", err)
	}
}

// A refused count check consumes no token.
func TestCountRefusalKeepsTokens(t *testing.T) {
	l := newLimiter(Limits{MaxSandboxesPerKey: 1, CreateRate: 1, CreateBurst: 1})
	now := time.Unix(1000, 0)
	r, err := l.reserve("k", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.reserve("k", now.Add(time.Second)); !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), "live sandboxes") {
		t.Fatalf("reserve at the count limit = %v", err)
	}
	l.cancel(r)
	l.cancel(r) // idempotent
	if n, total := l.counts("k"); n != 0 || total != 0 {
		t.Errorf("counts after cancel = %d, %d", n, total)
	}
	if _, err := l.reserve("k", now.Add(time.Second)); err != nil {
		t.Errorf("reserve after cancel and a refill = %v", err)
	}
}

// A delete that frees a bound place before the create returns wins; the create's
// cancel then frees nothing more.
func TestReleaseThenCancel(t *testing.T) {
	l := newLimiter(Limits{MaxSandboxesPerKey: 5})
	r, _ := l.reserve("k", time.Now())
	other, _ := l.reserve("k", time.Now())
	l.bind(r, "id1")
	l.bind(other, "id2")
	l.release("id1")
	l.cancel(r)
	l.release("id1")
	if n, total := l.counts("k"); n != 1 || total != 1 {
		t.Errorf("counts = %d, %d; want 1, 1 (only id2)", n, total)
	}
}

func TestExecRate(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits = Limits{ExecRate: 1, ExecBurst: 1} })
	ctx := as(t.Context(), "key_a")
	sb, err := e.m.Create(ctx, sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	bg := sandbox.ExecRequest{Argv: []string{"sleep", "1"}, Background: true}
	if _, err := e.m.Exec(ctx, sb.ID, bg, false, nil); err != nil {
		t.Fatalf("Exec within the burst = %v", err)
	}
	_, err = e.m.Exec(ctx, sb.ID, bg, false, nil)
	wantLimit(t, "Exec beyond the rate", err, "key key_a is over its exec rate of 1/s")
	if sandbox.IDOf(err) != sb.ID {
		t.Errorf("the refusal names sandbox %q, want %s", sandbox.IDOf(err), sb.ID)
	}
	e.clock.Advance(time.Second)
	if _, err := e.m.Exec(ctx, sb.ID, bg, false, nil); err != nil {
		t.Errorf("Exec after a refill = %v", err)
	}
}

// Warm sandboxes belong to nobody; a hand-out passes the same limits as a
// cold create.
func TestPoolHandOutIsLimited(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.PoolSize = 2
		o.Limits = Limits{MaxSandboxesPerKey: 1, MaxSandboxes: 1}
	})
	waitReady(t, e.m, 2)
	ctx := as(t.Context(), "key_a")
	sb, err := e.m.Create(ctx, sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if e.fakes[0].Called("Start", sb.ID) != 1 || sb.OwnerKey != "key_a" {
		t.Fatalf("Create = %+v, want a warm hand-out owned by key_a", sb)
	}
	waitReady(t, e.m, 2)
	_, err = e.m.Create(ctx, sandbox.CreateRequest{})
	wantLimit(t, "a second hand-out", err, "live sandboxes")
	if got := e.m.Pool().Ready; got != 2 {
		t.Errorf("pool ready after a refused hand-out = %d, want 2", got)
	}
}

// Recover rebuilds each key's count from the store.
func TestRecoverRecountsLimits(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits = Limits{MaxSandboxesPerKey: 2} })
	ctx := as(t.Context(), "key_a")
	var ids []sandbox.ID
	for range 2 {
		sb, err := e.m.Create(ctx, sandbox.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	if err := e.m.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	m := e.start(t)
	_, err := m.Create(ctx, sandbox.CreateRequest{})
	wantLimit(t, "Create after a restart", err, "key key_a has 2 live sandboxes")
	if err := m.Delete(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, sandbox.CreateRequest{}); err != nil {
		t.Errorf("Create after a delete = %v", err)
	}
}
