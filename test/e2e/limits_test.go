package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// apiWithHeaders is api with extra request headers; it also returns the response's.
func (d *daemon) apiWithHeaders(method, path string, body any, hdr map[string]string) (int, http.Header, []byte) {
	d.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		d.t.Fatal(err)
	}
	req, err := http.NewRequest(method, d.url+path, bytes.NewReader(b))
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.key)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header, out.Bytes()
}

func (d *daemon) sandboxCount() int {
	d.t.Helper()
	st, b := d.api("GET", "/v1/sandboxes", nil)
	var l struct{ Sandboxes []struct{ ID string } }
	if st != 200 || json.Unmarshal(b, &l) != nil {
		d.t.Fatalf("GET /v1/sandboxes = %d %s", st, b)
	}
	return len(l.Sandboxes)
}

// RS-14, AP-11: creates beyond a key's limit of live sandboxes get 429 with
// Retry-After, and leave nothing on the host.
func TestLimitsConcurrentPerKey(t *testing.T) {
	d := startDaemon(t, "", "SBX_MAX_SANDBOXES_PER_KEY=2", "SBX_POOL_SIZE=0")
	defer d.cleanup()
	a := d.create(nil) // positive control: under the limit, creates succeed
	d.create(nil)
	before := leaks(d.dataDir, d.instance)
	if len(before) == 0 {
		t.Fatalf("the host shows nothing of two live sandboxes: the audit below would prove nothing")
	}
	for range 3 {
		st, h, b := d.apiWithHeaders("POST", "/v1/sandboxes", map[string]any{}, nil)
		if st != 429 {
			t.Fatalf("create beyond the limit = %d %s, want 429", st, b)
		}
		e := decodeError(t, b)
		if e.Error.Code != "resource_exhausted" || !strings.Contains(e.Error.Message, "has 2 live sandboxes, the limit is 2") {
			t.Errorf("429 body = %+v, want resource_exhausted naming the limit", e.Error)
		}
		if ra := h.Get("Retry-After"); ra != "1" {
			t.Errorf("Retry-After = %q, want 1", ra)
		}
	}
	if after := leaks(d.dataDir, d.instance); !slices.Equal(before, after) {
		t.Errorf("refused creates changed the host:\nbefore %v\nafter  %v", before, after)
	}
	if n := d.sandboxCount(); n != 2 {
		t.Errorf("%d sandboxes listed after refused creates, want 2", n)
	}
	if st, b := d.api("DELETE", "/v1/sandboxes/"+a, nil); st != 204 {
		t.Fatalf("DELETE = %d %s", st, b)
	}
	d.create(nil) // the delete freed a place
}

