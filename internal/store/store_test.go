package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sbx.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open(%s) = %v", path, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("store file mode = %v, %v; want 0600", fi.Mode(), err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func record(state sandbox.State) sandbox.Sandbox {
	id := sandbox.NewID()
	return sandbox.Sandbox{
		ID:      id,
		State:   state,
		Backend: "fake",
		Spec: sandbox.Spec{ID: id, Template: "host", TTL: 300 * time.Second, MemoryBytes: 512 * sandbox.MiB,
			Labels: map[string]string{"team": "a"}, Env: map[string]string{"TOKEN": "hunter2"}},
		Isolation: sandbox.Isolation{Backend: "fake", Level: "fake"},
		CreatedAt: time.UnixMilli(1_700_000_000_000),
		ExpiresAt: time.UnixMilli(1_700_000_300_000),
	}
}

func TestSandboxCRUD(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	a := record(sandbox.StateCreating)
	if err := s.PutSandbox(ctx, a); err != nil {
		t.Fatalf("PutSandbox = %v", err)
	}
	if err := s.PutSandbox(ctx, a); !errors.Is(err, sandbox.ErrExists) {
		t.Errorf("PutSandbox twice = %v, want ErrExists", err)
	}
	got, err := s.GetSandbox(ctx, a.ID)
	if err != nil {
		t.Fatalf("GetSandbox = %v", err)
	}
	want := a
	want.Spec.Env = nil // never persisted
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GetSandbox = %+v, want %+v", got, want)
	}

	upd, err := s.UpdateSandbox(ctx, a.ID, func(sb *sandbox.Sandbox) error {
		sb.State = sandbox.StateRunning
		sb.Saved = []byte("saved")
		sb.Isolation.Level = "strong"
		sb.Spec.Labels = map[string]string{"team": "b"}
		sb.ExpiresAt = sb.ExpiresAt.Add(time.Minute)
		return nil
	})
	if err != nil {
		t.Fatalf("UpdateSandbox = %v", err)
	}
	got, _ = s.GetSandbox(ctx, a.ID)
	if !reflect.DeepEqual(got, upd) || got.State != sandbox.StateRunning || string(got.Saved) != "saved" ||
		got.Isolation.Level != "strong" || got.Spec.Labels["team"] != "b" || !got.ExpiresAt.Equal(a.ExpiresAt.Add(time.Minute)) {
		t.Errorf("after UpdateSandbox: %+v", got)
	}
	boom := errors.New("boom")
	if _, err := s.UpdateSandbox(ctx, a.ID, func(*sandbox.Sandbox) error { return boom }); err != boom {
		t.Errorf("UpdateSandbox with failing fn = %v, want %v", err, boom)
	}

	b := record(sandbox.StateRunning)
	b.CreatedAt = b.CreatedAt.Add(time.Second)
	if err := s.PutSandbox(ctx, b); err != nil {
		t.Fatal(err)
	}
	all, err := s.ListSandboxes(ctx)
	if err != nil || len(all) != 2 || all[0].ID != a.ID || all[1].ID != b.ID {
		t.Errorf("ListSandboxes() = %v, %v; want [a b]", all, err)
	}
	if cr, _ := s.ListSandboxes(ctx, sandbox.StateCreating); len(cr) != 0 {
		t.Errorf("ListSandboxes(creating) = %v, want none", cr)
	}
	if run, _ := s.ListSandboxes(ctx, sandbox.StateRunning, sandbox.StateError); len(run) != 2 {
		t.Errorf("ListSandboxes(running, error) = %d records, want 2", len(run))
	}

	if err := s.DeleteSandbox(ctx, a.ID); err != nil {
		t.Fatalf("DeleteSandbox = %v", err)
	}
	if err := s.DeleteSandbox(ctx, a.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("DeleteSandbox twice = %v, want ErrNotFound", err)
	}
	if _, err := s.GetSandbox(ctx, a.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("GetSandbox after delete = %v, want ErrNotFound", err)
	}
	if _, err := s.UpdateSandbox(ctx, a.ID, func(*sandbox.Sandbox) error { return nil }); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("UpdateSandbox after delete = %v, want ErrNotFound", err)
	}
}

