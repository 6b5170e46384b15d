package e2bapi

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/backend/fake"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/internal/testutil/managertest"
	"sbx.dev/sbx/internal/tools"
)

// env is the E2B API over a real manager (SQLite store, fake backend),
// served alone on an httptest server.
type env struct {
	t     *testing.T
	srv   *httptest.Server
	m     *manager.Manager
	d     *fake.Driver
	admin string // the admin key's secret
}

func newEnv(t *testing.T) *env {
	t.Helper()
	me := managertest.New(t)
	h := New(me.M, Options{Log: testutil.Logger(t), Domain: "sbx.test"})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.Match(r) {
			http.Error(w, "not an E2B request", http.StatusTeapot)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &env{t: t, srv: srv, m: me.M, d: me.Driver, admin: me.AdminToken}
}

// key makes an API key holding caps (nil: all) and returns its secret.
func (e *env) key(name string, caps []string) string {
	e.t.Helper()
	k, err := e.m.Authenticate(e.t.Context(), e.admin)
	if err != nil {
		e.t.Fatal(err)
	}
	secret, _, err := e.m.CreateKey(manager.WithKey(e.t.Context(), k), name, caps)
	if err != nil {
		e.t.Fatal(err)
	}
	return secret
}

// do sends a request with headers given as name, value pairs and returns
// the response with its body read.
func (e *env) do(method, path, body string, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// api sends a control-plane request with key.
func (e *env) api(key, method, path, body string) (*http.Response, []byte) {
	e.t.Helper()
	return e.do(method, path, body, "X-API-Key", key, "Content-Type", "application/json")
}

// create makes a sandbox with key and returns E2B's answer.
func (e *env) create(key, body string) sandboxJSON {
	e.t.Helper()
	resp, b := e.api(key, "POST", "/v2/sandboxes", body)
	var sb sandboxJSON
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &sb) != nil {
		e.t.Fatalf("create %s = %d %s", body, resp.StatusCode, b)
	}
	return sb
}

// wantError checks an E2B error body: its code is the status, as the SDK needs.
func wantError(t *testing.T, resp *http.Response, b []byte, status int, inMessage ...string) {
	t.Helper()
	var e apiError
	if resp.StatusCode != status || json.Unmarshal(b, &e) != nil || e.Code != status {
		t.Fatalf("got %d %s, want %d with code %d", resp.StatusCode, b, status, status)
	}
	for _, s := range inMessage {
		if !strings.Contains(e.Message, s) {
			t.Errorf("message %q does not name %q", e.Message, s)
		}
	}
}

func TestCreateGetKill(t *testing.T) {
	e := newEnv(t)
	sb := e.create(e.admin, `{"templateID":"base","timeout":120,"metadata":{"app":"a"},"envVars":{"FOO":"bar"}}`)
	if sb.SandboxID == "" || sb.TemplateID != "base" || sb.EnvdVersion != EnvdVersion || sb.EnvdAccessToken == "" || sb.ClientID == "" {
		t.Fatalf("create answer = %+v", sb)
	}
	resp, b := e.api(e.admin, "GET", "/sandboxes/"+sb.SandboxID, "")
	var d detailJSON
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &d) != nil {
		t.Fatalf("get = %d %s", resp.StatusCode, b)
	}
	started, _ := time.Parse(time.RFC3339Nano, d.StartedAt)
	end, _ := time.Parse(time.RFC3339Nano, d.EndAt)
	if d.State != "running" || d.Metadata["app"] != "a" || len(d.Metadata) != 1 || d.EnvdAccessToken != sb.EnvdAccessToken ||
		end.Sub(started) < 119*time.Second || end.Sub(started) > 121*time.Second || d.TemplateID != "base" {
		t.Errorf("get = %s", b)
	}
	var full sandbox.Sandbox

	resp, _ = e.api(e.admin, "POST", "/sandboxes/"+sb.SandboxID+"/timeout", `{"timeout":30}`)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("timeout = %d", resp.StatusCode)
	}
	if full, _ = e.m.Get(t.Context(), sandbox.ID(sb.SandboxID)); time.Until(full.ExpiresAt) > 31*time.Second {
		t.Errorf("expires in %s after setting 30 s", time.Until(full.ExpiresAt))
	}
	// connect extends only: 10 s is earlier than the 30 s it has.
	resp, b = e.api(e.admin, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", `{"timeout":10}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), sb.EnvdAccessToken) {
		t.Fatalf("connect = %d %s", resp.StatusCode, b)
	}
	if full, _ = e.m.Get(t.Context(), sandbox.ID(sb.SandboxID)); time.Until(full.ExpiresAt) < 20*time.Second {
		t.Errorf("connect shortened the timeout to %s", time.Until(full.ExpiresAt))
	}

	resp, b = e.api(e.admin, "POST", "/sandboxes/"+sb.SandboxID+"/pause", `{}`)
	wantError(t, resp, b, http.StatusNotImplemented, "cannot pause", sb.SandboxID)

	resp, _ = e.api(e.admin, "DELETE", "/sandboxes/"+sb.SandboxID, "")
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("kill = %d", resp.StatusCode)
	}
	resp, b = e.api(e.admin, "DELETE", "/sandboxes/"+sb.SandboxID, "")
	wantError(t, resp, b, http.StatusNotFound, sb.SandboxID)
	resp, b = e.api(e.admin, "GET", "/sandboxes/"+sb.SandboxID, "")
	wantError(t, resp, b, http.StatusNotFound, sb.SandboxID)
	resp, b = e.api(e.admin, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", `{}`)
	wantError(t, resp, b, http.StatusNotFound)
}

