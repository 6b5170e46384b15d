package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// tool calls tool name on sandbox id over HTTP and decodes its result into a
// map; status is the HTTP status.
func (d *daemon) tool(id, name string, args map[string]any) (int, map[string]any, string) {
	d.t.Helper()
	st, b := d.api("POST", "/v1/sandboxes/"+id+"/tools/"+name, args)
	var out map[string]any
	json.Unmarshal(b, &out)
	return st, out, string(b)
}

// mustTool is tool that fails the test unless the call succeeds.
func (d *daemon) mustTool(id, name string, args map[string]any) map[string]any {
	d.t.Helper()
	st, out, raw := d.tool(id, name, args)
	if st != 200 {
		d.t.Fatalf("%s %v = %d %s", name, args, st, raw)
	}
	return out
}

func TestToolsSandboxExec(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"runtime": "sh", "code": "echo hello && ls -d /tmp"}, "hello\n/tmp\n"},
		{map[string]any{"runtime": "python3", "code": "import json\nprint(json.dumps({'sum': 1 + 2}))"}, "{\"sum\": 3}\n"},
		{map[string]any{"runtime": "python3", "code": "import sys\ndata = sys.stdin.read()\nprint(data.upper())", "stdin": "hello world"}, "HELLO WORLD\n"},
		{map[string]any{"runtime": "node", "code": "console.log(6*7)"}, "42\n"},
		{map[string]any{"runtime": "sh", "code": "echo $API_KEY", "secrets": map[string]any{"API_KEY": "k-123"}}, "k-123\n"},
	} {
		out := d.mustTool(id, "sandbox.exec", c.args)
		if out["stdout"] != c.want || out["exit_code"] != 0.0 {
			t.Errorf("%v = %v, want stdout %q", c.args, out, c.want)
		}
	}
	// A non-zero exit is a success with its code.
	out := d.mustTool(id, "sandbox.exec", map[string]any{"runtime": "sh", "code": "echo no >&2; exit 7"})
	if out["exit_code"] != 7.0 || out["stderr"] != "no\n" {
		t.Errorf("exit 7: %v", out)
	}
	// The seed's errors, word for word (the API adds the tool and sandbox).
	st, _, raw := d.tool(id, "sandbox.exec", map[string]any{"runtime": "sh", "code": "sleep 10", "timeout_ms": 200})
	if st != 504 || !strings.Contains(raw, `"message":"sandbox.exec `+id+`: timeout"`) {
		t.Errorf("timeout = %d %s", st, raw)
	}
	// A runtime the sandbox cannot find: node with a PATH that holds nothing.
	st, _, raw = d.tool(id, "sandbox.exec", map[string]any{"runtime": "node", "code": "1", "secrets": map[string]any{"PATH": "/nonexistent"}})
	if st != 404 || !strings.Contains(raw, "runtime not found: node") {
		t.Errorf("missing runtime = %d %s", st, raw)
	}
	// Nothing is left running after the refused and timed-out calls.
	if r := d.sh(id, "ps -eo args | grep -c '[s]leep 10' || true"); strings.TrimSpace(r.Stdout) != "0" {
		t.Errorf("a timed-out sandbox.exec left its process: %q", r.Stdout)
	}
	st, _, raw = d.tool(id, "sandbox.exec", map[string]any{"runtime": "sh", "code": "true", "secrets": map[string]any{"K": "{{secret:my-api-key}}"}})
	if st != 404 || !strings.Contains(raw, "my-api-key") {
		t.Errorf("secret handle = %d %s", st, raw)
	}

	// A key without sandbox.exec is refused in the seed's words; the same
	// call with a key that holds it runs (the control).
	keyFor := func(caps ...string) string {
		st, b := d.api("POST", "/v1/keys", map[string]any{"name": "caps-" + strings.Join(caps, "-"), "capabilities": caps})
		var k struct{ Secret string }
		if st != 201 || json.Unmarshal(b, &k) != nil {
			t.Fatalf("create key = %d %s", st, b)
		}
		return k.Secret
	}
	for _, c := range []struct {
		key    string
		status int
		want   string
	}{{keyFor("tools.files"), 403, "access denied: sandbox.exec"}, {keyFor("sandbox.exec"), 200, `"stdout":"ok\n"`}} {
		st, b := d.apiKey(c.key, "POST", "/v1/sandboxes", map[string]any{})
		var sb struct{ ID string }
		json.Unmarshal(b, &sb)
		st, b = d.apiKey(c.key, "POST", "/v1/sandboxes/"+sb.ID+"/tools/sandbox.exec", map[string]any{"runtime": "sh", "code": "echo ok"})
		if st != c.status || !strings.Contains(string(b), c.want) {
			t.Errorf("key call = %d %s, want %d with %q", st, b, c.status, c.want)
		}
		d.apiKey(c.key, "DELETE", "/v1/sandboxes/"+sb.ID, nil)
	}
}

