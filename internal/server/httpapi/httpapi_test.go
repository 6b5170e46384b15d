package httpapi

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/backend/fake"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
)

func decodeErr(t *testing.T, b []byte) openapi.ErrorDetail {
	t.Helper()
	var e openapi.ErrorBody
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Code == "" {
		t.Fatalf("not an API error body: %s", b)
	}
	return e.Error
}

func TestWriteErrorTable(t *testing.T) {
	id := sandbox.ID("aaaaaaaaaaaaaaaaaaaaaaaaaa")
	for _, tc := range []struct {
		err        error
		status     int
		code       string
		retryAfter string
	}{
		{sandbox.ErrNotFound, 404, "not_found", ""},
		{sandbox.ErrExists, 409, "already_exists", ""},
		{sandbox.Invalid("timeout", "0 is below 1"), 400, "invalid_argument", ""},
		{sandbox.ErrWrongState, 409, "failed_precondition", ""},
		{fmt.Errorf("%w: sandbox.exec", sandbox.ErrDenied), 403, "permission_denied", ""},
		{sandbox.ErrLimit, 429, "resource_exhausted", "1"},
		{sandbox.ErrUnavailable, 503, "unavailable", "1"},
		{&manager.RetryError{Err: sandbox.ErrUnavailable, After: 2500 * time.Millisecond}, 503, "unavailable", "3"},
		{sandbox.ErrTimeout, 504, "deadline_exceeded", ""},
		{sandbox.ErrTooLarge, 413, "out_of_range", ""},
		{&http.MaxBytesError{Limit: 10}, 413, "out_of_range", ""},
		{&bodyTimeoutError{n: 3, took: 10 * time.Second, rate: Options{}.bodyRate()}, 408, "deadline_exceeded", ""},
		{sandbox.ErrIsolation, 503, "isolation_unavailable", "1"},
		{sandbox.ErrAgentLost, 502, "agent_lost", ""},
		{sandbox.ErrNoSpace, 507, "insufficient_storage", "1"},
		{sandbox.ErrUnauthenticated, 401, "unauthenticated", ""},
		{fmt.Errorf("pausing: %w", errors.ErrUnsupported), 501, "unimplemented", ""},
		{errors.New("disk on fire at /var/lib/sbx/secret"), 500, "internal", ""},
	} {
		t.Run(tc.code, func(t *testing.T) {
			var logs bytes.Buffer
			s := newServer(nil, Options{Log: slogTo(&logs)}) // writeError asks no manager
			rec := httptest.NewRecorder()
			r := httptest.NewRequest("GET", "/v1/sandboxes/"+string(id), nil)
			r.SetPathValue("id", string(id))
			r = r.WithContext(contextWithRequestID(r, "rid1"))
			err := &sandbox.Error{Op: "get", ID: id, Err: tc.err}
			s.writeError(&responseWriter{ResponseWriter: rec}, r, route{op: "get"}, err)
			if rec.Code != tc.status {
				t.Errorf("writeError(%v) status = %d, want %d", tc.err, rec.Code, tc.status)
			}
			e := decodeErr(t, rec.Body.Bytes())
			if e.Code != tc.code || e.SandboxID != string(id) || e.Op != "get" || e.RequestID != "rid1" {
				t.Errorf("writeError(%v) body = %+v, want code %s, sandbox_id, op, request_id", tc.err, e, tc.code)
			}
			if got := rec.Header().Get("Retry-After"); got != tc.retryAfter {
				t.Errorf("writeError(%v) Retry-After = %q, want %q", tc.err, got, tc.retryAfter)
			}
			if tc.status == 500 {
				if strings.Contains(e.Message, "disk on fire") {
					t.Errorf("internal cause leaked to the caller: %q", e.Message)
				}
				if !strings.Contains(logs.String(), "disk on fire") {
					t.Errorf("internal cause not logged: %s", logs.String())
				}
			} else if !strings.Contains(e.Message, string(id)) {
				t.Errorf("message %q does not name the sandbox", e.Message)
			}
		})
	}
}

