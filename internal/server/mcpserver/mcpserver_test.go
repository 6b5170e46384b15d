package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/internal/backend/fake"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/manager/managertest"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/server/httpapi"
	"sbx.dev/sbx/internal/store"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/internal/tools"
)

// env is the MCP server over a real manager, whose store is a file in a
// temporary directory and whose one backend is the fake driver, mounted at
// /mcp by the real API server on an httptest server, as the daemon does.
type env struct {
	t     *testing.T
	m     *manager.Manager
	st    *store.Store
	d     *fake.Driver
	set   *tools.Set
	s     *Server
	srv   *httptest.Server
	token string // the admin key's secret
}

func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	me := managertest.New(t, func(_ *manager.Options, d *fake.Driver) {
		d.Script("echo hi", fake.Run{Output: []fake.Output{{Data: []byte("hi\n")}}})
	})
	m, st, d, token := me.M, me.Store, me.Driver, me.AdminToken
	set := tools.New(m, tools.Options{})
	if opts.Log == nil {
		opts.Log = testutil.Logger(t)
	}
	s := New(set, m, opts)
	t.Cleanup(func() { s.Close(context.Background()) }) // before the manager closes
	srv := httptest.NewServer(httpapi.New(m, httpapi.Options{Log: testutil.Logger(t), Tools: set, MCP: s.Handler()}))
	t.Cleanup(srv.Close)
	return &env{t: t, m: m, st: st, d: d, set: set, s: s, srv: srv, token: token}
}

// newKey creates an API key holding caps (nil: every capability) and
// returns its secret and identity.
func (e *env) newKey(name string, caps []string) (string, manager.Key) {
	e.t.Helper()
	token, _, err := e.st.CreateKeyWith(e.t.Context(), name, caps)
	if err != nil {
		e.t.Fatal(err)
	}
	k, err := e.m.Authenticate(e.t.Context(), token)
	if err != nil {
		e.t.Fatal(err)
	}
	return token, k
}

// bearer adds an API key to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// connect opens an MCP session with token over streamable HTTP.
func (e *env) connect(token string) *mcp.ClientSession {
	e.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: e.srv.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token, e.srv.Client().Transport}}, MaxRetries: -1}
	cs, err := c.Connect(e.t.Context(), tr, nil)
	if err != nil {
		e.t.Fatalf("connecting: %v", err)
	}
	e.t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls tool with args and fails the test on a protocol error.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", tool, err)
	}
	return res
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func sandboxOf(t *testing.T, r *mcp.CallToolResult) sandbox.ID {
	t.Helper()
	id, _ := r.Meta[MetaSandboxID].(string)
	if id == "" {
		t.Fatalf("result has no %s in _meta: %+v", MetaSandboxID, r.Meta)
	}
	return sandbox.ID(id)
}

// wantError checks that r is an isError result whose text holds each of want.
func wantError(t *testing.T, r *mcp.CallToolResult, want ...string) {
	t.Helper()
	if !r.IsError {
		t.Fatalf("want an isError result, got %q %+v", text(r), r.StructuredContent)
	}
	for _, w := range want {
		if !strings.Contains(text(r), w) {
			t.Errorf("error text %q does not contain %q", text(r), w)
		}
	}
}

