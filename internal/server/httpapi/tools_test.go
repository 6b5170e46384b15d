package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/backend/fake"
)

// A key holds capabilities; a tool call whose key lacks its tool's is refused
// with the seed's words, and the same call with a key that holds it runs
// (the control). Only the admin key manages keys; a revoked key is refused at
// once.
func TestToolCapabilities(t *testing.T) {
	e := newAPI(t, Options{})
	e.d.Script("echo hi", fake.Run{Output: []fake.Output{{Data: []byte("hi\n")}}})

	mk := func(token, body string) (int, openapi.KeyInfo, []byte) {
		resp, b := e.do("POST", "/v1/keys", body, "Authorization", "Bearer "+token)
		var k openapi.KeyInfo
		json.Unmarshal(b, &k)
		return resp.StatusCode, k, b
	}
	code, files, b := mk(e.token, `{"name":"files-only","capabilities":["tools.files"]}`)
	if code != http.StatusCreated || files.Secret == "" || strings.Join(files.Capabilities, ",") != "tools.files" {
		t.Fatalf("create key = %d %s", code, b)
	}
	code, execKey, b := mk(e.token, `{"name":"exec","capabilities":["sandbox.exec"]}`)
	if code != http.StatusCreated {
		t.Fatalf("create key = %d %s", code, b)
	}
	if code, _, b := mk(files.Secret, `{"name":"x"}`); code != http.StatusForbidden {
		t.Errorf("a non-admin key made a key: %d %s", code, b)
	}
	if code, _, b := mk(e.token, `{"name":"x","capabilities":["root"]}`); code != http.StatusBadRequest || !strings.Contains(string(b), "sandbox.exec") {
		t.Errorf("unknown capability = %d %s, want 400 listing the capabilities", code, b)
	}

	call := func(token, id string) (*http.Response, []byte) {
		return e.do("POST", "/v1/sandboxes/"+id+"/tools/sandbox.exec", `{"runtime":"sh","code":"echo hi"}`,
			"Authorization", "Bearer "+token)
	}
	// Each key calls on a sandbox of its own.
	own := func(token string) string {
		resp, b := e.do("POST", "/v1/sandboxes", `{}`, "Authorization", "Bearer "+token)
		var sb openapi.Sandbox
		if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &sb) != nil {
			t.Fatalf("create = %d %s", resp.StatusCode, b)
		}
		return sb.ID
	}
	denied := own(files.Secret)
	resp, b := call(files.Secret, denied)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "access denied: sandbox.exec") {
		t.Errorf("sandbox.exec without the capability = %d %s", resp.StatusCode, b)
	}
	allowed := own(execKey.Secret)
	resp, b = call(execKey.Secret, allowed)
	var out struct {
		Stdout   string `json:"stdout"`
		ExitCode int    `json:"exit_code"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil || out.Stdout != "hi\n" {
		t.Errorf("sandbox.exec with the capability = %d %s", resp.StatusCode, b)
	}

	if resp, b := e.do("DELETE", "/v1/keys/"+execKey.ID, ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("revoke = %d %s", resp.StatusCode, b)
	}
	if resp, b := call(execKey.Secret, allowed); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a revoked key called: %d %s", resp.StatusCode, b)
	}
	resp, b = e.do("GET", "/v1/keys", "")
	var list openapi.KeyList
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &list) != nil || len(list.Keys) != 3 || strings.Contains(string(b), "secret") {
		t.Errorf("list keys = %d %s", resp.StatusCode, b)
	}
}

// Bad tool calls name what was wrong: the tool, the parameter, the range.
func TestToolBadInput(t *testing.T) {
	e := newAPI(t, Options{})
	id := e.sandbox(`{}`)
	for _, c := range []struct {
		path, body string
		status     int
		want       string
	}{
		{"/tools/nope", `{}`, 404, `tool not found: \"nope\"`},
		{"/tools/sandbox.exec", `{"runtime":"sh","code":"true","colour":1}`, 400, `unknown parameter \"colour\"`},
		{"/tools/sandbox.exec", `{"code":"true"}`, 400, "runtime: is required"},
		{"/tools/sandbox.exec", `{"runtime":"perl","code":"1"}`, 400, "not one of sh, python3, node"},
		{"/tools/sandbox.exec", `{"runtime":"sh","code":"true","timeout_ms":0}`, 400, "timeout_ms: 0 is below 1"},
		{"/tools/sandbox.exec", `{"runtime":"sh","code":5}`, 400, "code: must be a string"},
		{"/tools/sandbox.exec", `{"runtime":"sh","code":"true","sandbox_id":"other"}`, 400, "is not the sandbox of the path"},
		{"/tools/sandbox.exec", `[1]`, 400, "must be a JSON object"},
	} {
		resp, b := e.do("POST", "/v1/sandboxes/"+id+c.path, c.body)
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
			t.Errorf("%s %s = %d %s, want %d with %q", c.path, c.body, resp.StatusCode, b, c.status, c.want)
		}
	}
	resp, b := e.do("GET", "/v1/tools", "")
	var list openapi.ToolList
	if resp.StatusCode != 200 || json.Unmarshal(b, &list) != nil || len(list.Tools) == 0 {
		t.Fatalf("GET /v1/tools = %d %s", resp.StatusCode, b)
	}
	for _, tl := range list.Tools {
		if tl.Description == "" || tl.Capability == "" || len(tl.InputSchema) == 0 || len(tl.OutputSchema) == 0 {
			t.Errorf("tool %s is listed without a description, capability or schema", tl.Name)
		}
	}
}

