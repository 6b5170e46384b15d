package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/backend/fake"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
)

func TestAuditRoute(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	e := newAPI(t, Options{}, func(o *manager.Options) { o.Now = func() time.Time { return at } })
	e.d.Script("exit 3", fake.Run{ExitCode: 3})
	id, other := e.sandbox(`{}`), e.sandbox(`{}`)
	for _, sb := range []string{id, other} {
		if resp, b := e.do("POST", "/v1/sandboxes/"+sb+"/exec", `{"command":"exit 3"}`); resp.StatusCode != 200 {
			t.Fatalf("exec = %d %s", resp.StatusCode, b)
		}
	}
	get := func(query string, hdr ...string) openapi.AuditList {
		t.Helper()
		resp, b := e.do("GET", "/v1/audit"+query, "", hdr...)
		var out openapi.AuditList
		if resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
			t.Fatalf("GET /v1/audit%s = %d %s", query, resp.StatusCode, b)
		}
		return out
	}

	// id has three records (create, exec_start, exec_end), other three newer ones.
	out := get("?sandbox_id=" + id + "&key_id=" + e.key.ID + "&since=2030-01-01T00:00:00Z&limit=2")
	recs, err := e.m.Audit(manager.WithKey(t.Context(), e.key), manager.AuditQuery{SandboxID: id, Limit: 2})
	if err != nil || len(recs) != 2 || len(out.Records) != 2 {
		t.Fatalf("records = %+v, the manager's %+v (%v); want 2 of each", out.Records, recs, err)
	}
	want := []openapi.AuditRecord{
		{ID: recs[0].ID, Time: at, KeyID: e.key.ID, SandboxID: id, Action: "exec_end", Target: "/bin/sh",
			Outcome: "ok", Detail: "process_id=fake-1 exit_code=3 reason=exited signal=0"},
		{ID: recs[1].ID, Time: at, KeyID: e.key.ID, SandboxID: id, Action: "exec_start", Target: "/bin/sh",
			Outcome: "ok", Detail: "process_id=fake-1 pid=42"},
	}
	for i := range want {
		if out.Records[i] != want[i] {
			t.Errorf("record %d = %+v, want %+v", i, out.Records[i], want[i])
		}
	}
	// Another key's records, which the admin key reads; that key may not read the admin's.
	token, k := e.newKey("user")
	if resp, b := e.do("POST", "/v1/sandboxes", `{}`, "Authorization", "Bearer "+token); resp.StatusCode != 201 {
		t.Fatalf("create with the second key = %d %s", resp.StatusCode, b)
	}
	if out := get("?key_id=" + k.ID); len(out.Records) != 1 || out.Records[0].KeyID != k.ID || out.Records[0].Action != "create" {
		t.Errorf("the second key's records = %+v, want its create", out.Records)
	}
	if resp, b := e.do("GET", "/v1/audit?key_id="+e.key.ID, "", "Authorization", "Bearer "+token); resp.StatusCode != 403 {
		t.Errorf("a denied audit read = %d %s, want 403", resp.StatusCode, b)
	}
	// Nothing since is an empty list, not null.
	if _, b := e.do("GET", "/v1/audit?since=2030-01-03T00:00:00Z", ""); !strings.Contains(string(b), `"records":[]`) {
		t.Errorf("no audit records = %s", b)
	}
	// Without a limit, the newest 100.
	for range 100 {
		e.m.Stat(manager.WithKey(t.Context(), e.key), sandbox.ID(id), "/workspace/none")
	}
	if n := len(get("").Records); n != 100 {
		t.Errorf("records without a limit = %d, want 100", n)
	}
	if n := len(get("?limit=1000").Records); n != 107 {
		t.Errorf("records with limit 1000 = %d, want all 107", n)
	}
	for _, bad := range []string{"since=yesterday", "limit=0", "limit=1001", "limit=x"} {
		resp, b := e.do("GET", "/v1/audit?"+bad, "")
		if d := decodeErr(t, b); resp.StatusCode != 400 || d.Code != openapi.CodeInvalidArgument {
			t.Errorf("GET /v1/audit?%s = %d %+v, want 400", bad, resp.StatusCode, d)
		}
	}
}

// The audit log's outcome codes are the API's error codes.
func TestAuditOutcomesMatchWire(t *testing.T) {
	for _, c := range classes {
		if got := manager.AuditOutcome(c.err); got != c.code {
			t.Errorf("AuditOutcome(%v) = %q, the API says %q", c.err, got, c.code)
		}
	}
	if got := manager.AuditOutcome(nil); got != "ok" {
		t.Errorf("AuditOutcome(nil) = %q", got)
	}
}
