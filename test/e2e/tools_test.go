package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// tool calls tool name on sandbox id over HTTP and decodes its result into a
// map; status is the HTTP status.
func (d *daemon) tool(id, name string, args map[string]any) (int, map[string]any, string) {
	d.t.Helper()
	if args == nil {
		args = map[string]any{}
	}
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
	for _, p := range checkSchema004(outputSchema004(d.t, d, name), any(out), name) {
		d.t.Errorf("%s: the answer does not match the output schema: %s\n%s", name, p, raw)
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
	if st != 400 || !strings.Contains(raw, `no secret named \"my-api-key\"`) {
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

func TestToolsSandboxBash(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)
	// An older file: written well before the command (file times are coarse).
	d.sh(id, "mkdir -p /workspace/old && echo before > /workspace/old/kept.txt && sleep 0.2")

	out := d.mustTool(id, "sandbox_bash", map[string]any{"command": "echo out; echo err >&2; mkdir -p data && seq 3 > data/n.csv && echo x > /workspace/new.txt; exit 3",
		"description": "writing two files"})
	if out["stdout"] != "out\n" || out["stderr"] != "err\n" || out["exit_code"] != 3.0 || out["truncated"] != false {
		t.Errorf("result = %v", out)
	}
	files := fmt.Sprint(out["files"])
	if out["file_count"] != 2.0 || !strings.Contains(files, "/workspace/data/n.csv") || !strings.Contains(files, "/workspace/new.txt") || strings.Contains(files, "kept.txt") {
		t.Errorf("files = %v (count %v), want the two files this command wrote and not the older one", out["files"], out["file_count"])
	}
	// The download path serves the file, checked at the far end by content.
	lp, _ := out["local_paths"].(map[string]any)
	p, _ := lp["/workspace/data/n.csv"].(string)
	req, _ := http.NewRequest("GET", d.url+p, nil)
	req.Header.Set("Authorization", "Bearer "+d.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "1\n2\n3\n" {
		t.Errorf("GET %s = %d %q", p, resp.StatusCode, b)
	}

	// cwd, and a timeout that kills and says so.
	out = d.mustTool(id, "sandbox_bash", map[string]any{"command": "pwd", "cwd": "/tmp"})
	if out["stdout"] != "/tmp\n" {
		t.Errorf("cwd: stdout = %v", out["stdout"])
	}
	out = d.mustTool(id, "sandbox_bash", map[string]any{"command": "sleep 30", "timeout_seconds": 1})
	if out["exit_code"] != 124.0 || !strings.Contains(out["stderr"].(string), "timed out") {
		t.Errorf("timeout: %v", out)
	}
	// Large output keeps head and tail, and names the file holding all of it,
	// which read_file pages through.
	out = d.mustTool(id, "sandbox_bash", map[string]any{"command": "seq 1 200000"})
	stdout := out["stdout"].(string)
	if out["truncated"] != true || !strings.HasPrefix(stdout, "1\n2\n") || !strings.HasSuffix(stdout, "199999\n200000\n") || len(stdout) > 80<<10 {
		t.Errorf("large output: truncated=%v, %d bytes", out["truncated"], len(stdout))
	}

	// Bad input: the range, the parameter, nothing run.
	for args, want := range map[string]string{
		`{"command":"true","timeout_seconds":0}`:    "timeout_seconds: 0 is outside the range 1–3600",
		`{"command":"true","timeout_seconds":3601}`: "3601 is outside the range 1–3600",
		`{"command":"true","shell":"zsh"}`:          `unknown parameter \"shell\"`,
		`{"description":"nothing"}`:                 "command: is required",
	} {
		var a map[string]any
		json.Unmarshal([]byte(args), &a)
		st, _, raw := d.tool(id, "sandbox_bash", a)
		if st != 400 || !strings.Contains(raw, want) || !strings.Contains(raw, id) {
			t.Errorf("%s = %d %s, want 400 naming %q and the sandbox", args, st, raw, want)
		}
	}
}

func TestToolsFiles(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	out := d.mustTool(id, "write_file", map[string]any{"file_path": "src/app.py", "content": "def main():\n    print('hi')\n\n\nmain()\n"})
	if out["file_path"] != "/workspace/src/app.py" {
		t.Errorf("write_file = %v", out)
	}
	if st, _, raw := d.tool(id, "write_file", map[string]any{"file_path": "/workspace/src/app.py", "content": "x"}); st != 409 || !strings.Contains(raw, "already exists") {
		t.Errorf("overwrite = %d %s", st, raw)
	}
	out = d.mustTool(id, "read_file", map[string]any{"file_path": "/workspace/src/app.py"})
	if out["content"] != "     1\tdef main():\n     2\t    print('hi')\n     3\t\n     4\t\n     5\tmain()" || out["eof"] != true {
		t.Errorf("read_file = %q", out["content"])
	}
	d.sh(id, "seq 1 5000 > /workspace/big.txt")
	out = d.mustTool(id, "read_file", map[string]any{"file_path": "big.txt", "offset": 4000, "limit": 2})
	if out["content"] != "  4001\t4001\n  4002\t4002" || out["eof"] != false {
		t.Errorf("read_file window = %v", out)
	}
	if st, _, raw := d.tool(id, "read_file", map[string]any{"file_path": "big.txt", "offset": 9000}); st != 400 || !strings.Contains(raw, "past the end") {
		t.Errorf("offset past the end = %d %s", st, raw)
	}

	// edit_file: exact, then a drifted old_string found by the fallback.
	out = d.mustTool(id, "edit_file", map[string]any{"file_path": "src/app.py", "old_string": "print('hi')", "new_string": "print('hello')"})
	if out["strategy"] != "exact" || out["replacements"] != 1.0 {
		t.Errorf("exact edit = %v", out)
	}
	out = d.mustTool(id, "edit_file", map[string]any{"file_path": "src/app.py", "old_string": "def main():\n  print('hello')", "new_string": "def main():\n  print('bye')"})
	if out["strategy"] == "exact" {
		t.Errorf("drifted edit = %v, want a fuzzy strategy", out)
	}
	if r := d.sh(id, "cat /workspace/src/app.py"); !strings.Contains(r.Stdout, "    print('bye')") {
		t.Errorf("after the fuzzy edit:\n%s", r.Stdout)
	}
	before := d.sh(id, "sha256sum /workspace/src/app.py").Stdout
	if st, _, raw := d.tool(id, "edit_file", map[string]any{"file_path": "src/app.py", "old_string": "class Nothing:", "new_string": "x"}); st != 400 || !strings.Contains(raw, "not found") {
		t.Errorf("missing old_string = %d %s", st, raw)
	}
	if after := d.sh(id, "sha256sum /workspace/src/app.py").Stdout; after != before {
		t.Error("a failed edit changed the file")
	}

	// ls, glob and grep over a small tree.
	d.sh(id, "mkdir -p /workspace/t/a /workspace/t/b && echo 'TODO one' > /workspace/t/a/x.go && echo 'todo two\nTODO three' > /workspace/t/b/y.go && echo nothing > /workspace/t/z.txt")
	out = d.mustTool(id, "ls", map[string]any{"path": "t"})
	if s := fmt.Sprint(out["entries"]); !strings.Contains(s, "/workspace/t/a") || !strings.Contains(s, "/workspace/t/z.txt") {
		t.Errorf("ls = %v", out)
	}
	out = d.mustTool(id, "glob", map[string]any{"pattern": "**/*.go", "path": "/workspace/t"})
	if fmt.Sprint(out["paths"]) != "[/workspace/t/a/x.go /workspace/t/b/y.go]" {
		t.Errorf("glob = %v", out)
	}
	out = d.mustTool(id, "grep", map[string]any{"pattern": "TODO", "path": "t"})
	if fmt.Sprint(out["files"]) != "[/workspace/t/a/x.go /workspace/t/b/y.go]" {
		t.Errorf("grep files = %v", out)
	}
	out = d.mustTool(id, "grep", map[string]any{"pattern": "TODO", "path": "t", "output_mode": "count", "glob": "b/*.go"})
	if s := fmt.Sprint(out["counts"]); s != "[map[count:1 path:/workspace/t/b/y.go]]" {
		t.Errorf("grep count = %v", s)
	}
	out = d.mustTool(id, "grep", map[string]any{"pattern": "t.do (two|three)", "regex": true, "ignore_case": true, "path": "t", "output_mode": "content"})
	if s := fmt.Sprint(out["matches"]); !strings.Contains(s, "line:1 path:/workspace/t/b/y.go text:todo two") || !strings.Contains(s, "TODO three") {
		t.Errorf("grep content = %v", s)
	}
	if st, _, raw := d.tool(id, "grep", map[string]any{"pattern": "(", "regex": true}); st != 400 || !strings.Contains(raw, "not a valid regular expression") {
		t.Errorf("bad regex = %d %s", st, raw)
	}
	if st, _, raw := d.tool(id, "read_file", map[string]any{"file_path": "/workspace/none.txt"}); st != 404 || !strings.Contains(raw, "/workspace/none.txt") {
		t.Errorf("missing file = %d %s", st, raw)
	}
}

func TestToolsSessions(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	// A quick command returns its output and exit code directly.
	out := d.mustTool(id, "exec_command", map[string]any{"command": "echo quick; exit 4"})
	if out["alive"] != false || out["exit_code"] != 4.0 || !strings.Contains(out["stdout"].(string), "quick") || out["status"] != "exited" {
		t.Errorf("quick command = %v", out)
	}
	// A REPL stays alive; input is echoed by the terminal and answered.
	out = d.mustTool(id, "exec_command", map[string]any{"command": "python3 -q", "grace_seconds": 1, "rows": 30, "cols": 100})
	sid, _ := out["session_id"].(string)
	if out["alive"] != true || sid == "" || out["exit_code"] != nil {
		t.Fatalf("python3 = %v", out)
	}
	got := ""
	cursor := out["cursor"].(float64)
	for i := 0; i < 20 && !strings.Contains(got, "42"); i++ {
		input := ""
		if i == 0 {
			input = "print(6*7)\n"
		}
		out = d.mustTool(id, "write_stdin", map[string]any{"session_id": sid, "input": input, "wait_seconds": 1})
		got += out["stdout"].(string)
		if out["cursor"].(float64) < cursor {
			t.Fatalf("cursor went back: %v after %v", out["cursor"], cursor)
		}
		cursor = out["cursor"].(float64)
	}
	if !strings.Contains(got, "print(6*7)") || !strings.Contains(got, "42") {
		t.Errorf("python3 session output = %q", got)
	}
	// since re-reads exactly from a cursor.
	again := d.mustTool(id, "write_stdin", map[string]any{"session_id": sid, "input": "", "since": 0, "wait_seconds": 0})
	if !strings.HasSuffix(again["stdout"].(string), got) && !strings.Contains(again["stdout"].(string), "42") {
		t.Errorf("since 0 = %q", again["stdout"])
	}
	list := d.mustTool(id, "list_sessions", nil)
	if !strings.Contains(fmt.Sprint(list["sessions"]), sid) {
		t.Errorf("list_sessions = %v", list)
	}
	d.mustTool(id, "write_stdin", map[string]any{"session_id": sid, "input": "exit()\n", "wait_seconds": 2})
	for i := 0; i < 20; i++ {
		out = d.mustTool(id, "write_stdin", map[string]any{"session_id": sid, "input": "", "wait_seconds": 1})
		if out["alive"] == false {
			break
		}
	}
	if out["alive"] != false || out["exit_code"] != 0.0 {
		t.Errorf("after exit(): %v", out)
	}
	if st, _, raw := d.tool(id, "write_stdin", map[string]any{"session_id": sid, "input": "more\n"}); st != 409 || !strings.Contains(raw, "has exited") {
		t.Errorf("writing to an exited session = %d %s", st, raw)
	}

	// Bad input names what was wrong.
	for _, c := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"write_stdin", map[string]any{"session_id": "nope", "input": "x"}, `no session \"nope\"`},
		{"write_stdin", map[string]any{"session_id": sid, "input": "", "since": 1 << 40}, "cursor"},
		{"exec_command", map[string]any{"command": "true", "rows": 0}, "rows: 0 is outside the range 1–1000"},
		{"exec_command", map[string]any{"command": "true", "cols": 1001}, "cols: 1001 is outside the range 1–1000"},
	} {
		if st, _, raw := d.tool(id, c.name, c.args); st < 400 || !strings.Contains(raw, c.want) {
			t.Errorf("%s %v = %d %s, want %q", c.name, c.args, st, raw, c.want)
		}
	}

	// A session survives its caller and is closable: nothing left running.
	out = d.mustTool(id, "exec_command", map[string]any{"command": "sleep 1000", "grace_seconds": 0})
	sid = out["session_id"].(string)
	out = d.mustTool(id, "close_session", map[string]any{"session_id": sid})
	if out["outcome"] != "stopped" {
		t.Errorf("close_session = %v", out)
	}
	if r := d.sh(id, "ps -eo args | grep -c '[s]leep 1000' || true"); strings.TrimSpace(r.Stdout) != "0" {
		t.Errorf("a closed session left its process: %q", r.Stdout)
	}
}