// Every route that acts inside a sandbox needs its family's capability
// (AP-04), and a key sees only its own sandboxes: another key's id is a 404
// word for word like an unknown one (AP-02). The admin key sees all.
func TestRouteCapabilitiesAndOwners(t *testing.T) {
	e := newAPI(t, Options{})
	e.d.Script("true", fake.Run{})
	key := func(name string, caps ...string) string {
		body, _ := json.Marshal(map[string]any{"name": name, "capabilities": caps})
		resp, b := e.do("POST", "/v1/keys", string(body))
		var k openapi.KeyInfo
		if resp.StatusCode != 201 || json.Unmarshal(b, &k) != nil {
			t.Fatalf("create key = %d %s", resp.StatusCode, b)
		}
		return "Bearer " + k.Secret
	}
	files, execKey, other := key("files", "tools.files"), key("exec", "sandbox.exec"), key("other")
	sbOf := func(auth string) string {
		resp, b := e.do("POST", "/v1/sandboxes", `{}`, "Authorization", auth)
		var sb openapi.Sandbox
		if resp.StatusCode != 201 || json.Unmarshal(b, &sb) != nil {
			t.Fatalf("create = %d %s", resp.StatusCode, b)
		}
		return sb.ID
	}
	fid, eid := sbOf(files), sbOf(execKey)
	for _, c := range []struct {
		auth, method, path, body string
		status                   int
		want                     string
	}{
		{files, "POST", "/v1/sandboxes/" + fid + "/exec", `{"command":"true"}`, 403, "access denied: sandbox.exec"},
		{execKey, "POST", "/v1/sandboxes/" + eid + "/exec", `{"command":"true"}`, 200, `"exit_code":0`},
		{execKey, "GET", "/v1/sandboxes/" + eid + "/files/stat?path=/", "", 403, "access denied: tools.files"},
		{files, "GET", "/v1/sandboxes/" + fid + "/files/list?path=/", "", 501, "ListDir is not implemented"}, // past the gate: the fake agent has no ListDir
		// Another key's sandbox: 404 as for an id that does not exist.
		{other, "GET", "/v1/sandboxes/" + eid, "", 404, "get " + eid + ": sandbox not found"},
		{other, "POST", "/v1/sandboxes/" + eid + "/exec", `{"command":"true"}`, 404, "exec " + eid + ": sandbox not found"},
		{other, "DELETE", "/v1/sandboxes/" + eid, "", 404, "delete " + eid + ": sandbox not found"},
		{other, "PATCH", "/v1/sandboxes/" + eid, `{"timeout":60}`, 404, "sandbox not found"},
		{other, "POST", "/v1/sandboxes/" + eid + "/tools/sandbox.exec", `{"runtime":"sh","code":"true"}`, 404, "sandbox not found"},
		{"Bearer " + e.token, "GET", "/v1/sandboxes/" + eid, "", 200, eid},
	} {
		resp, b := e.do(c.method, c.path, c.body, "Authorization", c.auth)
		if resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
			t.Errorf("%s %s = %d %s, want %d with %q", c.method, c.path, resp.StatusCode, b, c.status, c.want)
		}
	}
	// Unknown and foreign ids answer alike, but for the id itself.
	unknown := "aaaaaaaaaaaaaaaaaaaaaaaaaa"
	_, b1 := e.do("GET", "/v1/sandboxes/"+unknown, "", "Authorization", other)
	_, b2 := e.do("GET", "/v1/sandboxes/"+eid, "", "Authorization", other)
	strip := func(b []byte, id string) string {
		var eb openapi.ErrorBody
		json.Unmarshal(b, &eb)
		eb.Error.RequestID = ""
		out, _ := json.Marshal(eb)
		return strings.ReplaceAll(string(out), id, "ID")
	}
	if strip(b1, unknown) != strip(b2, eid) {
		t.Errorf("unknown %s vs foreign %s", b1, b2)
	}
	resp, b := e.do("GET", "/v1/sandboxes", "", "Authorization", other)
	if resp.StatusCode != 200 || strings.Contains(string(b), eid) || strings.Contains(string(b), fid) {
		t.Errorf("another key's list shows foreign sandboxes: %s", b)
	}
}
