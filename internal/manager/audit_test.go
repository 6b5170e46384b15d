package manager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/store"
	"sbx.dev/sbx/internal/testutil"
)

var admin = Key{ID: "key_admin", Name: store.AdminKeyName, Admin: true}

// find returns the records of action, oldest first.
func find(recs []AuditRecord, action string) []AuditRecord {
	var out []AuditRecord
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Action == action {
			out = append(out, recs[i])
		}
	}
	return out
}

func TestAuditRecordsCalls(t *testing.T) {
	var logs testutil.SyncBuffer
	e := newEnv(t, func(o *Options) {
		o.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	const secret = "hunter2-secret"
	ctx := as(t.Context(), "key_a")
	sb, err := e.m.Create(ctx, sandbox.CreateRequest{Env: map[string]string{"TOKEN": secret}})
	if err != nil {
		t.Fatal(err)
	}
	// A file call the agent serves, and one it fails: both are recorded, the
	// second with its code.
	if _, err := e.m.WriteFile(ctx, sb.ID, "/workspace/secret.txt", []byte(secret), 0o600, false); err != nil {
		t.Fatalf("WriteFile = %v", err)
	}
	_, serr := e.m.Stat(ctx, sb.ID, "/workspace/missing")
	if serr == nil {
		t.Fatalf("Stat of a file never written succeeded")
	}
	if _, err := e.m.Exec(ctx, sb.ID, sandbox.ExecRequest{Shell: "echo " + secret, Env: map[string]string{"K": secret},
		Stdin: []byte(secret), Background: true}, false, nil); err != nil {
		t.Fatalf("Exec = %v", err)
	}
	if _, err := e.m.Exec(ctx, sb.ID, sandbox.ExecRequest{Argv: []string{"/usr/bin/env", secret}, Background: true}, false, nil); err != nil {
		t.Fatalf("Exec = %v", err)
	}
	e.m.WriteStdin(ctx, sb.ID, "fake-1", []byte(secret), true)
	if err := e.m.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.m.ReadFile(as(t.Context(), "key_b"), sandbox.NewID(), "/etc/passwd", 0, 10)

	recs, err := e.m.Audit(WithKey(t.Context(), admin), AuditQuery{})
	if err != nil {
		t.Fatalf("Audit = %v", err)
	}
	for i := 1; i < len(recs); i++ {
		if recs[i].ID >= recs[i-1].ID {
			t.Errorf("records are not newest first: %d after %d", recs[i].ID, recs[i-1].ID)
		}
	}
	check := func(action, key, target, outcome string) AuditRecord {
		t.Helper()
		got := find(recs, action)
		if len(got) == 0 {
			t.Fatalf("no %s record in %+v", action, recs)
		}
		r := got[0]
		if r.KeyID != key || (target != "" && r.Target != target) || (outcome != "" && r.Outcome != outcome) {
			t.Errorf("%s record = %+v, want key %s, target %q, outcome %s", action, r, key, target, outcome)
		}
		return r
	}
	if r := check("create", "key_a", "", "ok"); r.SandboxID != string(sb.ID) {
		t.Errorf("create record names %q, want %s", r.SandboxID, sb.ID)
	}
	if r := check("write_file", "key_a", "/workspace/secret.txt", "ok"); r.SandboxID != string(sb.ID) {
		t.Errorf("write_file record = %+v, want it to name %s", r, sb.ID)
	}
	if r := check("stat", "key_a", "/workspace/missing", AuditOutcome(serr)); r.Outcome == "ok" || r.SandboxID != string(sb.ID) {
		t.Errorf("stat record = %+v, want the failure's code", r)
	}
	starts := find(recs, "exec_start")
	if len(starts) != 2 || starts[0].Target != "/bin/sh" || starts[1].Target != "/usr/bin/env" ||
		!strings.Contains(starts[0].Detail, "process_id=fake-1") {
		t.Errorf("exec_start records = %+v, want /bin/sh then /usr/bin/env with the process id", starts)
	}
	check("write_stdin", "key_a", "fake-1", "")
	check("delete", "key_a", "", "ok")
	if r := check("read_file", "key_b", "/etc/passwd", "not_found"); r.SandboxID == "" {
		t.Errorf("read_file record names no sandbox")
	}
	for _, r := range recs {
		if strings.Contains(fmt.Sprintf("%+v", r), secret) {
			t.Errorf("audit record holds the secret: %+v", r)
		}
	}
	if out := logs.String(); !strings.Contains(out, "component=audit") || !strings.Contains(out, "action=exec_start") {
		t.Errorf("the log has no audit records:\n%s", out)
	} else if strings.Contains(out, secret) {
		t.Errorf("the log holds the secret:\n%s", out)
	}
}

func TestAuditExpiryUnderOwner(t *testing.T) {
	e := newEnv(t, nil)
	sb, err := e.m.Create(as(t.Context(), "key_a"), sandbox.CreateRequest{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(11 * time.Second)
	e.m.nudge()
	waitGone(t, e.m, sb.ID)
	var exp []AuditRecord
	for range 1000 { // the reaper records after the record is gone
		recs, err := e.m.Audit(WithKey(t.Context(), admin), AuditQuery{SandboxID: string(sb.ID)})
		if err != nil {
			t.Fatal(err)
		}
		if exp = find(recs, "expire"); len(exp) > 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if len(exp) != 1 || exp[0].KeyID != "key_a" || exp[0].Outcome != "ok" {
		t.Errorf("expire records = %+v, want one under the owner key_a", exp)
	}
}

func TestAuditVisibility(t *testing.T) {
	e := newEnv(t, nil)
	for _, k := range []string{"key_a", "key_b"} {
		if _, err := e.m.Create(as(t.Context(), k), sandbox.CreateRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := e.m.Audit(as(t.Context(), "key_a"), AuditQuery{})
	if err != nil || len(recs) != 1 || recs[0].KeyID != "key_a" {
		t.Errorf("Audit as key_a = %+v, %v; want its own one record", recs, err)
	}
	if _, err := e.m.Audit(as(t.Context(), "key_a"), AuditQuery{KeyID: "key_b"}); !errors.Is(err, sandbox.ErrDenied) {
		t.Errorf("Audit as key_a of key_b = %v, want ErrDenied", err)
	}
	if _, err := e.m.Audit(t.Context(), AuditQuery{}); !errors.Is(err, sandbox.ErrDenied) {
		t.Errorf("Audit without a key = %v, want ErrDenied", err)
	}
	all, err := e.m.Audit(WithKey(t.Context(), admin), AuditQuery{})
	if err != nil || len(all) != 2 {
		t.Errorf("Audit as admin = %+v, %v; want both", all, err)
	}
	only, err := e.m.Audit(WithKey(t.Context(), admin), AuditQuery{KeyID: "key_b", Limit: 5})
	if err != nil || len(only) != 1 || only[0].KeyID != "key_b" {
		t.Errorf("Audit as admin of key_b = %+v, %v", only, err)
	}
}

// A full queue drops records and counts them; the call never blocks.
func TestAuditDropsWhenFull(t *testing.T) {
	a := &auditor{now: time.Now, ch: make(chan auditItem, 2)}
	done := make(chan struct{})
	go func() {
		for range 5 {
			a.record("k", "", "stat", "/x", "", nil)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a hang guard, not a timing assertion
		t.Fatal("audit blocked on a full queue")
	}
	if n := a.dropped.Load(); n != 3 {
		t.Errorf("dropped = %d, want 3", n)
	}
}

func TestAuditPrune(t *testing.T) {
	e := newEnv(t, func(o *Options) {
		o.AuditRetention = time.Hour
		o.AuditMaxRecords = 3
	})
	ctx := WithKey(t.Context(), admin)
	for i := range 5 {
		e.m.audit(ctx, "", "stat", fmt.Sprint("/old", i), "", nil)
	}
	e.m.auditor.flush(ctx)
	e.m.auditor.prune(context.Background())
	recs, _ := e.m.Audit(ctx, AuditQuery{})
	if len(recs) != 3 || recs[0].Target != "/old4" {
		t.Errorf("after pruning to 3: %+v", recs)
	}
	e.clock.Advance(2 * time.Hour)
	e.m.audit(ctx, "", "stat", "/new", "", nil)
	e.m.auditor.flush(ctx)
	e.m.auditor.prune(context.Background())
	recs, _ = e.m.Audit(ctx, AuditQuery{})
	if len(recs) != 1 || recs[0].Target != "/new" {
		t.Errorf("after pruning by age: %+v", recs)
	}
}

func TestAuditOutcome(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{&sandbox.Error{Op: "stat", Err: fmt.Errorf("x %w", sandbox.ErrNotFound)}, "not_found"},
		{&RetryError{Err: sandbox.ErrLimit, After: time.Second}, "resource_exhausted"},
		{errors.New("boom"), "internal"},
	} {
		if got := AuditOutcome(tc.err); got != tc.want {
			t.Errorf("AuditOutcome(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
