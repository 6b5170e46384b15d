package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"sbx/api/openapi"
	"sbx/internal/backend/fake"
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