func TestCreateRefusals(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		body   string
		status int
		names  string
	}{
		{`{"templateID":"nope"}`, http.StatusNotFound, "template 'nope' not found"},
		{`{"templateID":"base","autoPause":true}`, http.StatusNotImplemented, "autoPause"},
		{`{"templateID":"base","volumeMounts":[{"name":"v","path":"/v"}]}`, http.StatusNotImplemented, "volumeMounts"},
		{`{"templateID":"base","timeout":0}`, http.StatusBadRequest, "timeout"},
		{`{"templateID":"base","timeout":999999999}`, http.StatusBadRequest, "timeout"},
		{`{"templateID":"base","metadata":{"e2b.template":"x"}}`, http.StatusBadRequest, "reserved"},
		{`{"templateID":`, http.StatusBadRequest, "request body"},
	} {
		resp, b := e.api(e.admin, "POST", "/v2/sandboxes", tc.body)
		wantError(t, resp, b, tc.status, tc.names)
	}
	if held := e.d.Held(); len(held) != 0 {
		t.Errorf("refused creates left sandboxes: %v", held)
	}
}

// Calls of E2B's API that sbx does not serve answer 501 naming the call: a
// 404 would read as "sandbox not found" to the SDK.
func TestUnservedCalls(t *testing.T) {
	e := newEnv(t)
	sb := e.create(e.admin, `{"templateID":"base"}`)
	for _, c := range [][2]string{
		{"POST", "/sandboxes/" + sb.SandboxID + "/fork"},
		{"POST", "/sandboxes/" + sb.SandboxID + "/snapshots"},
		{"GET", "/snapshots"},
		{"POST", "/v3/templates"},
		{"GET", "/volumes"},
		{"PUT", "/sandboxes/" + sb.SandboxID + "/network"},
	} {
		resp, b := e.api(e.admin, c[0], c[1], "{}")
		wantError(t, resp, b, http.StatusNotImplemented, c[0]+" "+c[1], "not part of the E2B API")
	}
	// Without a key they are 401 like every call.
	resp, b := e.api("", "GET", "/snapshots", "")
	wantError(t, resp, b, http.StatusUnauthorized)
}

func TestAuthAndOwnership(t *testing.T) {
	e := newEnv(t)
	resp, b := e.api("", "GET", "/v2/sandboxes", "")
	wantError(t, resp, b, http.StatusUnauthorized)
	resp, b = e.api("wrong", "GET", "/v2/sandboxes", "")
	wantError(t, resp, b, http.StatusUnauthorized)

	alice, bob := e.key("alice", nil), e.key("bob", nil)
	sa := e.create(alice, `{"templateID":"base"}`)
	sb := e.create(bob, `{"templateID":"base"}`)
	// Bob sees his sandbox only; Alice's is not found to him on every route.
	resp, b = e.api(bob, "GET", "/v2/sandboxes", "")
	if resp.StatusCode != http.StatusOK || strings.Contains(string(b), sa.SandboxID) || !strings.Contains(string(b), sb.SandboxID) {
		t.Errorf("bob's list = %d %s", resp.StatusCode, b)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/sandboxes/" + sa.SandboxID, ""},
		{"DELETE", "/sandboxes/" + sa.SandboxID, ""},
		{"POST", "/sandboxes/" + sa.SandboxID + "/timeout", `{"timeout":5}`},
		{"POST", "/v2/sandboxes/" + sa.SandboxID + "/connect", `{}`},
		{"GET", "/sandboxes/" + sa.SandboxID + "/metrics", ""},
	} {
		resp, b := e.api(bob, c.method, c.path, c.body)
		wantError(t, resp, b, http.StatusNotFound)
	}
	// Control: Alice reaches it.
	if resp, b := e.api(alice, "GET", "/sandboxes/"+sa.SandboxID, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("alice's get = %d %s", resp.StatusCode, b)
	}
	// Bob's token does not open Alice's sandbox on the data plane.
	resp, b = e.do("GET", "/files?path=/workspace", "", headerSandboxID, sa.SandboxID, headerSandboxPort, "49983", headerAccessToken, sb.EnvdAccessToken)
	wantError(t, resp, b, http.StatusUnauthorized, sa.SandboxID)
}