func TestErrorCodesInOpenAPI(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Properties map[string]struct {
						Enum []string `json:"enum"`
					} `json:"properties"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openapi.Document, &doc); err != nil {
		t.Fatal(err)
	}
	enum := doc.Components.Schemas["Error"].Properties["error"].Properties["code"].Enum
	for _, c := range append(slices.Clone(classes), internalClass) {
		if !slices.Contains(enum, c.code) {
			t.Errorf("code %s is not in the Error schema's enum %v", c.code, enum)
		}
	}
}

func TestHandlerErrorsNameOpAndSandbox(t *testing.T) {
	e := newAPI(t, Options{})
	resp, b := e.do("GET", "/v1/sandboxes/aaaaaaaaaaaaaaaaaaaaaaaaaa", "")
	if resp.StatusCode != 404 {
		t.Fatalf("GET unknown = %d %s", resp.StatusCode, b)
	}
	d := decodeErr(t, b)
	if d.SandboxID != "aaaaaaaaaaaaaaaaaaaaaaaaaa" || d.Message != "get aaaaaaaaaaaaaaaaaaaaaaaaaa: sandbox not found" {
		t.Errorf("404 body = %+v", d)
	}
	if resp.Header.Get("X-Request-Id") == "" || d.RequestID != resp.Header.Get("X-Request-Id") {
		t.Errorf("request id header %q, body %q", resp.Header.Get("X-Request-Id"), d.RequestID)
	}
	// An error raised by the API itself (decoding) is named after the route too.
	id := e.sandbox(`{}`)
	_, b = e.do("POST", "/v1/sandboxes/"+id+"/exec", `{"command":"true","timeout":0}`)
	if d := decodeErr(t, b); d.Op != "exec" || d.SandboxID != id || !strings.HasPrefix(d.Message, "exec "+id+": invalid argument: timeout") {
		t.Errorf("exec timeout 0 = %+v", d)
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	e := newAPI(t, Options{})
	resp, b := e.do("GET", "/v1/nothing", "")
	if resp.StatusCode != 404 || decodeErr(t, b).Code != "not_found" {
		t.Errorf("unknown route = %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("PUT", "/v1/sandboxes", "")
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, POST" || decodeErr(t, b).Code != "unimplemented" {
		t.Errorf("PUT /v1/sandboxes = %d Allow %q %s", resp.StatusCode, resp.Header.Get("Allow"), b)
	}
	// Without a key, an unknown route is 401: the route table is not revealed.
	resp, err := http.Get(e.srv.URL + "/v1/nothing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("unknown route without key = %d, want 401", resp.StatusCode)
	}
}

// AP-01: every route but the public ones answers 401 to a missing, malformed or
// unknown key, before any other check.
func TestAuthOnEveryRoute(t *testing.T) {
	e := newAPI(t, Options{})
	for _, rt := range e.s.routes() {
		path := strings.NewReplacer("{id}", "aaaaaaaaaaaaaaaaaaaaaaaaaa", "{pid}", "p1").Replace(rt.path)
		for _, auth := range []string{"", "Bearer", "Bearer ", "Basic abc", "Bearer wrong", "bearer " + e.token + "x", e.token} {
			req, _ := http.NewRequest(rt.method, e.srv.URL+path, strings.NewReader(`{}`))
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := 401
			if rt.public {
				want = 200
			}
			if resp.StatusCode != want {
				t.Errorf("%s %s with Authorization %q = %d %s, want %d", rt.method, rt.path, auth, resp.StatusCode, b, want)
			}
			if want == 401 {
				if d := decodeErr(t, b); d.Code != "unauthenticated" || strings.Contains(d.Message, "wrong") {
					t.Errorf("%s %s: 401 body %+v (the key must never be echoed)", rt.method, rt.path, d)
				}
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s %s: 401 without WWW-Authenticate", rt.method, rt.path)
				}
			}
		}
	}
	// Scheme is case-insensitive.
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/sandboxes", nil)
	req.Header.Set("Authorization", "bearer "+e.token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("lower-case bearer = %d", resp.StatusCode)
	}
}

// The OpenAPI document and the mux agree, both ways.
func TestRoutesMatchOpenAPI(t *testing.T) {
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapi.Document, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	s := newServer(nil, Options{}) // the routing table asks no manager
	routed := map[string]bool{}
	for _, rt := range s.routes() {
		key := strings.ToLower(rt.method) + " " + docPath(rt.path)
		routed[key] = true
		op, ok := doc.Paths[docPath(rt.path)][strings.ToLower(rt.method)]
		if !ok {
			t.Errorf("route %s %s is not in openapi.json", rt.method, rt.path)
			continue
		}
		var o struct {
			Security []any `json:"security"`
		}
		json.Unmarshal(op, &o)
		if public := o.Security != nil && len(o.Security) == 0; public != rt.public {
			t.Errorf("%s %s: public in openapi.json = %v, in the mux = %v", rt.method, rt.path, public, rt.public)
		}
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			if !routed[method+" "+path] {
				t.Errorf("openapi.json has %s %s, which is not routed", strings.ToUpper(method), path)
			}
		}
	}
}

func TestOpenAPIRefsResolve(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(openapi.Document, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				var cur any = doc
				for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
					m, _ := cur.(map[string]any)
					cur = m[part]
				}
				if cur == nil {
					t.Errorf("$ref %s does not resolve", ref)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
}

func TestPublicRoutes(t *testing.T) {
	e := newAPI(t, Options{}, func(o *manager.Options) { o.PoolSize = 2 })
	// Once the warm pool is full, a create takes one of its sandboxes, whose
	// replacement then starts for as long as the test runs: one of two ready.
	for deadline := time.Now().Add(time.Minute); e.m.Pool().Ready < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the warm pool did not fill: %+v", e.m.Pool())
		}
	}
	e.d.SetStartDelay(time.Hour)
	e.sandbox(`{}`)
	resp, err := http.Get(e.srv.URL + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	var h openapi.Health
	json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if resp.StatusCode != 200 || h.Status != "ok" || len(h.Backends) != 1 || !h.Backends[0].Primary || h.Backends[0].Layers["pidns"] != "applied" ||
		h.Pool == nil || *h.Pool != (openapi.PoolHealth{Size: 2, Ready: 1}) {
		t.Errorf("health = %d %+v", resp.StatusCode, h)
	}
	resp, err = http.Get(e.srv.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(b, openapi.Document) {
		t.Errorf("openapi.json = %d, %d bytes", resp.StatusCode, len(b))
	}
}

func TestSandboxLifecycle(t *testing.T) {
	e := newAPI(t, Options{})
	resp, b := e.do("POST", "/v1/sandboxes", `{"timeout":120,"memory_mb":256,"cpus":0.5,"pids":64,"labels":{"a":"1"},"env":{"SECRET":"hunter2"}}`)
	if resp.StatusCode != 201 {
		t.Fatalf("create = %d %s", resp.StatusCode, b)
	}
	var sb openapi.Sandbox
	if err := json.Unmarshal(b, &sb); err != nil {
		t.Fatal(err)
	}
	if sb.State != "running" || sb.Limits != (openapi.Limits{MemoryMB: 256, CPUs: 0.5, Pids: 64, DiskMB: 1024, Timeout: 120}) ||
		sb.Labels["a"] != "1" || sb.Isolation.Layers["pidns"] != "applied" || resp.Header.Get("Location") != "/v1/sandboxes/"+sb.ID {
		t.Errorf("created = %s", b)
	}
	if bytes.Contains(b, []byte("hunter2")) {
		t.Errorf("env value echoed in the sandbox object: %s", b)
	}
	for _, k := range []string{`"id"`, `"state"`, `"backend"`, `"template"`, `"created_at"`, `"expires_at"`, `"limits"`, `"network"`, `"labels"`,
		`"isolation"`, `"level"`, `"layers"`, `"landlock_abi"`, `"cgroup"`, `"accepted_gaps"`, `"sandbox"`} {
		if !bytes.Contains(b, []byte(k)) {
			t.Errorf("sandbox object lacks %s: %s", k, b)
		}
	}
	_, b = e.do("GET", "/v1/sandboxes?label=a=1", "")
	var list openapi.SandboxList
	json.Unmarshal(b, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != sb.ID {
		t.Errorf("list by label = %s", b)
	}
	_, b = e.do("GET", "/v1/sandboxes?label=a=2", "")
	if string(b) != "{\"sandboxes\":[]}\n" {
		t.Errorf("empty list = %s, want an empty array", b)
	}
	if resp, b := e.do("PATCH", "/v1/sandboxes/"+sb.ID, `{"timeout":600}`); resp.StatusCode != 200 {
		t.Errorf("patch = %d %s", resp.StatusCode, b)
	}
	if resp, b := e.do("PATCH", "/v1/sandboxes/"+sb.ID, `{"timeout":0}`); resp.StatusCode != 400 || !strings.Contains(decodeErr(t, b).Message, "timeout") {
		t.Errorf("patch timeout 0 = %d %s", resp.StatusCode, b)
	}
	if resp, b := e.do("DELETE", "/v1/sandboxes/"+sb.ID, ""); resp.StatusCode != 204 || len(b) != 0 {
		t.Errorf("delete = %d %s", resp.StatusCode, b)
	}
	if resp, b := e.do("DELETE", "/v1/sandboxes/"+sb.ID, ""); resp.StatusCode != 404 {
		t.Errorf("second delete = %d %s", resp.StatusCode, b)
	}
}

func TestBadInput(t *testing.T) {
	e := newAPI(t, Options{})
	id := e.sandbox(`{}`)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		mention                  string
	}{
		{"create timeout 0", "POST", "/v1/sandboxes", `{"timeout":0}`, 400, "timeout"},
		{"create timeout negative", "POST", "/v1/sandboxes", `{"timeout":-5}`, 400, "timeout"},
		{"create timeout huge", "POST", "/v1/sandboxes", `{"timeout":9223372036854775807}`, 400, "timeout"},
		{"memory wrong type", "POST", "/v1/sandboxes", `{"memory_mb":"lots"}`, 400, "memory_mb"},
		{"memory float", "POST", "/v1/sandboxes", `{"memory_mb":1.5}`, 400, "memory_mb"},
		{"memory overflow", "POST", "/v1/sandboxes", `{"memory_mb":9223372036854775807}`, 400, "memory_mb"},
		{"memory below need", "POST", "/v1/sandboxes", `{"memory_mb":1}`, 400, "memory_mb"},
		{"cpus zero", "POST", "/v1/sandboxes", `{"cpus":0}`, 400, "cpus"},
		{"cpus huge", "POST", "/v1/sandboxes", `{"cpus":1e300}`, 400, "cpus"},
		{"labels wrong type", "POST", "/v1/sandboxes", `{"labels":["a"]}`, 400, "labels"},
		{"label value wrong type", "POST", "/v1/sandboxes", `{"labels":{"a":1}}`, 400, "labels"},
		{"not an object", "POST", "/v1/sandboxes", `[1,2]`, 400, "body"},
		{"trailing data", "POST", "/v1/sandboxes", `{} {}`, 400, "body"},
		{"syntax", "POST", "/v1/sandboxes", `{"timeout":`, 400, "body"},
		{"duplicate key", "POST", "/v1/sandboxes", `{"timeout":5,"timeout":0}`, 400, "timeout"},
		{"invalid utf-8", "POST", "/v1/sandboxes", "{\"template\":\"\xff\xfe\"}", 400, "UTF-8"},
		{"exec timeout 0", "POST", "/v1/sandboxes/" + id + "/exec", `{"command":"true","timeout":0}`, 400, "timeout"},
		{"exec timeout 3601", "POST", "/v1/sandboxes/" + id + "/exec", `{"command":"true","timeout":3601}`, 400, "timeout"},
		{"exec no command", "POST", "/v1/sandboxes/" + id + "/exec", `{}`, 400, "command"},
		{"exec both", "POST", "/v1/sandboxes/" + id + "/exec", `{"command":"x","argv":["x"]}`, 400, "command"},
		{"exec command array", "POST", "/v1/sandboxes/" + id + "/exec", `{"command":["ls"]}`, 400, "command"},
		{"exec NUL argv", "POST", "/v1/sandboxes/" + id + "/exec", `{"argv":["a\u0000b"]}`, 400, "argv[0]"},
		{"exec bad stdin base64", "POST", "/v1/sandboxes/" + id + "/exec", `{"command":"cat","stdin_base64":"!!"}`, 400, "stdin_base64"},
		{"exec bad env name", "POST", "/v1/sandboxes/" + id + "/exec", `{"command":"true","env":{"A;B":"x"}}`, 400, "env"},
		{"unknown id exec", "POST", "/v1/sandboxes/bbbbbbbbbbbbbbbbbbbbbbbbbb/exec", `{"command":"true"}`, 404, "bbbbbbbbbbbbbbbbbbbbbbbbbb"},
		{"NUL in path", "GET", "/v1/sandboxes/" + id + "/files/read?path=/etc/host%00name", "", 400, "path"},
		{"missing path", "GET", "/v1/sandboxes/" + id + "/files/read", "", 400, "path"},
		{"bad limit", "GET", "/v1/sandboxes/" + id + "/files/read?path=a&limit=x", "", 400, "limit"},
		{"write bad mode", "PUT", "/v1/sandboxes/" + id + "/files/write", `{"path":"a","content":"x","mode":"999"}`, 400, "mode"},
		{"write both contents", "PUT", "/v1/sandboxes/" + id + "/files/write", `{"path":"a","content":"x","content_base64":"eA=="}`, 400, "content"},
		{"upload bad mode", "PUT", "/v1/sandboxes/" + id + "/files/upload?path=a&mode=rwx", "x", 400, "mode"},
		{"signal unknown", "POST", "/v1/sandboxes/" + id + "/processes/p1/signal", `{"signal":"SIGFOO"}`, 400, "signal"},
		{"signal range", "POST", "/v1/sandboxes/" + id + "/processes/p1/signal", `{"signal":0}`, 400, "signal"},
		{"stream unknown", "POST", "/v1/sandboxes/" + id + "/exec?stream=xml", `{"command":"true"}`, 400, "stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := e.do(tc.method, tc.path, tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("%s %s %s = %d %s, want %d", tc.method, tc.path, tc.body, resp.StatusCode, b, tc.status)
			}
			if d := decodeErr(t, b); !strings.Contains(d.Message, tc.mention) {
				t.Errorf("message %q does not name %q", d.Message, tc.mention)
			}
		})
	}
}

// AP-07: hostile bodies get a fast 400 or 413.
func TestHostileBodies(t *testing.T) {
	e := newAPI(t, Options{})
	// 100 MB declared: refused before reading.
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/sandboxes", io.LimitReader(zeros{}, 100<<20))
	req.ContentLength = 100 << 20
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := e.srv.Client().Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 || decodeErr(t, b).Code != "out_of_range" {
			t.Errorf("100 MB declared = %d %s, want 413", resp.StatusCode, b)
		}
	} // else: the server closed the connection while the client was still sending, as it may.

	// 100 MB chunked: cut at the limit.
	req, _ = http.NewRequest("POST", e.srv.URL+"/v1/sandboxes", io.MultiReader(strings.NewReader(`{"template":"`), io.LimitReader(zeros{}, 100<<20)))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err = e.srv.Client().Do(req)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 {
			t.Errorf("100 MB chunked = %d %.200s, want 413", resp.StatusCode, b)
		}
	}

	for _, tc := range []struct {
		name, body string
	}{
		{"10k nested arrays", `{"labels":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`},
		{"10k nested objects", strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)},
		{"huge array of the wrong type", `{"labels":[` + strings.Repeat(`1,`, 1<<20) + `1]}`},
	} {
		resp, b := e.do("POST", "/v1/sandboxes", tc.body)
		if resp.StatusCode != 400 {
			t.Errorf("%s = %d %.200s, want 400", tc.name, resp.StatusCode, b)
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

func TestExecJSON(t *testing.T) {
	e := newAPI(t, Options{})
	id := e.sandbox(`{}`)
	e.d.Script("echo a;b", fake.Run{Output: []fake.Output{{Data: []byte("hi\n")}, {Stderr: true, Data: []byte{0xff, 0x00}}}})
	resp, b := e.do("POST", "/v1/sandboxes/"+id+"/exec", `{"argv":["echo","a;b"],"stdin":"in"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("exec = %d %s", resp.StatusCode, b)
	}
	var r openapi.ExecResult
	json.Unmarshal(b, &r)
	// The fake agent gives stdin back after the script's output, as cat would.
	if r.Stdout != "hi\nin" || r.StdoutBase64 != "" || r.ProcessID != "fake-1" || r.PID != 42 || r.Reason != "exited" {
		t.Errorf("result = %s", b)
	}
	raw, _ := base64.StdEncoding.DecodeString(r.StderrBase64)
	if !bytes.Equal(raw, []byte{0xff, 0x00}) || r.Stderr != "\uFFFD\x00" {
		t.Errorf("binary stderr = %q / %q", r.Stderr, r.StderrBase64)
	}
	for _, k := range []string{"process_id", "pid", "stdout", "stderr", "exit_code", "reason", "signal", "duration_ms", "truncated", "stdout_dropped", "stderr_dropped"} {
		if !bytes.Contains(b, []byte(`"`+k+`"`)) {
			t.Errorf("result lacks %s: %s", k, b)
		}
	}
	resp, b = e.do("POST", "/v1/sandboxes/"+id+"/exec", `{"command":"sleep 9","background":true}`)
	if resp.StatusCode != 202 || string(b) != "{\"process_id\":\"fake-2\",\"pid\":43}\n" {
		t.Errorf("background = %d %s", resp.StatusCode, b)
	}
}

// Hostile output (NUL, invalid UTF-8, ANSI escapes, newlines, U+2028) keeps
// every NDJSON line one valid JSON object, and bytes survive exactly.
func TestExecStreamNDJSONFraming(t *testing.T) {
	e := newAPI(t, Options{})
	id := e.sandbox(`{}`)
	hostile := [][]byte{
		[]byte("plain\n"),
		{0x00, 0x01, 0x1b, '[', '3', '1', 'm', 'r', 'e', 'd', 0x1b, '[', '0', 'm'},
		{0xff, 0xfe, '\n', '\r', 0xc3}, // invalid UTF-8 and a split sequence
		[]byte("\u2028\u2029\"}\n{\"type\":\"result\"}\n"),
	}
	run := fake.Run{ExitCode: 4}
	for i, h := range hostile {
		run.Output = append(run.Output, fake.Output{Stderr: i%2 == 1, Data: h})
	}
	e.d.Script("x", run)
	for _, how := range [][]string{{"Accept", "application/x-ndjson"}, {"X-None", ""}} {
		path := "/v1/sandboxes/" + id + "/exec"
		if how[0] == "X-None" {
			path += "?stream=ndjson"
		}
		resp, b := e.do("POST", path, `{"command":"x"}`, how...)
		if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
			t.Fatalf("Content-Type = %q", ct)
		}
		var got [][]byte
		var types []string
		var started string
		var result *openapi.ExecResult
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			var ev openapi.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
			}
			types = append(types, ev.Type)
			switch ev.Type {
			case "started":
				started = ev.ProcessID
			case "stdout", "stderr":
				data := []byte(ev.Data)
				if ev.DataBase64 != "" {
					data, _ = base64.StdEncoding.DecodeString(ev.DataBase64)
				}
				got = append(got, data)
			case "result":
				result = ev.Result
			}
		}
		if want := []string{"started", "stdout", "stderr", "stdout", "stderr", "result"}; !slices.Equal(types, want) {
			t.Fatalf("types = %v, want %v", types, want)
		}
		for i := range hostile {
			if !bytes.Equal(got[i], hostile[i]) {
				t.Errorf("chunk %d = %q, want %q", i, got[i], hostile[i])
			}
		}
		if result == nil || result.ExitCode != 4 || started == "" || result.ProcessID != started {
			t.Errorf("result = %+v, want exit code 4 of process %q", result, started)
		}
	}
}

func TestExecStreamSSE(t *testing.T) {
	e := newAPI(t, Options{})
	id := e.sandbox(`{}`)
	e.d.Script("x", fake.Run{Output: []fake.Output{{Data: []byte("a\n\nb")}}})
	resp, b := e.do("POST", "/v1/sandboxes/"+id+"/exec", `{"command":"x"}`, "Accept", "text/event-stream")
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("Content-Type = %q", resp.Header.Get("Content-Type"))
	}
	frames := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
	if len(frames) != 3 {
		t.Fatalf("frames = %q", frames)
	}
	for i, typ := range []string{"started", "stdout", "result"} {
		ev, data, ok := strings.Cut(frames[i], "\n")
		if !ok || ev != "event: "+typ || !strings.HasPrefix(data, "data: {") || strings.Contains(data, "\n") {
			t.Errorf("frame %d = %q", i, frames[i])
		}
	}
}

// An error before the stream begins is an ordinary error response; after it,
// the stream's last event.
func TestExecStreamErrors(t *testing.T) {
	e := newAPI(t, Options{})
	resp, b := e.do("POST", "/v1/sandboxes/aaaaaaaaaaaaaaaaaaaaaaaaaa/exec", `{"command":"x"}`, "Accept", "application/x-ndjson")
	if resp.StatusCode != 404 || decodeErr(t, b).Code != "not_found" {
		t.Errorf("stream on unknown sandbox = %d %s", resp.StatusCode, b)
	}
}

func TestStreamErrorEvent(t *testing.T) {
	s := newServer(nil, Options{}) // stream runs the function it is given
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/v1/sandboxes/x/exec", nil)
	r = r.WithContext(contextWithRequestID(r, "rid"))
	err := s.stream(&responseWriter{ResponseWriter: rec}, r, ndjson, func(on func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
		on(sandbox.ExecEvent{Stdout: []byte("partial")})
		return nil, &sandbox.Error{Op: "exec", ID: "x", Err: sandbox.ErrAgentLost}
	})
	if err != nil {
		t.Fatalf("stream returned %v after it began", err)
	}
	lines := strings.Split(strings.TrimSpace(rec.Body.String()), "\n")
	var last openapi.Event
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if len(lines) != 2 || last.Type != "error" || last.Error == nil || last.Error.Code != "agent_lost" || last.Error.SandboxID != "x" {
		t.Errorf("stream = %q", rec.Body.String())
	}
}

func TestProcessRoutes(t *testing.T) {
	e := newAPI(t, Options{})
	id := e.sandbox(`{}`)
	// start runs a process in the background; the fake agent's runs until
	// signal 9 ends it.
	start := func() openapi.ProcessStarted {
		t.Helper()
		resp, b := e.do("POST", "/v1/sandboxes/"+id+"/exec", `{"argv":["sleep","9"],"background":true}`)
		var p openapi.ProcessStarted
		if resp.StatusCode != 202 || json.Unmarshal(b, &p) != nil || p.ProcessID == "" {
			t.Fatalf("background exec = %d %s", resp.StatusCode, b)
		}
		return p
	}
	sleeper := start()
	resp, b := e.do("GET", "/v1/sandboxes/"+id+"/processes/"+sleeper.ProcessID, "")
	var p openapi.Process
	json.Unmarshal(b, &p)
	if resp.StatusCode != 200 || p.State != "running" || p.PID != sleeper.PID || p.ProcessID != sleeper.ProcessID || !slices.Equal(p.Argv, []string{"sleep", "9"}) {
		t.Errorf("process = %d %s", resp.StatusCode, b)
	}
	if resp, b := e.do("GET", "/v1/sandboxes/"+id+"/processes/p2", ""); resp.StatusCode != 404 || !strings.Contains(decodeErr(t, b).Message, "p2") {
		t.Errorf("unknown process = %d %s", resp.StatusCode, b)
	}
	for sig, want := range map[string]string{`"SIGKILL"`: "stopped", `"KILL"`: "stopped", `9`: "stopped", `"9"`: "stopped", `"sigterm"`: "signaled", `15`: "signaled"} {
		p := start()
		resp, b := e.do("POST", "/v1/sandboxes/"+id+"/processes/"+p.ProcessID+"/signal", `{"signal":`+sig+`}`)
		if resp.StatusCode != 200 || string(b) != `{"outcome":"`+want+`"}`+"\n" {
			t.Errorf("signal %s = %d %s, want %s", sig, resp.StatusCode, b, want)
		}
	}
	// Once killed, the process has exited, with its result, and says so to another signal.
	e.do("POST", "/v1/sandboxes/"+id+"/processes/"+sleeper.ProcessID+"/signal", `{"signal":"KILL"}`)
	_, b = e.do("GET", "/v1/sandboxes/"+id+"/processes/"+sleeper.ProcessID, "")
	p = openapi.Process{}
	json.Unmarshal(b, &p)
	if p.State != "exited" || p.Result == nil || p.Result.Signal != 9 || p.Result.ProcessID != sleeper.ProcessID {
		t.Errorf("killed process = %s", b)
	}
	if _, b := e.do("POST", "/v1/sandboxes/"+id+"/processes/"+sleeper.ProcessID+"/signal", `{"signal":15}`); string(b) != `{"outcome":"already_exited"}`+"\n" {
		t.Errorf("signal to an exited process = %s", b)
	}
}

func TestFiles(t *testing.T) {
	e := newAPI(t, Options{})
	id := e.sandbox(`{}`)
	resp, b := e.do("PUT", "/v1/sandboxes/"+id+"/files/write", `{"path":"/workspace/a.bin","content_base64":"AP8=","mode":"0600"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("write = %d %s", resp.StatusCode, b)
	}
	var fi openapi.FileInfo
	json.Unmarshal(b, &fi)
	if fi.Size != 2 || fi.Mode != "0600" || fi.Type != "file" || fi.Path != "/workspace/a.bin" {
		t.Errorf("write = %s", b)
	}
	_, b = e.do("GET", "/v1/sandboxes/"+id+"/files/read?path=/workspace/a.bin", "")
	var fc openapi.FileContent
	json.Unmarshal(b, &fc)
	if fc.ContentBase64 != "AP8=" || fc.Size != 2 || !fc.EOF || fc.Length != 2 {
		t.Errorf("read binary = %s", b)
	}
	e.do("PUT", "/v1/sandboxes/"+id+"/files/write", `{"path":"t","content":"héllo","mode":420}`)
	_, b = e.do("GET", "/v1/sandboxes/"+id+"/files/read?path=t&offset=1&limit=2", "")
	fc = openapi.FileContent{}
	json.Unmarshal(b, &fc)
	if fc.Content != "é" || fc.ContentBase64 != "" || fc.Offset != 1 || fc.EOF {
		t.Errorf("read page = %s", b)
	}
	if resp, b := e.do("GET", "/v1/sandboxes/"+id+"/files/read?path=/workspace/none", ""); resp.StatusCode != 404 || !strings.Contains(decodeErr(t, b).Message, "/workspace/none") {
		t.Errorf("read of a missing file = %d %s, want 404 naming it", resp.StatusCode, b)
	}
	// Download streams the bytes with their length.
	resp, b = e.do("GET", "/v1/sandboxes/"+id+"/files/download?path=/workspace/a.bin", "")
	if resp.StatusCode != 200 || !bytes.Equal(b, []byte{0, 0xff}) || resp.ContentLength != 2 || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("download = %d %q len %d", resp.StatusCode, b, resp.ContentLength)
	}
}

// Uploads stream: a 1 GiB body passes through to the agent without being held.
func TestUploadStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("1 GiB upload skipped in -short")
	}
	e := newAPI(t, Options{})
	id := e.sandbox(`{}`)
	const n = 1 << 30 // the default disk quota: the most one upload may bring
	req, _ := http.NewRequest("PUT", e.srv.URL+"/v1/sandboxes/"+id+"/files/upload?path=big&mode=0644", io.LimitReader(zeros{}, n))
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var fi openapi.FileInfo
	if resp.StatusCode != 200 || json.Unmarshal(b, &fi) != nil || fi.Size != n {
		t.Errorf("upload = %d %s, want the agent to have received %d bytes", resp.StatusCode, b, n)
	}
}