func TestMigrationsIdempotentOnReopen(t *testing.T) {
	s, path := openTemp(t)
	ctx := t.Context()
	a := record(sandbox.StateRunning)
	if err := s.PutSandbox(ctx, a); err != nil {
		t.Fatal(err)
	}
	s.Close()
	for range 2 {
		s2, err := Open(ctx, path)
		if err != nil {
			t.Fatalf("reopening: %v", err)
		}
		if v, err := s2.SchemaVersion(ctx); err != nil || v != len(migrations) {
			t.Errorf("SchemaVersion = %d, %v; want %d", v, err, len(migrations))
		}
		if _, err := s2.GetSandbox(ctx, a.ID); err != nil {
			t.Errorf("GetSandbox after reopen = %v", err)
		}
		s2.Close()
	}
}

func TestKeys(t *testing.T) {
	s, path := openTemp(t)
	ctx := t.Context()
	secret, k, err := s.CreateKey(ctx, "admin")
	if err != nil {
		t.Fatalf("CreateKey = %v", err)
	}
	if len(secret) != len(KeyPrefix)+52 || secret[:4] != KeyPrefix {
		t.Errorf("secret %q does not have the sbx_ + 52 base32 characters form", secret[:4]+"…")
	}
	got, err := s.LookupKey(ctx, secret)
	if err != nil || got.ID != k.ID || got.Name != "admin" {
		t.Errorf("LookupKey(secret) = %+v, %v; want %+v", got, err, k)
	}
	for _, bad := range []string{"", secret + "x", secret[:len(secret)-1], flipLast(secret), HashSecret(secret)} {
		if _, err := s.LookupKey(ctx, bad); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("LookupKey(wrong secret) = %v, want ErrNotFound", err)
		}
	}
	other, _, err := s.CreateKey(ctx, "ci")
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := s.ListKeys(ctx); err != nil || len(keys) != 2 {
		t.Errorf("ListKeys = %v, %v; want 2 keys", keys, err)
	}
	if err := s.RevokeKey(ctx, k.ID); err != nil {
		t.Fatalf("RevokeKey = %v", err)
	}
	if err := s.RevokeKey(ctx, k.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("RevokeKey twice = %v, want ErrNotFound", err)
	}
	if _, err := s.LookupKey(ctx, secret); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("LookupKey(revoked) = %v, want ErrNotFound", err)
	}
	if _, err := s.LookupKey(ctx, other); err != nil {
		t.Errorf("LookupKey(other) = %v", err)
	}
	keys, _ := s.ListKeys(ctx)
	if keys[0].RevokedAt.IsZero() || !keys[1].RevokedAt.IsZero() {
		t.Errorf("ListKeys revocation = %+v", keys)
	}

	// No raw secret anywhere on disk: the database, its WAL and shared memory.
	s.Close()
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, sec := range []string{secret, other, secret[4:], other[4:]} {
			if bytes.Contains(b, []byte(sec)) {
				t.Errorf("%s holds a raw API key secret", filepath.Base(f))
			}
		}
		if f == path && !bytes.Contains(b, []byte(HashSecret(secret))) {
			// After a clean close the WAL is checkpointed into the main file.
			t.Errorf("%s does not hold the key's hash", filepath.Base(f))
		}
	}
}

func TestConcurrentWrites(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	errs := make(chan error, 50)
	for range 50 {
		go func() {
			sb := record(sandbox.StateCreating)
			if err := s.PutSandbox(ctx, sb); err != nil {
				errs <- err
				return
			}
			_, err := s.UpdateSandbox(ctx, sb.ID, func(r *sandbox.Sandbox) error { r.State = sandbox.StateRunning; return nil })
			errs <- err
		}()
	}
	for range 50 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent write: %v", err)
		}
	}
	if run, _ := s.ListSandboxes(ctx, sandbox.StateRunning); len(run) != 50 {
		t.Errorf("running records = %d, want 50", len(run))
	}
}

func flipLast(s string) string {
	last := byte('a')
	if s[len(s)-1] == 'a' {
		last = 'b'
	}
	return s[:len(s)-1] + string(last)
}