// AP-11: execs beyond a key's exec rate get 429 with Retry-After.
func TestLimitsExecRate(t *testing.T) {
	// One token per 100 s after a burst of 2: the third exec is refused however
	// slow the first two are.
	d := startDaemon(t, "", "SBX_EXEC_RATE_PER_KEY=0.01", "SBX_EXEC_BURST_PER_KEY=2", "SBX_POOL_SIZE=0")
	defer d.cleanup()
	id := d.create(nil)
	for range 2 {
		if r := d.sh(id, "echo ok"); r.Stdout != "ok\n" {
			t.Fatalf("exec within the burst = %+v", r)
		}
	}
	st, h, b := d.apiWithHeaders("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "echo no"}, nil)
	if st != 429 {
		t.Fatalf("exec beyond the rate = %d %s, want 429", st, b)
	}
	if e := decodeError(t, b); e.Error.SandboxID != id || !strings.Contains(e.Error.Message, "exec rate") {
		t.Errorf("429 body = %+v, want it to name the sandbox and the exec rate", e.Error)
	}
	if ra := h.Get("Retry-After"); ra == "" || ra == "0" {
		t.Errorf("Retry-After = %q, want the refill time", ra)
	}
}

type auditEntry struct {
	KeyID     string `json:"key_id"`
	SandboxID string `json:"sandbox_id"`
	Action    string `json:"action"`
	Target    string `json:"target"`
	Outcome   string `json:"outcome"`
	Detail    string `json:"detail"`
}

// AP-14: create, exec, file write and delete are audited with the key and the
// sandbox; a secret in a file and in the environment is in neither the audit
// table nor the log.
func TestAuditLogRecordsCalls(t *testing.T) {
	const secret = "s3cr3t-e2e-7d1f0a9c"
	d := startDaemon(t, "")
	defer d.cleanup()
	id := d.create(map[string]any{"env": map[string]string{"API_TOKEN": secret}})
	if st, b := d.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": "/workspace/token.txt", "content": secret}); st != 200 {
		t.Fatalf("write = %d %s", st, b)
	}
	r := d.exec(id, map[string]any{"command": "cat /workspace/token.txt; printenv API_TOKEN OTHER; exit 3",
		"env": map[string]string{"OTHER": secret}})
	if r.ExitCode != 3 || strings.Count(r.Stdout, secret) != 3 {
		t.Fatalf("exec = %+v, want the secret three times and exit 3", r)
	}
	if st, b := d.api("DELETE", "/v1/sandboxes/"+id, nil); st != 204 {
		t.Fatalf("DELETE = %d %s", st, b)
	}

	st, b := d.api("GET", "/v1/audit?sandbox_id="+id, nil)
	var list struct{ Records []auditEntry }
	if st != 200 || json.Unmarshal(b, &list) != nil {
		t.Fatalf("GET /v1/audit = %d %s", st, b)
	}
	byAction := map[string]auditEntry{}
	for _, rec := range list.Records {
		byAction[rec.Action] = rec
	}
	key := byAction["create"].KeyID
	if !strings.HasPrefix(key, "key_") {
		t.Fatalf("create record = %+v, want the admin key's id", byAction["create"])
	}
	for action, target := range map[string]string{"create": "", "write_file": "/workspace/token.txt", "exec_start": "/bin/sh",
		"exec_end": "/bin/sh", "delete": ""} {
		rec, ok := byAction[action]
		if !ok {
			t.Errorf("no %s record in %s", action, b)
			continue
		}
		if rec.KeyID != key || rec.SandboxID != id || rec.Target != target || rec.Outcome != "ok" {
			t.Errorf("%s record = %+v, want key %s, sandbox %s, target %q, ok", action, rec, key, id, target)
		}
	}
	if d := byAction["exec_end"].Detail; !strings.Contains(d, "exit_code=3") || !strings.Contains(d, "reason=exited") {
		t.Errorf("exec_end detail = %q, want the exit code and reason", d)
	}
	// The key's own records, by key_id.
	if st, b := d.api("GET", "/v1/audit?limit=1&key_id="+key, nil); st != 200 || !strings.Contains(string(b), `"action":"delete"`) {
		t.Errorf("GET /v1/audit?key_id = %d %s, want the newest record, the delete", st, b)
	}

	if strings.Contains(string(b), secret) {
		t.Errorf("the audit API shows the secret")
	}
	for _, f := range []string{"sbx.db", "sbx.db-wal"} {
		raw, err := os.ReadFile(filepath.Join(d.dataDir, f))
		if err != nil && f == "sbx.db" {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the store file %s holds the secret", f)
		}
	}
	// The daemon's stderr reaches d.log through a pipe: allow it a moment.
	if !waitUntil(5*time.Second, func() bool {
		logs := d.log.String()
		return strings.Contains(logs, "component=audit") && strings.Contains(logs, "sandbox_id="+id)
	}) {
		t.Errorf("the daemon log has no audit records of %s", id)
	}
	logs := d.log.String()
	if strings.Contains(logs, secret) {
		t.Errorf("the daemon log holds the secret")
	}
}

// RL-08: 20 parallel creates with one Idempotency-Key make one sandbox; a
// replay after kill -9 and restart returns it; another body is 409.
func TestIdempotentCreate(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir)
	body := map[string]any{"labels": map[string]string{"idem": "1"}, "memory_mb": 128}
	hdr := map[string]string{"Idempotency-Key": "e2e-op-1"}
	const n = 20
	ids := make([]string, n)
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			st, _, b := d.apiWithHeaders("POST", "/v1/sandboxes", body, hdr)
			var s struct{ ID string }
			json.Unmarshal(b, &s)
			ids[i], codes[i] = s.ID, st
		})
	}
	wg.Wait()
	created := 0
	for i := range n {
		if codes[i] == 201 {
			created++
		} else if codes[i] != 200 {
			t.Errorf("create %d = %d", i, codes[i])
		}
		if ids[i] == "" || ids[i] != ids[0] {
			t.Errorf("create %d returned %q, want %q", i, ids[i], ids[0])
		}
	}
	if created != 1 {
		t.Errorf("%d of %d creates answered 201, want 1", created, n)
	}
	if c := d.sandboxCount(); c != 1 {
		t.Errorf("%d sandboxes listed, want 1", c)
	}

	st, _, b := d.apiWithHeaders("POST", "/v1/sandboxes", map[string]any{"labels": map[string]string{"idem": "2"}}, hdr)
	if e := decodeError(t, b); st != 409 || !strings.Contains(e.Error.Message, "e2e-op-1") {
		t.Errorf("same key, another body = %d %s, want 409 naming the key", st, b)
	}

	d.kill()
	d = startDaemon(t, dir)
	defer d.cleanup()
	st, _, b = d.apiWithHeaders("POST", "/v1/sandboxes", body, hdr)
	var s struct{ ID string }
	json.Unmarshal(b, &s)
	if st != 200 || s.ID != ids[0] {
		t.Errorf("replay after kill -9 and restart = %d %s, want 200 with %s", st, b, ids[0])
	}
	if c := d.sandboxCount(); c != 1 {
		t.Errorf("%d sandboxes listed after the replay, want 1", c)
	}
	// A new key creates anew (positive control).
	if st, _, b := d.apiWithHeaders("POST", "/v1/sandboxes", body, map[string]string{"Idempotency-Key": "e2e-op-2"}); st != 201 {
		t.Errorf("create with a new key = %d %s, want 201", st, b)
	}
}