// An upload's length reaches the manager, which refuses one over the
// sandbox's quota before reading it: 413, and the agent is never called.
func TestUploadLimit(t *testing.T) {
	e := newAPI(t, Options{})
	id := e.sandbox(`{"disk_mb":16}`)
	// The body never comes: only the announced length can have been judged.
	body, w := io.Pipe()
	defer w.Close()
	req, _ := http.NewRequest("PUT", e.srv.URL+"/v1/sandboxes/"+id+"/files/upload?path=big", body)
	req.ContentLength = 16<<20 + 1
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := decodeErr(t, b)
	if resp.StatusCode != 413 || d.Code != "out_of_range" || d.SandboxID != id ||
		!strings.Contains(d.Message, "the upload's 16777217 bytes are more than the sandbox's disk quota (disk_mb 16") {
		t.Errorf("upload over the quota = %d %+v, want 413 naming the length, the quota and the sandbox", resp.StatusCode, d)
	}
	if n := e.d.Called("Upload", sandbox.ID(id)); n != 0 {
		t.Errorf("the agent got %d uploads, want none", n)
	}
}

func TestRequestIDAndLogs(t *testing.T) {
	var logs bytes.Buffer
	e := newAPI(t, Options{Log: slogTo(&logs)})
	id := e.sandbox(`{}`)
	e.d.Script("echo hunter2", fake.Run{Output: []fake.Output{{Data: []byte("hunter2\n")}}})
	resp, b := e.do("POST", "/v1/sandboxes/"+id+"/exec", `{"command":"echo hunter2","env":{"K":"hunter2"}}`, "X-Request-Id", "abc-123")
	if resp.Header.Get("X-Request-Id") != "abc-123" || !strings.Contains(string(b), `"stdout":"hunter2\n"`) {
		t.Errorf("exec = %s with request id %q, want hunter2 and the caller's id", b, resp.Header.Get("X-Request-Id"))
	}
	resp, _ = e.do("GET", "/v1/sandboxes", "", "X-Request-Id", "bad id;x")
	if got := resp.Header.Get("X-Request-Id"); got == "" || strings.ContainsAny(got, " ;") {
		t.Errorf("hostile request id kept: %q", got)
	}
	if !strings.Contains(logs.String(), "request_id=abc-123") || !strings.Contains(logs.String(), "sandbox_id="+id) {
		t.Errorf("request log lacks ids:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "hunter2") || strings.Contains(logs.String(), e.token) {
		t.Errorf("a body or key reached the log:\n%s", logs.String())
	}
}