func TestListFiltersAndPages(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for i := range 3 {
		ids = append(ids, e.create(e.admin, `{"templateID":"base","metadata":{"k y":"a b&c=d%","n":"`+strconv.Itoa(i)+`"}}`).SandboxID)
	}
	e.create(e.admin, `{"templateID":"code-interpreter-v1","metadata":{"other":"1"}}`)
	// The SDK's three layers: each key and value, the form, the query.
	form := url.Values{url.QueryEscape("k y"): {strings.ReplaceAll(url.QueryEscape("a b&c=d%"), "+", "%20")}}.Encode()
	q := "/v2/sandboxes?metadata=" + url.QueryEscape(form) + "&limit=2"
	resp, b := e.api(e.admin, "GET", q, "")
	var page []detailJSON
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &page) != nil || len(page) != 2 {
		t.Fatalf("first page = %d %s", resp.StatusCode, b)
	}
	next := resp.Header.Get("X-Next-Token")
	if next == "" {
		t.Fatal("no X-Next-Token on a full page")
	}
	resp, b = e.api(e.admin, "GET", q+"&nextToken="+url.QueryEscape(next), "")
	var rest []detailJSON
	if json.Unmarshal(b, &rest) != nil || len(rest) != 1 || resp.Header.Get("X-Next-Token") != "" {
		t.Fatalf("second page = %d %s (next %q)", resp.StatusCode, b, resp.Header.Get("X-Next-Token"))
	}
	got := []string{page[0].SandboxID, page[1].SandboxID, rest[0].SandboxID}
	for i, id := range ids {
		if got[i] != id {
			t.Errorf("pages give %v, want the creation order %v", got, ids)
			break
		}
	}
	for _, c := range []struct {
		query string
		want  int
	}{
		{"state=paused", 0},
		{"state=running,paused", 4},
		{"template=code-interpreter-v1", 1},
		{"template=base", 3},
		{"metadata=" + url.QueryEscape("n=1"), 1},
		{"metadata=" + url.QueryEscape("n=9"), 0},
	} {
		resp, b := e.api(e.admin, "GET", "/v2/sandboxes?"+c.query, "")
		var l []detailJSON
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &l) != nil || len(l) != c.want {
			t.Errorf("list ?%s = %d %s, want %d sandboxes", c.query, resp.StatusCode, b, c.want)
		}
	}
	for _, bad := range []string{"state=frozen", "limit=0", "limit=x", "nextToken=zzz", "order=up"} {
		resp, b := e.api(e.admin, "GET", "/v2/sandboxes?"+bad, "")
		wantError(t, resp, b, http.StatusBadRequest, strings.SplitN(bad, "=", 2)[0])
	}
}