// sessionSandboxes lists the sandboxes of the session sandbox label.
func (e *env) sessionSandboxes() []sandbox.Sandbox {
	e.t.Helper()
	all, err := e.m.List(e.t.Context(), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []sandbox.Sandbox
	for _, sb := range all {
		if _, ok := sb.Spec.Labels[SessionLabel]; ok {
			out = append(out, sb)
		}
	}
	return out
}

// waitNoSessionSandbox waits until no session sandbox is left.
func (e *env) waitNoSessionSandbox() {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(e.sessionSandboxes()) > 0 {
		if time.Now().After(deadline) {
			e.t.Fatalf("session sandboxes still there: %+v", e.sessionSandboxes())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var echo = map[string]any{"runtime": "sh", "code": "echo hi"}

func TestToolsListedWithSchemas(t *testing.T) {
	e := newEnv(t, Options{})
	cs := e.connect(e.token)
	if got := cs.InitializeResult().Instructions; !strings.Contains(got, "sandbox_id") {
		t.Errorf("instructions do not mention sandbox_id: %q", got)
	}
	listed := map[string]*mcp.Tool{}
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		listed[tool.Name] = tool
	}
	if len(listed) != len(e.set.List()) || len(listed) == 0 {
		t.Errorf("listed %d tools, the set has %d", len(listed), len(e.set.List()))
	}
	for _, want := range e.set.List() {
		got := listed[want.Name]
		if got == nil {
			t.Errorf("tool %s is not listed", want.Name)
			continue
		}
		if got.Title != want.Title || got.Description != want.Description {
			t.Errorf("%s: title %q description %q, want %q %q", want.Name, got.Title, got.Description, want.Title, want.Description)
		}
		if got.Annotations == nil || got.Annotations.ReadOnlyHint != want.ReadOnly ||
			got.Annotations.DestructiveHint == nil || *got.Annotations.DestructiveHint != want.Destructive {
			t.Errorf("%s: annotations %+v, want readOnly %v destructive %v", want.Name, got.Annotations, want.ReadOnly, want.Destructive)
		}
		sameJSON(t, want.Name+" input schema", got.InputSchema, want.InputSchema(sandboxIDAbout))
		sameJSON(t, want.Name+" output schema", got.OutputSchema, want.Output)
		in, _ := got.InputSchema.(map[string]any)
		props, _ := in["properties"].(map[string]any)
		if _, ok := props["sandbox_id"]; !ok {
			t.Errorf("%s: input schema has no sandbox_id: %v", want.Name, in)
		}
	}
}

func sameJSON(t *testing.T, what string, got any, want json.RawMessage) {
	t.Helper()
	var w any
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(w)
	if string(gb) != string(wb) {
		t.Errorf("%s:\n got %s\nwant %s", what, gb, wb)
	}
}

func TestSessionSandboxCreatedReusedDeleted(t *testing.T) {
	e := newEnv(t, Options{})
	cs := e.connect(e.token)
	r1 := call(t, cs, "sandbox.exec", echo)
	if r1.IsError {
		t.Fatalf("first call failed: %s", text(r1))
	}
	if got := text(r1); got != "hi\n" {
		t.Errorf("text = %q, want the command's output", got)
	}
	var out struct {
		Stdout   string `json:"stdout"`
		ExitCode int    `json:"exit_code"`
	}
	b, _ := json.Marshal(r1.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil || out.Stdout != "hi\n" || out.ExitCode != 0 {
		t.Errorf("structuredContent = %s (%v)", b, err)
	}
	r2 := call(t, cs, "sandbox.exec", echo)
	if id1, id2 := sandboxOf(t, r1), sandboxOf(t, r2); id1 != id2 {
		t.Errorf("the second call ran in %s, the first in %s: want the session's one sandbox", id2, id1)
	}
	sbs := e.sessionSandboxes()
	if len(sbs) != 1 || sbs[0].ID != sandboxOf(t, r1) || sbs[0].Spec.Labels[SessionLabel] != cs.ID() {
		t.Fatalf("session sandboxes = %+v, want one, %s, labelled %s=%s", sbs, sandboxOf(t, r1), SessionLabel, cs.ID())
	}
	// Another session has its own.
	other := call(t, e.connect(e.token), "sandbox.exec", echo)
	if sandboxOf(t, other) == sandboxOf(t, r1) {
		t.Errorf("two sessions share sandbox %s", sandboxOf(t, r1))
	}
	cs.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := e.m.Get(t.Context(), sandboxOf(t, r1))
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is still there after its session closed", sandboxOf(t, r1))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := e.m.Get(t.Context(), sandboxOf(t, other)); err != nil {
		t.Errorf("the other session's sandbox went with the first session: %v", err)
	}
}

func TestConcurrentFirstCallsMakeOneSandbox(t *testing.T) {
	e := newEnv(t, Options{})
	e.d.SetStartDelay(100 * time.Millisecond) // every call arrives during the create
	cs := e.connect(e.token)
	var wg sync.WaitGroup
	ids := make([]sandbox.ID, 6)
	for i := range ids {
		wg.Go(func() {
			r := call(t, cs, "sandbox.exec", echo)
			if r.IsError {
				t.Errorf("call %d: %s", i, text(r))
				return
			}
			ids[i] = sandboxOf(t, r)
		})
	}
	wg.Wait()
	for _, id := range ids {
		if id != ids[0] {
			t.Errorf("calls ran in %v: want one sandbox", ids)
			break
		}
	}
	if n := len(e.sessionSandboxes()); n != 1 {
		t.Errorf("%d session sandboxes, want 1", n)
	}
}

func TestExpiredSessionSandboxIsReplaced(t *testing.T) {
	e := newEnv(t, Options{})
	cs := e.connect(e.token)
	first := sandboxOf(t, call(t, cs, "sandbox.exec", echo))
	if err := e.m.Delete(t.Context(), first); err != nil { // as its TTL would
		t.Fatal(err)
	}
	r := call(t, cs, "sandbox.exec", echo)
	if r.IsError {
		t.Fatalf("call after the sandbox went: %s", text(r))
	}
	second := sandboxOf(t, r)
	if second == first {
		t.Fatalf("the call ran in the deleted sandbox %s", first)
	}
	if !strings.Contains(text(r), string(first)+" is gone") || !strings.Contains(text(r), "new, empty sandbox "+string(second)) ||
		!strings.HasSuffix(text(r), "hi\n") {
		t.Errorf("text = %q: want a note naming both sandboxes, then the output", text(r))
	}
	if r := call(t, cs, "sandbox.exec", echo); strings.Contains(text(r), "gone") || sandboxOf(t, r) != second {
		t.Errorf("the next call: %q in %s, want no note, in %s", text(r), sandboxOf(t, r), second)
	}
}

func TestCreateFailureIsAToolError(t *testing.T) {
	e := newEnv(t, Options{})
	e.d.FailNextStart(fmt.Errorf("%w: no room", sandbox.ErrUnavailable))
	cs := e.connect(e.token)
	r := call(t, cs, "sandbox.exec", echo)
	wantError(t, r, "sandbox.exec: creating this session's sandbox", "no room")
	if r := call(t, cs, "sandbox.exec", echo); r.IsError {
		t.Errorf("the call after a failed create: %s", text(r))
	}
}

func TestExplicitSandboxID(t *testing.T) {
	e := newEnv(t, Options{})
	token, alice := e.newKey("alice", nil) // not the admin key, which sees every sandbox
	cs := e.connect(token)
	mine, err := e.m.Create(manager.WithKey(t.Context(), alice), sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	r := call(t, cs, "sandbox.exec", map[string]any{"runtime": "sh", "code": "echo hi", "sandbox_id": string(mine.ID)})
	if r.IsError || sandboxOf(t, r) != mine.ID {
		t.Fatalf("call on %s: %s in %v", mine.ID, text(r), r.Meta)
	}
	if n := len(e.sessionSandboxes()); n != 0 {
		t.Errorf("a call naming its sandbox made %d session sandboxes", n)
	}

	_, bob := e.newKey("bob", nil)
	theirs, err := e.m.Create(manager.WithKey(t.Context(), bob), sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	r = call(t, cs, "sandbox.exec", map[string]any{"runtime": "sh", "code": "echo hi", "sandbox_id": string(theirs.ID)})
	wantError(t, r, "sandbox.exec "+string(theirs.ID)+": sandbox not found")
	missing := sandbox.NewID()
	r2 := call(t, cs, "sandbox.exec", map[string]any{"runtime": "sh", "code": "echo hi", "sandbox_id": string(missing)})
	wantError(t, r2, "sandbox.exec "+string(missing)+": sandbox not found")
	if strings.Replace(text(r), string(theirs.ID), "", 1) != strings.Replace(text(r2), string(missing), "", 1) {
		t.Errorf("another key's sandbox (%q) reads unlike a missing one (%q)", text(r), text(r2))
	}
	r = call(t, cs, "sandbox.exec", map[string]any{"runtime": "sh", "code": "echo hi", "sandbox_id": 7})
	wantError(t, r, "sandbox_id", "not a string")
}

func TestArgumentErrorsAreToolErrors(t *testing.T) {
	e := newEnv(t, Options{})
	cs := e.connect(e.token)
	r := call(t, cs, "sandbox.exec", map[string]any{"runtime": "sh", "code": "echo hi", "bogus": 1})
	wantError(t, r, `unknown parameter "bogus"`, "sandbox.exec")
	r = call(t, cs, "sandbox.exec", map[string]any{"runtime": "sh", "code": "echo hi", "timeout_ms": 0})
	wantError(t, r, "timeout_ms", "below 1")
	r = call(t, cs, "sandbox.exec", map[string]any{"code": "echo hi"})
	wantError(t, r, "runtime", "is required")
}

func TestUnknownToolIsAToolError(t *testing.T) {
	e := newEnv(t, Options{})
	cs := e.connect(e.token)
	r := call(t, cs, "no_such_tool", map[string]any{})
	wantError(t, r, `"no_such_tool"`, "sandbox.exec")
	if n := len(e.sessionSandboxes()); n != 0 {
		t.Errorf("a call of an unknown tool made %d session sandboxes", n)
	}
}

func TestCapabilityDenied(t *testing.T) {
	e := newEnv(t, Options{})
	token, _ := e.newKey("files-only", []string{tools.CapFiles})
	cs := e.connect(token)
	r := call(t, cs, "sandbox.exec", echo)
	wantError(t, r)
	if got := text(r); got != "access denied: sandbox.exec" {
		t.Errorf("text = %q, want exactly %q", got, "access denied: sandbox.exec")
	}
	if n := len(e.sessionSandboxes()); n != 0 {
		t.Errorf("a denied call made %d session sandboxes", n)
	}
}

func TestSessionBoundToItsKey(t *testing.T) {
	e := newEnv(t, Options{})
	cs := e.connect(e.token)
	id := sandboxOf(t, call(t, cs, "sandbox.exec", echo))
	other, _ := e.newKey("mallory", nil)
	body := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"sandbox.exec","arguments":{"runtime":"sh","code":"echo hi"}}}`
	for _, method := range []string{"POST", "GET", "DELETE"} {
		req, _ := http.NewRequest(method, e.srv.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+other)
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("%s with the session's id and another key: %d %s", method, resp.StatusCode, strings.TrimSpace(string(b)))
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s with the session's id and another key = %d, want 403", method, resp.StatusCode)
		}
	}
	// Without a key, the API refuses before the MCP server sees it.
	req, _ := http.NewRequest("DELETE", e.srv.URL+"/mcp", nil)
	req.Header.Set("Mcp-Session-Id", cs.ID())
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("DELETE without a key = %d, want 401", resp.StatusCode)
	}
	// The session and its sandbox are untouched.
	if r := call(t, cs, "sandbox.exec", echo); r.IsError || sandboxOf(t, r) != id {
		t.Errorf("the session after the attempts: %s in %v, want its sandbox %s", text(r), r.Meta, id)
	}
}

func TestIdleSessionEnds(t *testing.T) {
	e := newEnv(t, Options{SessionTimeout: 300 * time.Millisecond})
	cs := e.connect(e.token)
	id := sandboxOf(t, call(t, cs, "sandbox.exec", echo))
	e.waitNoSessionSandbox()
	if _, err := e.m.Get(t.Context(), id); err == nil {
		t.Errorf("sandbox %s outlived its idle session", id)
	}
}

func TestCloseDeletesSessionSandboxes(t *testing.T) {
	e := newEnv(t, Options{})
	for range 3 {
		call(t, e.connect(e.token), "sandbox.exec", echo)
	}
	if n := len(e.sessionSandboxes()); n != 3 {
		t.Fatalf("%d session sandboxes, want 3", n)
	}
	if err := e.s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(e.sessionSandboxes()); n != 0 {
		t.Errorf("%d session sandboxes after Close, want 0", n)
	}
	cs := e.connect(e.token) // a session opened while the daemon stops
	r := call(t, cs, "sandbox.exec", echo)
	wantError(t, r, "shutting down")
}
