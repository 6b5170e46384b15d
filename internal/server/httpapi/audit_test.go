package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"sbx/api/openapi"
	"sbx/internal/manager"
	"sbx/internal/sandbox"
)

func TestAuditRoute(t *testing.T) {
	e := newAPI(t, Options{})
	at := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	e.f.audit = []manager.AuditRecord{{ID: 7, At: at, KeyID: "k1", SandboxID: "sb1", Action: "exec_end", Target: "/bin/sh",
		Outcome: "ok", Detail: "process_id=p1 exit_code=3 reason=exited signal=0"}}
	resp, b := e.do("GET", "/v1/audit?sandbox_id=sb1&key_id=k1&since=2030-01-01T00:00:00Z&limit=5", "")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/audit = %d %s", resp.StatusCode, b)
	}
	var out openapi.AuditList
	if err := json.Unmarshal(b, &out); err != nil || len(out.Records) != 1 {
		t.Fatalf("body %s: %v", b, err)
	}
	want := openapi.AuditRecord{ID: 7, Time: at, KeyID: "k1", SandboxID: "sb1", Action: "exec_end", Target: "/bin/sh",
		Outcome: "ok", Detail: "process_id=p1 exit_code=3 reason=exited signal=0"}
	if out.Records[0] != want {
		t.Errorf("record = %+v, want %+v", out.Records[0], want)
	}
	q := e.f.auditQuery
	if q.SandboxID != "sb1" || q.KeyID != "k1" || q.Limit != 5 || !q.Since.Equal(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("query the manager got = %+v", q)
	}
	// No records is an empty list, not null.
	e.f.audit = nil
	if _, b := e.do("GET", "/v1/audit", ""); !strings.Contains(string(b), `"records":[]`) {
		t.Errorf("empty audit log = %s", b)
	}
	if e.f.auditQuery.Limit != 100 {
		t.Errorf("default limit = %d, want 100", e.f.auditQuery.Limit)
	}
	for _, bad := range []string{"since=yesterday", "limit=0", "limit=1001", "limit=x"} {
		resp, b := e.do("GET", "/v1/audit?"+bad, "")
		if d := decodeErr(t, b); resp.StatusCode != 400 || d.Code != openapi.CodeInvalidArgument {
			t.Errorf("GET /v1/audit?%s = %d %+v, want 400", bad, resp.StatusCode, d)
		}
	}
	e.f.err = sandbox.ErrDenied
	if resp, b := e.do("GET", "/v1/audit?key_id=other", ""); resp.StatusCode != 403 {
		t.Errorf("a denied audit read = %d %s, want 403", resp.StatusCode, b)
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