func TestDataPlane(t *testing.T) {
	e := newEnv(t)
	sb := e.create(e.admin, `{"templateID":"base"}`)
	route := []string{headerSandboxID, sb.SandboxID, headerSandboxPort, "49983"}
	with := func(h ...string) []string { return append(append([]string{}, route...), h...) }

	// A file through the forwarded /files, then read back.
	resp, b := e.do("POST", "/files?path=/workspace/a.txt", "hello", with(headerAccessToken, sb.EnvdAccessToken, "Content-Type", "application/octet-stream")...)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "a.txt") {
		t.Fatalf("upload = %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("GET", "/files?path=/workspace/a.txt", "", with(headerAccessToken, sb.EnvdAccessToken)...)
	if resp.StatusCode != http.StatusOK || string(b) != "hello" {
		t.Fatalf("download = %d %q", resp.StatusCode, b)
	}
	// The same by Host routing.
	req, _ := http.NewRequest("GET", e.srv.URL+"/files?path=/workspace/a.txt", nil)
	req.Host = "49983-" + sb.SandboxID + ".sbx.test"
	req.Header.Set(headerAccessToken, sb.EnvdAccessToken)
	if resp, err := e.srv.Client().Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("download by host = %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// No token, a wrong one, another sandbox's: 401 naming the sandbox.
	other := e.create(e.admin, `{"templateID":"base"}`)
	for _, tok := range []string{"", "wrong", other.EnvdAccessToken} {
		resp, b := e.do("GET", "/files?path=/workspace/a.txt", "", with(headerAccessToken, tok)...)
		wantError(t, resp, b, http.StatusUnauthorized, sb.SandboxID)
	}
	// A wrong token is refused before the sandbox is looked up: an unknown
	// id answers 401 too, not the 502 that would say it does not exist.
	unknown := string(sandbox.NewID())
	resp, b = e.do("GET", "/files?path=/x", "", headerSandboxID, unknown, headerAccessToken, "wrong")
	wantError(t, resp, b, http.StatusUnauthorized)

	// A signed download URL, as downloadUrl() makes it; expired or altered, refused.
	sign := func(path, op, exp string) string {
		msg := path + ":" + op + "::" + sb.EnvdAccessToken
		if exp != "" {
			msg += ":" + exp
		}
		sum := sha256.Sum256([]byte(msg))
		return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	}
	future := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	past := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	signed := "/files?path=/workspace/a.txt&signature=" + url.QueryEscape(sign("/workspace/a.txt", "read", future)) + "&signature_expiration=" + future
	if resp, b := e.do("GET", signed, "", route...); resp.StatusCode != http.StatusOK || string(b) != "hello" {
		t.Errorf("signed download = %d %q", resp.StatusCode, b)
	}
	// The same URL without its sandbox (a shared E2B_SANDBOX_URL) says what is missing.
	resp, b = e.do("GET", signed, "")
	wantError(t, resp, b, http.StatusBadRequest, "E2b-Sandbox-Id")
	for _, bad := range []string{
		"/files?path=/workspace/a.txt&signature=" + url.QueryEscape(sign("/workspace/a.txt", "read", past)) + "&signature_expiration=" + past,
		"/files?path=/workspace/b.txt&signature=" + url.QueryEscape(sign("/workspace/a.txt", "read", future)) + "&signature_expiration=" + future,
		"/files?path=/workspace/a.txt&signature=" + url.QueryEscape(sign("/workspace/a.txt", "write", future)) + "&signature_expiration=" + future,
	} {
		resp, b := e.do("GET", bad, "", route...)
		wantError(t, resp, b, http.StatusUnauthorized)
	}

	// Routes envd does not have are 404.
	resp, b = e.do("POST", "/sbxagent.Agent/Exec", "{}", with(headerAccessToken, sb.EnvdAccessToken, "Content-Type", "application/json")...)
	wantError(t, resp, b, http.StatusNotFound, "not a route of envd")
	resp, b = e.do("GET", "/", "", headerSandboxID, sb.SandboxID, headerSandboxPort, "8080", headerAccessToken, sb.EnvdAccessToken)
	wantError(t, resp, b, http.StatusNotFound, "preview URL")

	// Killed: every route is 502, health included.
	if resp, _ := e.api(e.admin, "DELETE", "/sandboxes/"+sb.SandboxID, ""); resp.StatusCode != http.StatusNoContent {
		t.Fatal("kill failed")
	}
	for _, path := range []string{"/health", "/files?path=/workspace/a.txt"} {
		resp, b := e.do("GET", path, "", with(headerAccessToken, sb.EnvdAccessToken)...)
		wantError(t, resp, b, http.StatusBadGateway, "not found")
	}
}

// TestDataPlaneFullDuplex: an agent that answers a stream before the
// daemon has forwarded the whole request body (as envd's Connect sends its
// start event on the request's first message) still gets the rest, and the
// SDK the whole stream: the body is not closed under the forwarding
// transport when the answer begins.
func TestDataPlaneFullDuplex(t *testing.T) {
	e := newEnv(t)
	e.d.HandleAgent("POST /process.Process/Connect", testutil.EarlyAnswer())
	sb := e.create(e.admin, `{"templateID":"base"}`)
	req, err := http.NewRequest("POST", e.srv.URL+"/process.Process/Connect", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{headerSandboxID: sb.SandboxID, headerSandboxPort: "49983",
		headerAccessToken: sb.EnvdAccessToken, "Content-Type": "application/connect+json"} {
		req.Header.Set(k, v)
	}
	testutil.CheckFullDuplex(t, e.srv.Client(), req)
}

func TestDataPlaneCapabilities(t *testing.T) {
	e := newEnv(t)
	execOnly := e.key("exec-only", []string{tools.CapExec})
	sb := e.create(execOnly, `{"templateID":"base"}`)
	hdr := []string{headerSandboxID, sb.SandboxID, headerSandboxPort, "49983", headerAccessToken, sb.EnvdAccessToken}
	resp, b := e.do("GET", "/files?path=/workspace", "", hdr...)
	wantError(t, resp, b, http.StatusForbidden, "tools.files")
	// An RPC's refusal is Connect's JSON error, whose code the SDK reads.
	resp, b = e.do("POST", "/filesystem.Filesystem/Stat", `{"path":"/workspace"}`, append(hdr, "Content-Type", "application/json")...)
	var ce struct{ Code, Message string }
	if resp.StatusCode != http.StatusForbidden || json.Unmarshal(b, &ce) != nil || ce.Code != "permission_denied" || !strings.Contains(ce.Message, "tools.files") {
		t.Errorf("Stat without tools.files = %d %s", resp.StatusCode, b)
	}
	// A stream's refusal is its end-of-stream message, with 200.
	resp, b = e.do("POST", "/filesystem.Filesystem/WatchDir", "\x00\x00\x00\x00\x02{}", append(hdr, "Content-Type", "application/connect+json")...)
	if resp.StatusCode != http.StatusOK || len(b) < 5 || b[0] != 0x02 || !strings.Contains(string(b[5:]), "permission_denied") {
		t.Errorf("WatchDir without tools.files = %d %q", resp.StatusCode, b)
	}
}

func TestParseMetadata(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want map[string]string
	}{
		{"", nil},
		{"a=b", map[string]string{"a": "b"}},
		{"k%2520y=a%2520b%2526c%253Dd%2525&n=1", map[string]string{"k y": "a b&c=d%", "n": "1"}},
	} {
		got, err := parseMetadata(tc.raw)
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("parseMetadata(%q) = %v, %v; want %v", tc.raw, got, err, tc.want)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("parseMetadata(%q)[%q] = %q, want %q", tc.raw, k, got[k], v)
			}
		}
	}
	if _, err := parseMetadata("a=%zz"); err == nil {
		t.Error("a bad escape was accepted")
	}
}

