package manager

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

func TestIdempotentCreate(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as(t.Context(), "key_a")
	req := sandbox.CreateRequest{Labels: map[string]string{"a": "1"}, Timeout: time.Minute}
	first, replayed, err := e.m.CreateIdempotent(ctx, req, "op-1")
	if err != nil || replayed {
		t.Fatalf("CreateIdempotent = %v, replayed %v", err, replayed)
	}
	again, replayed, err := e.m.CreateIdempotent(ctx, req, "op-1")
	if err != nil || !replayed || again.ID != first.ID {
		t.Errorf("replay = %s, replayed %v, %v; want %s replayed", again.ID, replayed, err, first.ID)
	}
	if n := e.fakes[0].Called("Start", ""); n != 1 {
		t.Errorf("Start called %d times, want 1", n)
	}

	_, _, err = e.m.CreateIdempotent(ctx, sandbox.CreateRequest{Labels: map[string]string{"a": "2"}}, "op-1")
	if !errors.Is(err, sandbox.ErrExists) || !strings.Contains(err.Error(), `"op-1"`) {
		t.Errorf("same key, another request = %v; want ErrExists naming the key", err)
	}

	// The key is the caller's: another key's op-1 is another create.
	other, replayed, err := e.m.CreateIdempotent(as(t.Context(), "key_b"), req, "op-1")
	if err != nil || replayed || other.ID == first.ID {
		t.Errorf("another caller's op-1 = %s, replayed %v, %v; want a new sandbox", other.ID, replayed, err)
	}

	// A key whose sandbox is gone says so.
	if err := e.m.Delete(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.m.CreateIdempotent(ctx, req, "op-1")
	if !errors.Is(err, sandbox.ErrWrongState) || sandbox.IDOf(err) != first.ID {
		t.Errorf("replay of a deleted sandbox = %v; want ErrWrongState naming %s", err, first.ID)
	}

	for _, bad := range []string{"", "has space", strings.Repeat("x", 256), "tab\t"} {
		if _, _, err := e.m.CreateIdempotent(ctx, req, bad); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("CreateIdempotent(key %q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// Parallel calls with one key make one sandbox; the others wait and share it.
func TestIdempotentCreateParallel(t *testing.T) {
	e := newEnv(t, nil)
	e.fakes[0].SetStartDelay(20 * time.Millisecond)
	ctx := as(t.Context(), "key_a")
	const n = 20
	ids := make([]sandbox.ID, n)
	errs := make([]error, n)
	created := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sb, replayed, err := e.m.CreateIdempotent(ctx, sandbox.CreateRequest{}, "burst")
			ids[i], errs[i] = sb.ID, err
			if !replayed {
				mu.Lock()
				created++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Errorf("call %d = %s, %v; want %s", i, ids[i], errs[i], ids[0])
		}
	}
	if created != 1 {
		t.Errorf("%d calls reported a new sandbox, want 1", created)
	}
	if s := e.fakes[0].Called("Start", ""); s != 1 {
		t.Errorf("Start called %d times, want 1", s)
	}
}

func TestIdempotentCreateAcrossRestart(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as(t.Context(), "key_a")
	first, _, err := e.m.CreateIdempotent(ctx, sandbox.CreateRequest{}, "op-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	m := e.start(t)
	again, replayed, err := m.CreateIdempotent(ctx, sandbox.CreateRequest{}, "op-1")
	if err != nil || !replayed || again.ID != first.ID || !again.CreatedAt.Equal(first.CreatedAt) {
		t.Errorf("replay after a restart = %+v, replayed %v, %v; want %s", again, replayed, err, first.ID)
	}
	// Past the TTL the key is forgotten (and pruned).
	e.clock.Advance(IdempotencyTTL + time.Minute)
	later, replayed, err := m.CreateIdempotent(ctx, sandbox.CreateRequest{}, "op-1")
	if err != nil || replayed || later.ID == first.ID {
		t.Errorf("after the TTL = %s, replayed %v, %v; want a new sandbox", later.ID, replayed, err)
	}
	m.pruneIdempotency(t.Context())
	rec, err := e.st.GetIdempotency(t.Context(), "key_a", "op-1")
	if err != nil || rec.SandboxID != later.ID {
		t.Errorf("the key after pruning = %+v, %v; want it to name %s", rec, err, later.ID)
	}
}

// A failed first create records nothing: the retry creates cleanly.
func TestIdempotentCreateRetryAfterFailure(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as(t.Context(), "key_a")
	boom := errors.New("boom")
	e.fakes[0].FailNextStart(boom)
	if _, _, err := e.m.CreateIdempotent(ctx, sandbox.CreateRequest{}, "op-1"); !errors.Is(err, boom) {
		t.Fatalf("first CreateIdempotent = %v, want %v", err, boom)
	}
	if _, err := e.st.GetIdempotency(t.Context(), "key_a", "op-1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a failed create recorded its key: %v", err)
	}
	sb, replayed, err := e.m.CreateIdempotent(ctx, sandbox.CreateRequest{}, "op-1")
	if err != nil || replayed || sb.State != sandbox.StateRunning {
		t.Errorf("retry = %+v, replayed %v, %v; want a new running sandbox", sb, replayed, err)
	}
}

// A warm hand-out records the key in its commit too.
func TestIdempotentCreateFromPool(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.PoolSize = 1 })
	waitReady(t, e.m, 1)
	ctx := as(t.Context(), "key_a")
	first, _, err := e.m.CreateIdempotent(ctx, sandbox.CreateRequest{}, "op-1")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := e.st.GetIdempotency(t.Context(), "key_a", "op-1")
	if err != nil || rec.SandboxID != first.ID {
		t.Errorf("recorded key = %+v, %v; want it to name %s", rec, err, first.ID)
	}
}