// BenchmarkSandboxLifecycle is the store's work for one sandbox's life: the
// intent, the commit, a read, the delete's mark and the delete, and two audit
// records.
func BenchmarkSandboxLifecycle(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "sbx.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	for b.Loop() {
		sb := record(sandbox.StateCreating)
		sb.ID = sandbox.NewID()
		if err := s.PutSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
		if _, err := s.UpdateSandbox(ctx, sb.ID, func(r *sandbox.Sandbox) error { r.State = sandbox.StateRunning; return nil }); err != nil {
			b.Fatal(err)
		}
		if _, err := s.GetSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		if _, err := s.UpdateSandbox(ctx, sb.ID, func(r *sandbox.Sandbox) error { r.State = sandbox.StateDeleting; return nil }); err != nil {
			b.Fatal(err)
		}
		if err := s.DeleteSandbox(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		if err := s.AppendAudit(ctx, []AuditRecord{{At: time.Now(), Action: "create", SandboxID: string(sb.ID)}, {At: time.Now(), Action: "delete", SandboxID: string(sb.ID)}}); err != nil {
			b.Fatal(err)
		}
	}
}

// SwapSandbox writes the whole record only from the state it names: a warm
// record becomes running, a second swap from warm finds nothing and changes
// nothing, nor does one for an id with no record.
func TestSwapSandbox(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	warm := record(sandbox.StateWarm)
	warm.Spec.Env = nil
	warm.Saved = []byte(`{"pid":1}`)
	if err := s.PutSandbox(ctx, warm); err != nil {
		t.Fatal(err)
	}
	running := warm
	running.State, running.OwnerKey = sandbox.StateRunning, "key1"
	running.Spec.Labels = map[string]string{"team": "b"}
	running.CreatedAt = time.UnixMilli(1_700_000_100_000)
	if err := s.SwapSandbox(ctx, running, sandbox.StateWarm); err != nil {
		t.Fatalf("SwapSandbox from warm = %v", err)
	}
	got, err := s.GetSandbox(ctx, warm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, running) {
		t.Errorf("after the swap:\n got %+v\nwant %+v", got, running)
	}
	again := running
	again.OwnerKey = "key2"
	if err := s.SwapSandbox(ctx, again, sandbox.StateWarm); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a second swap from warm = %v, want ErrNotFound", err)
	}
	if got, _ := s.GetSandbox(ctx, warm.ID); got.OwnerKey != "key1" {
		t.Errorf("a refused swap changed the record: owner %q", got.OwnerKey)
	}
	missing := record(sandbox.StateRunning)
	if err := s.SwapSandbox(ctx, missing, sandbox.StateWarm); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a swap of no record = %v, want ErrNotFound", err)
	}
}

// BenchmarkHandOut is a warm record turned running: read, change and write
// back in a transaction (UpdateSandbox) against one statement (SwapSandbox).
func BenchmarkHandOut(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "sbx.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	for _, swap := range []bool{false, true} {
		name := "update"
		if swap {
			name = "swap"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				sb := record(sandbox.StateWarm)
				if err := s.PutSandbox(ctx, sb); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if swap {
					sb.State = sandbox.StateRunning
					err = s.SwapSandbox(ctx, sb, sandbox.StateWarm)
				} else {
					_, err = s.UpdateSandbox(ctx, sb.ID, func(r *sandbox.Sandbox) error { r.State = sandbox.StateRunning; return nil })
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// SetSandboxState changes the state alone and answers the backend and owner;
// a record that is not there is ErrNotFound.
func TestSetSandboxState(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	sb := record(sandbox.StateRunning)
	sb.Spec.Env, sb.OwnerKey = nil, "key1"
	if err := s.PutSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	backend, owner, err := s.SetSandboxState(ctx, sb.ID, sandbox.StateDeleting)
	if err != nil || backend != "fake" || owner != "key1" {
		t.Fatalf("SetSandboxState = %q, %q, %v; want fake, key1", backend, owner, err)
	}
	got, err := s.GetSandbox(ctx, sb.ID)
	want := sb
	want.State = sandbox.StateDeleting
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("after it:\n got %+v, %v\nwant %+v", got, err, want)
	}
	if _, _, err := s.SetSandboxState(ctx, sandbox.NewID(), sandbox.StateDeleting); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("SetSandboxState of no record = %v, want ErrNotFound", err)
	}
}