func TestMapNetwork(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		name        string
		internet    *bool
		n           *networkJSON
		tier        sandbox.Network
		allow, deny int
		err         bool
	}{
		{"nothing asked: the daemon's default", nil, nil, "", 0, 0, false},
		{"internet on", &yes, nil, sandbox.NetworkFull, 0, 0, false},
		{"internet off", &no, nil, sandbox.NetworkNone, 0, 0, false},
		{"allowOut", nil, &networkJSON{AllowOut: []string{"a.com"}, DenyOut: []string{"0.0.0.0/0"}}, sandbox.NetworkAllowlist, 1, 0, false},
		{"denyOut everything", nil, &networkJSON{DenyOut: []string{"0.0.0.0/0"}}, sandbox.NetworkNone, 0, 0, false},
		{"denyOut some", nil, &networkJSON{DenyOut: []string{"10.0.0.0/8"}}, sandbox.NetworkFull, 0, 1, false},
		{"allowOut with internet off", &no, &networkJSON{AllowOut: []string{"a.com"}}, "", 0, 0, true},
		{"maskRequestHost", nil, &networkJSON{MaskRequestHost: "x"}, "", 0, 0, true},
	} {
		tier, allow, deny, err := mapNetwork(tc.internet, tc.n)
		if (err != nil) != tc.err || tier != tc.tier || len(allow) != tc.allow || len(deny) != tc.deny {
			t.Errorf("%s: got %q %v %v %v", tc.name, tier, allow, deny, err)
		}
	}
}

func TestResumeAt(t *testing.T) {
	t0 := time.UnixMilli(1_000_000)
	asc := []sandbox.Sandbox{
		{ID: "a", CreatedAt: t0}, {ID: "b", CreatedAt: t0}, {ID: "c", CreatedAt: t0.Add(time.Millisecond)},
	}
	desc := slices.Clone(asc)
	slices.Reverse(desc)
	for _, c := range []struct {
		name string
		all  []sandbox.Sandbox
		cur  cursor
		desc bool
		want int
	}{
		{"listed cursor, tie after it", asc, cursor{created: t0, id: "a"}, false, 1},
		{"listed cursor, descending", desc, cursor{created: t0, id: "b"}, true, 2},
		{"gone cursor repeats its millisecond", asc, cursor{created: t0, id: "x"}, false, 0},
		{"gone cursor, descending", desc, cursor{created: t0, id: "x"}, true, 1},
		{"gone cursor past the end", asc, cursor{created: t0.Add(time.Hour), id: "x"}, false, 3},
	} {
		if got := resumeAt(c.all, c.cur, c.desc); got != c.want {
			t.Errorf("%s: resumeAt = %d, want %d", c.name, got, c.want)
		}
	}
}
