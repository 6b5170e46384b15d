package store

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

func TestAuditLog(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	t0 := time.UnixMilli(1_700_000_000_000)
	var recs []AuditRecord
	for i, r := range []struct{ key, sb, action string }{
		{"key_a", "sb1", "create"}, {"key_a", "sb1", "exec_start"}, {"key_b", "sb2", "create"}, {"key_a", "sb1", "delete"},
	} {
		recs = append(recs, AuditRecord{At: t0.Add(time.Duration(i) * time.Minute), KeyID: r.key, SandboxID: r.sb,
			Action: r.action, Target: "/t", Outcome: "ok"})
	}
	if err := s.AppendAudit(ctx, recs); err != nil {
		t.Fatalf("AppendAudit = %v", err)
	}
	if err := s.AppendAudit(ctx, nil); err != nil {
		t.Errorf("AppendAudit(nil) = %v", err)
	}
	all, err := s.ListAudit(ctx, AuditQuery{})
	if err != nil || len(all) != 4 || all[0].Action != "delete" || !all[0].At.Equal(t0.Add(3*time.Minute)) || all[3].Action != "create" {
		t.Fatalf("ListAudit = %+v, %v; want 4, newest first", all, err)
	}
	for _, tc := range []struct {
		q    AuditQuery
		want int
	}{
		{AuditQuery{SandboxID: "sb1"}, 3},
		{AuditQuery{KeyID: "key_b"}, 1},
		{AuditQuery{KeyID: "key_a", SandboxID: "sb2"}, 0},
		{AuditQuery{Since: t0.Add(2 * time.Minute)}, 2},
		{AuditQuery{Limit: 1}, 1},
	} {
		got, err := s.ListAudit(ctx, tc.q)
		if err != nil || len(got) != tc.want {
			t.Errorf("ListAudit(%+v) = %d records, %v; want %d", tc.q, len(got), err, tc.want)
		}
	}
	if n, err := s.PruneAudit(ctx, t0.Add(time.Minute), 0); err != nil || n != 1 {
		t.Errorf("PruneAudit by age = %d, %v; want 1", n, err)
	}
	if n, err := s.PruneAudit(ctx, time.Time{}, 2); err != nil || n != 1 {
		t.Errorf("PruneAudit to 2 = %d, %v; want 1", n, err)
	}
	left, _ := s.ListAudit(ctx, AuditQuery{})
	if len(left) != 2 || left[0].Action != "delete" || left[1].SandboxID != "sb2" {
		t.Errorf("after pruning: %+v; want the newest two", left)
	}
}

func TestCommitSandboxRecordsIdempotency(t *testing.T) {
	s, _ := openTemp(t)
	ctx := t.Context()
	a := record(sandbox.StateCreating)
	a.OwnerKey = "key_a"
	if err := s.PutSandbox(ctx, a); err != nil {
		t.Fatal(err)
	}
	idem := Idempotency{KeyID: "key_a", Key: "op-1", BodyHash: "h1", CreatedAt: time.UnixMilli(1_700_000_000_000)}
	boom := errors.New("boom")
	if _, err := s.CommitSandbox(ctx, a.ID, func(*sandbox.Sandbox) error { return boom }, idem); err != boom {
		t.Fatalf("CommitSandbox with a failing fn = %v", err)
	}
	if _, err := s.GetIdempotency(ctx, "key_a", "op-1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a failed commit recorded the key: %v", err)
	}
	sb, err := s.CommitSandbox(ctx, a.ID, func(r *sandbox.Sandbox) error { r.State = sandbox.StateRunning; return nil }, idem)
	if err != nil || sb.State != sandbox.StateRunning || sb.OwnerKey != "key_a" {
		t.Fatalf("CommitSandbox = %+v, %v", sb, err)
	}
	got, err := s.GetIdempotency(ctx, "key_a", "op-1")
	if err != nil || got.SandboxID != a.ID || got.BodyHash != "h1" || !got.CreatedAt.Equal(idem.CreatedAt) {
		t.Errorf("GetIdempotency = %+v, %v", got, err)
	}
	if _, err := s.GetIdempotency(ctx, "key_b", "op-1"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another caller's key = %v, want ErrNotFound", err)
	}
	if n, err := s.PruneIdempotency(ctx, idem.CreatedAt); err != nil || n != 0 {
		t.Errorf("PruneIdempotency(at its creation) = %d, %v; want 0", n, err)
	}
	if n, err := s.PruneIdempotency(ctx, idem.CreatedAt.Add(time.Millisecond)); err != nil || n != 1 {
		t.Errorf("PruneIdempotency(after it) = %d, %v; want 1", n, err)
	}
}

// A store of schema 1 migrates: its rows keep working and have no owner.
func TestMigrateFromVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sbx.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, q := range []string{migrations[0], "PRAGMA user_version = 1",
		`INSERT INTO sandboxes (id, state, backend, spec, created_at, updated_at) VALUES ('aaaaaaaaaaaaaaaaaaaaaaaaaa', 'running', 'native', '{}', 1, 1)`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open of a schema-1 store = %v", err)
	}
	defer s.Close()
	if v, _ := s.SchemaVersion(ctx); v != len(migrations) {
		t.Errorf("SchemaVersion = %d, want %d", v, len(migrations))
	}
	sb, err := s.GetSandbox(ctx, "aaaaaaaaaaaaaaaaaaaaaaaaaa")
	if err != nil || sb.OwnerKey != "" || sb.State != sandbox.StateRunning {
		t.Errorf("old row = %+v, %v; want running with no owner", sb, err)
	}
}
