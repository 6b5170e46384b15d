package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// Seed 004's agent tools and bsl_check, called over HTTP
// (POST /v1/sandboxes/{id}/tools/{name}) against a real daemon and native
// sandboxes; each effect is checked at the far end: through the files API,
// the exec API, or git in the sandbox.

// call004 calls tool name on sandbox id with args; a 200 answer must match
// the tool's output schema (as GET /v1/tools gives it) and is decoded into
// out (when not nil). It returns the status and the body.
func call004(t *testing.T, d *daemon, id, name string, args, out any) (int, []byte) {
	t.Helper()
	st, b := d.api("POST", "/v1/sandboxes/"+id+"/tools/"+name, args)
	if st != 200 {
		return st, b
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: the answer is not JSON: %s", name, b)
	}
	for _, p := range checkSchema004(outputSchema004(t, d, name), v, name) {
		t.Errorf("%s: the answer does not match the output schema: %s\n%s", name, p, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decoding %s: %v", name, b, err)
		}
	}
	return st, b
}

// outputSchema004 returns tool name's output schema from GET /v1/tools.
func outputSchema004(t *testing.T, d *daemon, name string) map[string]any {
	t.Helper()
	st, b := d.api("GET", "/v1/tools", nil)
	var list struct {
		Tools []struct {
			Name         string         `json:"name"`
			OutputSchema map[string]any `json:"output_schema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(b, &list); st != 200 || err != nil {
		t.Fatalf("GET /v1/tools = %d %s", st, b)
	}
	for _, tool := range list.Tools {
		if tool.Name == name {
			if tool.OutputSchema == nil {
				t.Fatalf("GET /v1/tools: %s has no output_schema", name)
			}
			return tool.OutputSchema
		}
	}
	t.Fatalf("GET /v1/tools does not list %s", name)
	return nil
}

// checkSchema004 checks v against the parts of a JSON Schema the tools'
// output schemas use (type, properties, required, items, enum) and reports
// each mismatch with its place; a property the schema does not declare is
// one too.
func checkSchema004(schema map[string]any, v any, at string) []string {
	var out []string
	if types := schemaTypes004(schema["type"]); len(types) > 0 {
		kind := jsonKind004(v)
		if !slices.Contains(types, kind) && !(kind == "integer" && slices.Contains(types, "number")) {
			return []string{fmt.Sprintf("%s is %s, not %v", at, kind, types)}
		}
	}
	if enum, ok := schema["enum"].([]any); ok && !slices.Contains(enum, v) {
		out = append(out, fmt.Sprintf("%s is %v, not one of %v", at, v, enum))
	}
	switch v := v.(type) {
	case map[string]any:
		props, _ := schema["properties"].(map[string]any)
		for _, r := range schemaTypes004(schema["required"]) {
			if _, ok := v[r]; !ok {
				out = append(out, fmt.Sprintf("%s has no %q", at, r))
			}
		}
		for k, x := range v {
			switch sub, ok := props[k].(map[string]any); {
			case ok:
				out = append(out, checkSchema004(sub, x, at+"."+k)...)
			case schema["additionalProperties"] != nil:
				if sub, ok := schema["additionalProperties"].(map[string]any); ok {
					out = append(out, checkSchema004(sub, x, at+"."+k)...)
				}
			default:
				out = append(out, fmt.Sprintf("%s.%s is not in the schema", at, k))
			}
		}
	case []any:
		if items, ok := schema["items"].(map[string]any); ok {
			for i, x := range v {
				out = append(out, checkSchema004(items, x, fmt.Sprintf("%s[%d]", at, i))...)
			}
		}
	}
	return out
}

func schemaTypes004(t any) []string {
	switch t := t.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			out = append(out, fmt.Sprint(x))
		}
		return out
	}
	return nil
}

func jsonKind004(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		if v == float64(int64(v)) {
			return "integer"
		}
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	}
	return "object"
}

// ok004 is call004 that must succeed.
func ok004(t *testing.T, d *daemon, id, name string, args, out any) {
	t.Helper()
	if st, b := call004(t, d, id, name, args, out); st != 200 {
		t.Fatalf("%s %v = %d %s", name, args, st, b)
	}
}

// fail004 is call004 that must fail with status, its message naming each
// of mention; it returns the message.
func fail004(t *testing.T, d *daemon, id, name string, args any, status int, mention ...string) string {
	t.Helper()
	st, b := call004(t, d, id, name, args, nil)
	if st != status {
		t.Fatalf("%s %v = %d %s, want %d", name, args, st, b, status)
	}
	e := decodeError(t, b)
	for _, m := range mention {
		if !strings.Contains(e.Error.Message, m) {
			t.Errorf("%s: message %q does not name %q", name, e.Error.Message, m)
		}
	}
	return e.Error.Message
}

// readBack004 reads a file through the files API.
func readBack004(t *testing.T, d *daemon, id, path string) (string, int) {
	t.Helper()
	st, b := d.api("GET", "/v1/sandboxes/"+id+"/files/read?path="+path, nil)
	var r struct {
		Content string `json:"content"`
	}
	json.Unmarshal(b, &r)
	return r.Content, st
}

// sh004 runs a shell command through the exec API and fails the test
// unless it exits 0.
func sh004(t *testing.T, d *daemon, id, command string) string {
	t.Helper()
	r := d.exec(id, map[string]any{"command": command, "timeout": 120})
	if r.ExitCode != 0 {
		t.Fatalf("%s: exit %d\n%s\n%s", command, r.ExitCode, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

type cmdOut004 struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
	TimedOut bool   `json:"timed_out"`
}

func TestTools004Files(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	// file_write as the seed shows it, read back through the files API.
	var w struct {
		File         string `json:"file"`
		BytesWritten int    `json:"bytes_written"`
		Size         int    `json:"size"`
	}
	ok004(t, d, id, "file_write", map[string]any{"file": "app.py", "content": "print('hello from app')\n"}, &w)
	if w.File != "/workspace/app.py" || w.BytesWritten != 24 || w.Size != 24 {
		t.Errorf("file_write = %+v", w)
	}
	if got, st := readBack004(t, d, id, "/workspace/app.py"); st != 200 || got != "print('hello from app')\n" {
		t.Errorf("read back = %d %q", st, got)
	}
	ok004(t, d, id, "file_write", map[string]any{"file": "app.py", "content": "print('more')\n", "append": true}, &w)
	if got, _ := readBack004(t, d, id, "/workspace/app.py"); got != "print('hello from app')\nprint('more')\n" || w.Size != 38 {
		t.Errorf("after append: %q, %+v", got, w)
	}
	// Parents are made.
	ok004(t, d, id, "file_write", map[string]any{"file": "/workspace/src/pkg/mod.py", "content": "def alpha():\n    pass\n\ndef beta(x):\n    return x\n"}, nil)

	// file_read: whole, a range, past the end.
	type readOut struct {
		File       string `json:"file"`
		Content    string `json:"content"`
		StartLine  int    `json:"start_line"`
		EndLine    int    `json:"end_line"`
		TotalLines *int   `json:"total_lines"`
		Size       int    `json:"size"`
		Truncated  bool   `json:"truncated"`
	}
	var r readOut
	ok004(t, d, id, "file_read", map[string]any{"file": "src/pkg/mod.py"}, &r)
	if r.Content != "def alpha():\n    pass\n\ndef beta(x):\n    return x\n" || r.TotalLines == nil || *r.TotalLines != 5 || r.EndLine != 5 || r.File != "/workspace/src/pkg/mod.py" {
		t.Errorf("file_read whole = %+v", r)
	}
	r = readOut{}
	ok004(t, d, id, "file_read", map[string]any{"file": "src/pkg/mod.py", "start_line": 4, "end_line": 5}, &r)
	if r.Content != "def beta(x):\n    return x\n" || r.StartLine != 4 || r.EndLine != 5 {
		t.Errorf("file_read 4–5 = %+v", r)
	}
	r = readOut{}
	ok004(t, d, id, "file_read", map[string]any{"file": "src/pkg/mod.py", "start_line": 50}, &r)
	if r.Content != "" || r.TotalLines == nil || *r.TotalLines != 5 {
		t.Errorf("file_read past the end = %+v", r)
	}
	fail004(t, d, id, "file_read", map[string]any{"file": "nope/missing.txt"}, 404, "/workspace/nope/missing.txt", "does not exist")
	fail004(t, d, id, "file_read", map[string]any{"file": "app.py", "start_line": 3, "end_line": 2}, 400, "end_line")
	sh004(t, d, id, "head -c 100 /dev/zero > /workspace/zeros.bin")
	fail004(t, d, id, "file_read", map[string]any{"file": "zeros.bin"}, 400, "binary")

	// file_list: one level, then recursive.
	type listOut struct {
		Path    string `json:"path"`
		Entries []struct {
			Name  string `json:"name"`
			Path  string `json:"path"`
			IsDir bool   `json:"is_dir"`
			Size  int    `json:"size"`
		} `json:"entries"`
		Total int `json:"total"`
	}
	var l listOut
	ok004(t, d, id, "file_list", map[string]any{"path": "."}, &l)
	got := map[string]string{}
	for _, e := range l.Entries {
		got[e.Path] = fmt.Sprintf("dir=%t size=%d", e.IsDir, e.Size)
	}
	if got["/workspace/app.py"] != "dir=false size=38" || !strings.HasPrefix(got["/workspace/src"], "dir=true") || got["/workspace/src/pkg/mod.py"] != "" || l.Path != "/workspace" {
		t.Errorf("file_list . = %+v", l)
	}
	l = listOut{}
	ok004(t, d, id, "file_list", map[string]any{"path": "/workspace", "recursive": true}, &l)
	found := false
	for _, e := range l.Entries {
		found = found || (e.Path == "/workspace/src/pkg/mod.py" && e.Name == "mod.py" && !e.IsDir && e.Size == 49)
	}
	if !found {
		t.Errorf("file_list recursive has no /workspace/src/pkg/mod.py of 49 bytes: %+v", l)
	}
	fail004(t, d, id, "file_list", map[string]any{"path": "/no/such/dir"}, 404, "/no/such/dir")

	// file_search: a directory, recursively; a file; a regex that does not compile.
	var s struct {
		Matches []struct {
			File string `json:"file"`
			Line int    `json:"line"`
			Text string `json:"text"`
		} `json:"matches"`
		Truncated bool `json:"truncated"`
	}
	ok004(t, d, id, "file_search", map[string]any{"file": ".", "regex": `^def \w+\(`}, &s)
	if len(s.Matches) != 2 || s.Matches[0].File != "/workspace/src/pkg/mod.py" || s.Matches[0].Line != 1 || s.Matches[1].Line != 4 || s.Matches[1].Text != "def beta(x):" {
		t.Errorf("file_search dir = %+v", s)
	}
	s.Matches = nil
	ok004(t, d, id, "file_search", map[string]any{"file": "app.py", "regex": "(?i)MORE"}, &s)
	if len(s.Matches) != 1 || s.Matches[0].Line != 2 {
		t.Errorf("file_search file = %+v", s)
	}
	fail004(t, d, id, "file_search", map[string]any{"file": ".", "regex": "def (unclosed"}, 400, "regex", "missing closing )")
	fail004(t, d, id, "file_search", map[string]any{"file": "gone", "regex": "x"}, 404, "/workspace/gone")

	// file_delete: a file; a non-empty directory only with recursive.
	var del struct {
		File    string `json:"file"`
		Deleted bool   `json:"deleted"`
		Type    string `json:"type"`
	}
	ok004(t, d, id, "file_delete", map[string]any{"file": "app.py"}, &del)
	if !del.Deleted || del.Type != "file" || del.File != "/workspace/app.py" {
		t.Errorf("file_delete = %+v", del)
	}
	if st, b := d.api("GET", "/v1/sandboxes/"+id+"/files/stat?path=/workspace/app.py", nil); st != 404 {
		t.Errorf("after file_delete, stat = %d %s", st, b)
	}
	fail004(t, d, id, "file_delete", map[string]any{"file": "app.py"}, 404, "/workspace/app.py")
	fail004(t, d, id, "file_delete", map[string]any{"file": "src"}, 409, "recursive")
	ok004(t, d, id, "file_delete", map[string]any{"file": "src", "recursive": true}, &del)
	if st, _ := d.api("GET", "/v1/sandboxes/"+id+"/files/stat?path=/workspace/src/pkg/mod.py", nil); st != 404 || del.Type != "dir" {
		t.Errorf("after a recursive file_delete: stat %d, %+v", st, del)
	}

	// Strict arguments.
	fail004(t, d, id, "file_write", map[string]any{"file": "a", "content": "x", "mode": "0644"}, 400, `unknown parameter "mode"`, "append, content, file")
	fail004(t, d, id, "file_write", map[string]any{"content": "x"}, 400, "file", "required")
	fail004(t, d, id, "file_write", map[string]any{"file": "", "content": "x"}, 400, "file", "empty")
	fail004(t, d, id, "file_read", map[string]any{"file": 7}, 400, "file", "string")
}

func TestTools004ShellEnvProcess(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	// shell_exec as the seed shows it.
	ok004(t, d, id, "file_write", map[string]any{"file": "app.py", "content": "import sys\nprint('out'); print('err', file=sys.stderr); sys.exit(3)\n"}, nil)
	var o cmdOut004
	ok004(t, d, id, "shell_exec", map[string]any{"command": "python app.py || python3 app.py"}, &o)
	if !strings.Contains(o.Stdout, "out\n") || !strings.Contains(o.Stderr, "err\n") || o.ExitCode != 3 || o.TimedOut {
		t.Errorf("shell_exec python app.py = %+v", o)
	}
	// bash, in exec_dir.
	sh004(t, d, id, "mkdir -p /workspace/sub")
	ok004(t, d, id, "shell_exec", map[string]any{"command": `pwd; [[ -n "$BASH_VERSION" ]] && echo bash`, "exec_dir": "sub"}, &o)
	if o.Stdout != "/workspace/sub\nbash\n" || o.ExitCode != 0 {
		t.Errorf("shell_exec in sub = %+v", o)
	}
	ok004(t, d, id, "shell_exec", map[string]any{"command": "echo start; sleep 30", "timeout": 1}, &o)
	if !o.TimedOut || o.ExitCode != 124 || o.Stdout != "start\n" {
		t.Errorf("shell_exec past its timeout = %+v", o)
	}
	fail004(t, d, id, "shell_exec", map[string]any{"command": "true", "timeout": 0}, 400, "timeout", "1–3600")
	fail004(t, d, id, "shell_exec", map[string]any{"command": "true", "exec_dir": "/nowhere"}, 404, "/nowhere")
	fail004(t, d, id, "shell_exec", map[string]any{"command": "true", "cwd": "/"}, 400, `unknown parameter "cwd"`)

	// python_exec: output, and an exception as a result.
	ok004(t, d, id, "python_exec", map[string]any{"code": "import os\nprint(sum(range(10)), os.getcwd())"}, &o)
	if o.Stdout != "45 /workspace\n" || o.ExitCode != 0 {
		t.Errorf("python_exec = %+v", o)
	}
	ok004(t, d, id, "python_exec", map[string]any{"code": "raise ValueError('boom')"}, &o)
	if o.ExitCode != 1 || !strings.Contains(o.Stderr, "ValueError: boom") {
		t.Errorf("python_exec raising = %+v", o)
	}

	// env_set persists for later calls: shell_exec and python_exec see it,
	// env_get returns it, a login shell sees it; unsetting removes it.
	tricky := `it's "quoted" $HOME`
	var set struct {
		Name  string  `json:"name"`
		Value *string `json:"value"`
		Set   bool    `json:"set"`
		Count int     `json:"count"`
	}
	ok004(t, d, id, "env_set", map[string]any{"name": "SBX_GREETING", "value": "hello004"}, &set)
	ok004(t, d, id, "env_set", map[string]any{"name": "TRICKY", "value": tricky}, &set)
	if !set.Set || set.Count != 2 || set.Value == nil || *set.Value != tricky {
		t.Errorf("env_set = %+v", set)
	}
	ok004(t, d, id, "shell_exec", map[string]any{"command": `printf '%s|%s' "$SBX_GREETING" "$TRICKY"`}, &o)
	if o.Stdout != "hello004|"+tricky {
		t.Errorf("shell_exec after env_set: %q", o.Stdout)
	}
	ok004(t, d, id, "python_exec", map[string]any{"code": "import os; print(os.environ['SBX_GREETING'])"}, &o)
	if o.Stdout != "hello004\n" {
		t.Errorf("python_exec after env_set: %+v", o)
	}
	if out := sh004(t, d, id, `bash -lc 'printf "%s|%s" "$SBX_GREETING" "$TRICKY"'`); out != "hello004|"+tricky {
		t.Errorf("a login shell after env_set: %q", out)
	}
	var get struct {
		Name      string            `json:"name"`
		Value     *string           `json:"value"`
		Set       *bool             `json:"set"`
		Variables map[string]string `json:"variables"`
	}
	ok004(t, d, id, "env_get", map[string]any{"name": "SBX_GREETING"}, &get)
	if get.Value == nil || *get.Value != "hello004" || get.Set == nil || !*get.Set {
		t.Errorf("env_get SBX_GREETING = %+v", get)
	}
	get.Value, get.Set = nil, nil
	ok004(t, d, id, "env_get", map[string]any{}, &get)
	if len(get.Variables) != 2 || get.Variables["TRICKY"] != tricky {
		t.Errorf("env_get all = %+v", get)
	}
	ok004(t, d, id, "env_set", map[string]any{"name": "SBX_GREETING", "value": nil}, &set)
	if set.Set || set.Count != 1 {
		t.Errorf("env_set null = %+v", set)
	}
	get = struct {
		Name      string            `json:"name"`
		Value     *string           `json:"value"`
		Set       *bool             `json:"set"`
		Variables map[string]string `json:"variables"`
	}{}
	ok004(t, d, id, "env_get", map[string]any{"name": "SBX_GREETING"}, &get)
	if get.Value != nil || get.Set == nil || *get.Set {
		t.Errorf("env_get after unset = %+v", get)
	}
	ok004(t, d, id, "shell_exec", map[string]any{"command": `echo "[${SBX_GREETING-unset}]"`}, &o)
	if o.Stdout != "[unset]\n" {
		t.Errorf("shell_exec after unset: %q", o.Stdout)
	}
	fail004(t, d, id, "env_set", map[string]any{"name": "1BAD", "value": "x"}, 400, "name", "1BAD")
	fail004(t, d, id, "env_set", map[string]any{"value": "x"}, 400, "name", "required")

	// process_list shows a background sleep with its parent and user.
	bg := d.exec(id, map[string]any{"command": "exec sleep 4004", "background": true})
	var ps struct {
		Processes []struct {
			PID            int    `json:"pid"`
			PPID           int    `json:"ppid"`
			User           string `json:"user"`
			State          string `json:"state"`
			Elapsed        string `json:"elapsed"`
			ElapsedSeconds int    `json:"elapsed_seconds"`
			Command        string `json:"command"`
		} `json:"processes"`
	}
	ok004(t, d, id, "process_list", map[string]any{}, &ps)
	var sleeper, psSelf bool
	for _, p := range ps.Processes {
		if p.Command == "sleep 4004" && p.PID == bg.PID && p.User == "root" && strings.HasPrefix(p.State, "S") && regexp.MustCompile(`^\d\d:\d\d$`).MatchString(p.Elapsed) {
			sleeper = true
		}
		psSelf = psSelf || strings.HasPrefix(p.Command, "ps ")
	}
	if !sleeper || psSelf {
		t.Errorf("process_list (sleep 4004 is pid %d; found %t; ps itself listed %t): %+v", bg.PID, sleeper, psSelf, ps)
	}
	fail004(t, d, id, "process_list", map[string]any{"all": true}, 400, `unknown parameter "all"`)
}

func TestTools004Git(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	// A bare repository in the sandbox with one commit on main.
	seed := strings.TrimSpace(sh004(t, d, id, `set -e
git init -q --bare -b main /srv/origin.git
git init -q -b main /tmp/seed && cd /tmp/seed
printf 'first\n' > README.md
git add README.md
git -c user.name=seed -c user.email=seed@example.invalid commit -q -m 'Initial commit'
git push -q /srv/origin.git main
git rev-parse HEAD`))

	var clone struct {
		Path   string `json:"path"`
		Branch string `json:"branch"`
		Commit string `json:"commit"`
	}
	ok004(t, d, id, "git_clone", map[string]any{"url": "/srv/origin.git"}, &clone)
	if clone.Path != "/workspace/origin" || clone.Branch != "main" || clone.Commit != seed {
		t.Errorf("git_clone = %+v (seed %s)", clone, seed)
	}
	if got, _ := readBack004(t, d, id, "/workspace/origin/README.md"); got != "first\n" {
		t.Errorf("the clone's README.md = %q", got)
	}
	fail004(t, d, id, "git_clone", map[string]any{"url": "/srv/origin.git"}, 409, "already exists")
	fail004(t, d, id, "git_clone", map[string]any{"url": "/srv/missing.git", "path": "m"}, 404, "missing.git")
	fail004(t, d, id, "git_clone", map[string]any{"url": "--upload-pack=touch /tmp/pwned", "path": "x"}, 400, "url", "starts with '-'")

	// Change a file, add one: git_status shows both.
	ok004(t, d, id, "file_write", map[string]any{"file": "origin/README.md", "content": "second\n", "append": true}, nil)
	ok004(t, d, id, "file_write", map[string]any{"file": "origin/new file.txt", "content": "new\n"}, nil)
	type statusOut struct {
		Branch   string `json:"branch"`
		Upstream string `json:"upstream"`
		Ahead    int    `json:"ahead"`
		Clean    bool   `json:"clean"`
		Files    []struct {
			Path     string `json:"path"`
			Index    string `json:"index"`
			Worktree string `json:"worktree"`
			Status   string `json:"status"`
		} `json:"files"`
	}
	var st statusOut
	ok004(t, d, id, "git_status", map[string]any{"path": "origin"}, &st)
	want := "README.md: M modified|new file.txt:?? untracked|"
	gotFiles := ""
	for _, f := range st.Files {
		gotFiles += fmt.Sprintf("%s:%s%s %s|", f.Path, f.Index, f.Worktree, f.Status)
	}
	if st.Branch != "main" || st.Upstream != "origin/main" || st.Clean || gotFiles != want {
		t.Errorf("git_status = %+v (files %q, want %q)", st, gotFiles, want)
	}

	// git_commit stages everything and commits.
	var commit struct {
		Commit  string `json:"commit"`
		Branch  string `json:"branch"`
		Summary string `json:"summary"`
	}
	ok004(t, d, id, "git_commit", map[string]any{"path": "/workspace/origin", "message": "Change README; add a file", "author_name": "Ada Agent", "author_email": "ada@example.invalid"}, &commit)
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(commit.Commit) || commit.Branch != "main" || !strings.Contains(commit.Summary, "2 files changed") {
		t.Errorf("git_commit = %+v", commit)
	}
	st = statusOut{}
	ok004(t, d, id, "git_status", map[string]any{"path": "origin"}, &st)
	if !st.Clean || st.Ahead != 1 || len(st.Files) != 0 {
		t.Errorf("git_status after the commit = %+v", st)
	}
	fail004(t, d, id, "git_commit", map[string]any{"path": "origin", "message": "again"}, 409, "nothing to commit")

	// git_push; the bare repository has the commit.
	var push struct {
		Remote string `json:"remote"`
		Branch string `json:"branch"`
		Output string `json:"output"`
	}
	ok004(t, d, id, "git_push", map[string]any{"path": "origin"}, &push)
	if push.Remote != "origin" || push.Branch != "main" || !strings.Contains(push.Output, "main -> main") {
		t.Errorf("git_push = %+v", push)
	}
	log := sh004(t, d, id, "git -C /srv/origin.git log -1 --format='%H|%an <%ae>|%s' main")
	if log != commit.Commit+"|Ada Agent <ada@example.invalid>|Change README; add a file\n" {
		t.Errorf("the bare repository's log: %q (commit %s)", log, commit.Commit)
	}
	if got := sh004(t, d, id, "git -C /srv/origin.git show main:README.md"); got != "first\nsecond\n" {
		t.Errorf("README.md in the bare repository: %q", got)
	}

	// Without author: git's configured identity, or the default one.
	wantAuthor := sh004(t, d, id, "git -C /workspace/origin config user.name || echo 'sbx agent'")
	ok004(t, d, id, "file_write", map[string]any{"file": "origin/b.txt", "content": "b\n"}, nil)
	ok004(t, d, id, "git_commit", map[string]any{"path": "origin", "message": "b"}, &commit)
	if an := sh004(t, d, id, "git -C /workspace/origin log -1 --format=%an"); an != wantAuthor {
		t.Errorf("author = %q, want %q", an, wantAuthor)
	}
	// add_all false commits only what is staged.
	ok004(t, d, id, "file_write", map[string]any{"file": "origin/c.txt", "content": "c\n"}, nil)
	fail004(t, d, id, "git_commit", map[string]any{"path": "origin", "message": "c", "add_all": false}, 409, "nothing to commit")

	fail004(t, d, id, "git_status", map[string]any{"path": "/tmp"}, 404, "not a git repository")
	fail004(t, d, id, "git_status", map[string]any{"path": "/no/such"}, 404, "/no/such")
	fail004(t, d, id, "git_push", map[string]any{"path": "origin", "remote": "-f"}, 400, "remote")
	fail004(t, d, id, "git_push", map[string]any{"path": "origin", "remote": "nowhere"}, 404, "nowhere")
}

// wheel004 is a Python program that builds a minimal pure-Python wheel
// (sbxdemo004 1.0, its module holding VALUE = 42) with zipfile into
// /tmp/wheels, RECORD hashes and all.
const wheel004 = `
import base64, hashlib, os, zipfile
files = {
    "sbxdemo004/__init__.py": b"VALUE = 42\n",
    "sbxdemo004-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: sbxdemo004\nVersion: 1.0\n",
    "sbxdemo004-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: sbx-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for name, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
record.append("sbxdemo004-1.0.dist-info/RECORD,,")
files["sbxdemo004-1.0.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
os.makedirs("/tmp/wheels", exist_ok=True)
with zipfile.ZipFile("/tmp/wheels/sbxdemo004-1.0-py3-none-any.whl", "w") as z:
    for name, data in files.items():
        z.writestr(name, data)
print("built")
`

func TestTools004Pip(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	var o cmdOut004
	ok004(t, d, id, "python_exec", map[string]any{"code": wheel004}, &o)
	if o.Stdout != "built\n" {
		t.Fatalf("building the wheel: %+v", o)
	}
	var pip struct {
		Installed []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"installed"`
		AlreadySatisfied []string `json:"already_satisfied"`
		Output           string   `json:"output"`
	}
	ok004(t, d, id, "pip_install", map[string]any{"packages": []string{"sbxdemo004"}, "find_links": "/tmp/wheels", "no_index": true}, &pip)
	if len(pip.Installed) != 1 || pip.Installed[0].Name != "sbxdemo004" || pip.Installed[0].Version != "1.0" {
		t.Errorf("pip_install = %+v", pip)
	}
	ok004(t, d, id, "python_exec", map[string]any{"code": "import sbxdemo004; print(sbxdemo004.VALUE)"}, &o)
	if o.Stdout != "42\n" || o.ExitCode != 0 {
		t.Errorf("importing the installed package: %+v", o)
	}
	ok004(t, d, id, "pip_install", map[string]any{"packages": []string{"sbxdemo004"}, "find_links": "/tmp/wheels", "no_index": true}, &pip)
	if len(pip.Installed) != 0 || len(pip.AlreadySatisfied) != 1 {
		t.Errorf("pip_install again = %+v", pip)
	}

	// No network: the index cannot be reached, and pip says so, quickly.
	start := time.Now()
	msg := fail004(t, d, id, "pip_install", map[string]any{"packages": []string{"sbx-no-such-package-004"}}, 404, "pip install failed", "No matching distribution found for sbx-no-such-package-004")
	if took := time.Since(start); took > 60*time.Second {
		t.Errorf("pip_install without network took %s: %s", took, msg)
	}
	fail004(t, d, id, "pip_install", map[string]any{"packages": []string{"-e", "x"}}, 400, "packages[0]", "starts with '-'")
	fail004(t, d, id, "pip_install", map[string]any{"packages": []string{}}, 400, "packages")
	fail004(t, d, id, "pip_install", map[string]any{"packages": "requests"}, 400, "packages", "array")
}

// server004 starts python's http.server in sandbox id on 127.0.0.1:port,
// serving dir, and waits until it answers.
func server004(t *testing.T, d *daemon, id string, port int, dir string) {
	t.Helper()
	d.exec(id, map[string]any{"command": fmt.Sprintf("exec python3 -m http.server %d --bind 127.0.0.1 --directory %s", port, dir), "background": true})
	sh004(t, d, id, fmt.Sprintf(`for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", %d), 1)' 2>/dev/null && exit 0; sleep 0.1; done; exit 1`, port))
}

func TestTools004HTTP(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	ok004(t, d, id, "file_write", map[string]any{"file": "www/index.html", "content": "<h1>inside the sandbox</h1>\n"}, nil)
	server004(t, d, id, 8004, "/workspace/www")

	type httpOut struct {
		Status       int               `json:"status"`
		Reason       string            `json:"reason"`
		URL          string            `json:"url"`
		Headers      map[string]string `json:"headers"`
		Body         string            `json:"body"`
		BodyEncoding string            `json:"body_encoding"`
	}
	// The server listens on the sandbox's own loopback: only a request made
	// inside the sandbox reaches it.
	var h httpOut
	ok004(t, d, id, "http_request", map[string]any{"url": "http://127.0.0.1:8004/index.html", "headers": map[string]string{"X-Test": "1"}}, &h)
	if h.Status != 200 || h.Body != "<h1>inside the sandbox</h1>\n" || h.Headers["content-type"] != "text/html" || h.BodyEncoding != "text" {
		t.Errorf("http_request GET = %+v", h)
	}
	// An error status is a result.
	h = httpOut{}
	ok004(t, d, id, "http_request", map[string]any{"url": "http://127.0.0.1:8004/missing"}, &h)
	if h.Status != 404 {
		t.Errorf("http_request of a missing page = %+v", h)
	}
	// A body makes it a POST, which http.server does not implement.
	h = httpOut{}
	ok004(t, d, id, "http_request", map[string]any{"url": "http://127.0.0.1:8004/", "body": `{"a": 1}`, "headers": map[string]string{"Content-Type": "application/json"}}, &h)
	if h.Status != 501 {
		t.Errorf("http_request POST = %+v", h)
	}
	// Nothing listens on port 9: connection refused.
	fail004(t, d, id, "http_request", map[string]any{"url": "http://127.0.0.1:9/"}, 503, "connection refused", "http://127.0.0.1:9/")
	fail004(t, d, id, "http_request", map[string]any{"url": "ftp://127.0.0.1/"}, 400, "url", "scheme")
	fail004(t, d, id, "http_request", map[string]any{"url": "http://127.0.0.1:8004/", "headers": map[string]string{"X-A": "a\r\nX-Injected: 1"}}, 400, "headers")
	fail004(t, d, id, "http_request", map[string]any{"url": "http://127.0.0.1:8004/", "timeout": 301}, 400, "timeout", "1–300")
}

// browsers004 are the names browser_open looks a browser up by.
const browsers004 = "chromium chromium-browser google-chrome google-chrome-stable chromium-headless-shell headless_shell"

func TestTools004Browser(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(map[string]any{"memory_mb": 1024})
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	which := d.exec(id, map[string]any{"command": "for b in " + browsers004 + "; do command -v $b; done"})
	if found := strings.Fields(which.Stdout); len(found) > 0 {
		t.Logf("the sandbox has a browser: %v", found)
		page := `<html><head><title>before</title></head><body><h1>Static heading</h1><p id="p">waiting</p>
<a href="/next.html">Next page</a>
<script>document.title = "Rendered 004"; document.getElementById("p").textContent = "made by script";</script></body></html>`
		ok004(t, d, id, "file_write", map[string]any{"file": "site/index.html", "content": page}, nil)
		server004(t, d, id, 8014, "/workspace/site")
		var b struct {
			Title      string `json:"title"`
			Text       string `json:"text"`
			Links      []struct{ Text, URL string }
			Screenshot string `json:"screenshot"`
			Bytes      int    `json:"screenshot_bytes"`
		}
		ok004(t, d, id, "browser_open", map[string]any{"url": "http://127.0.0.1:8014/", "screenshot_path": "shots/page.png"}, &b)
		if b.Title != "Rendered 004" || b.Text != "Static heading\nmade by script\nNext page" || len(b.Links) != 1 || b.Links[0].URL != "http://127.0.0.1:8014/next.html" {
			t.Errorf("browser_open = %+v", b)
		}
		st, body := d.api("GET", "/v1/sandboxes/"+id+"/files/read?path=/workspace/shots/page.png", nil)
		var f struct {
			ContentBase64 string `json:"content_base64"`
		}
		json.Unmarshal(body, &f)
		png, _ := base64.StdEncoding.DecodeString(f.ContentBase64)
		if st != 200 || b.Screenshot != "/workspace/shots/page.png" || !strings.HasPrefix(string(png), "\x89PNG") || len(png) != b.Bytes {
			t.Errorf("the screenshot: %d %+v, %d bytes read", st, b, len(png))
		}
		fail004(t, d, id, "browser_open", map[string]any{"url": "http://127.0.0.1:8099/"}, 503, "net::ERR_CONNECTION_REFUSED", "http://127.0.0.1:8099/")
		// Hide the browser from this sandbox (its /usr is its own) for the
		// not-installed case.
		sh004(t, d, id, "for b in "+browsers004+"; do while p=$(command -v $b); do rm -f \"$p\"; hash -r; done; done")
	}
	fail004(t, d, id, "browser_open", map[string]any{"url": "http://127.0.0.1:8014/"}, 404, "no browser", "chromium")
	fail004(t, d, id, "browser_open", map[string]any{"url": "javascript:alert(1)"}, 400, "url", "scheme")
	fail004(t, d, id, "browser_open", map[string]any{"url": "http://127.0.0.1/", "wait_ms": 60001}, 400, "wait_ms", "60000")
}

// standInBSL004 stands in for bsl-language-server in the test: the real one
// is a Java program this machine cannot install. It takes the analyzer's
// command line (--analyze --srcDir DIR --reporter json --outputDir DIR
// [--configuration FILE]), records it, and writes bsl-json.json in the json
// reporter's documented format: {"date", "sourceDir", "fileinfos": [{"path"
// (a file URI), "mdoRef", "diagnostics": [{"range": {"start", "end"} of
// 0-based line/character, "severity", "code", "source", "message"}]}]}, with
// made-up rules: a line over 40 characters is LineLength (Information),
// "Перем" declares an unused variable (Warning), "ОШИБКА" is a ParseError
// (Error).
const standInBSL004 = `#!/usr/bin/python3
import json, os, sys, urllib.parse
args = sys.argv[1:]
open("/tmp/bsl-args", "w").write(json.dumps(args))
opt = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
assert "--analyze" in args and opt["--reporter"] == "json", args
src, out = opt["--srcDir"], opt["--outputDir"]
infos = []
for root, dirs, names in os.walk(src):
    for name in sorted(names):
        if not name.lower().endswith((".bsl", ".os")):
            continue
        p = os.path.join(root, name)
        diags = []
        for n, line in enumerate(open(p, encoding="utf-8").read().split("\n")):
            def d(sev, code, start, end, msg):
                diags.append({"range": {"start": {"line": n, "character": start}, "end": {"line": n, "character": end}},
                              "severity": sev, "code": code, "source": "bsl-language-server", "message": msg})
            if len(line) > 40:
                d("Information", "LineLength", 0, len(line), "Длина строки %d превышает 40" % len(line))
            if "Перем" in line:
                d("Warning", "UnusedLocalVariable", line.index("Перем"), len(line), "Неиспользуемая переменная")
            if "ОШИБКА" in line:
                d("Error", "ParseError", line.index("ОШИБКА"), line.index("ОШИБКА") + 6, "Ошибка разбора")
        infos.append({"path": "file://" + urllib.parse.quote(os.path.abspath(p)), "mdoRef": "", "diagnostics": diags,
                      "metrics": {"lines": n + 1}})
os.makedirs(out, exist_ok=True)
json.dump({"date": "2025-01-01 00:00:00", "sourceDir": src, "fileinfos": infos}, open(os.path.join(out, "bsl-json.json"), "w"), ensure_ascii=False)
print("analysis done")
`

func TestTools004BSL(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	module := "Процедура Тест()\n\tПерем Х;\n\tСообщить(\"строка, которая длиннее сорока символов в модуле\");\n\tОШИБКА\nКонецПроцедуры\n"
	ok004(t, d, id, "file_write", map[string]any{"file": "cf/CommonModules/Общий/Ext/Module.bsl", "content": module}, nil)
	ok004(t, d, id, "file_write", map[string]any{"file": "cf/script.os", "content": "Сообщить(1);\n"}, nil)
	ok004(t, d, id, "file_write", map[string]any{"file": "cf/readme.txt", "content": "not code\n"}, nil)

	// Not installed: the real error, from the sandbox's own PATH.
	fail004(t, d, id, "bsl_check", map[string]any{"path": "cf"}, 404, "bsl-language-server is not installed in this sandbox's template")

	ok004(t, d, id, "file_write", map[string]any{"file": "/usr/local/bin/bsl-language-server", "content": standInBSL004}, nil)
	sh004(t, d, id, "chmod 755 /usr/local/bin/bsl-language-server")

	type bslOut struct {
		Path        string `json:"path"`
		Diagnostics []struct {
			File      string `json:"file"`
			Line      int    `json:"line"`
			Column    int    `json:"column"`
			EndLine   int    `json:"end_line"`
			EndColumn int    `json:"end_column"`
			Severity  string `json:"severity"`
			Code      string `json:"code"`
			Message   string `json:"message"`
		} `json:"diagnostics"`
		Counts        map[string]int `json:"counts"`
		FilesAnalyzed int            `json:"files_analyzed"`
	}
	// One file: analyzed alone, reported under its own path.
	var b bslOut
	ok004(t, d, id, "bsl_check", map[string]any{"path": "cf/CommonModules/Общий/Ext/Module.bsl"}, &b)
	file := "/workspace/cf/CommonModules/Общий/Ext/Module.bsl"
	var got []string
	for _, x := range b.Diagnostics {
		got = append(got, fmt.Sprintf("%s:%d:%d-%d:%d %s %s", x.File, x.Line, x.Column, x.EndLine, x.EndColumn, x.Severity, x.Code))
	}
	want := []string{
		file + ":2:2-2:10 Warning UnusedLocalVariable",
		file + ":3:1-3:63 Information LineLength",
		file + ":4:2-4:8 Error ParseError",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || b.FilesAnalyzed != 1 || b.Path != file ||
		b.Counts["Error"] != 1 || b.Counts["Warning"] != 1 || b.Counts["Information"] != 1 || b.Counts["Hint"] != 0 {
		t.Errorf("bsl_check of a file:\n%s\nwant\n%s\n%+v", strings.Join(got, "\n"), strings.Join(want, "\n"), b)
	}
	if b.Diagnostics[2].Message != "Ошибка разбора" {
		t.Errorf("message %q", b.Diagnostics[2].Message)
	}
	var args []string
	raw, _ := readBack004(t, d, id, "/tmp/bsl-args")
	json.Unmarshal([]byte(raw), &args)
	if len(args) < 7 || args[0] != "--analyze" || args[1] != "--srcDir" || args[3] != "--reporter" || args[4] != "json" || args[5] != "--outputDir" {
		t.Errorf("the analyzer's arguments: %q", args)
	}

	// A directory: every .bsl and .os file in it; min_severity filters.
	b = bslOut{}
	ok004(t, d, id, "bsl_check", map[string]any{"path": "/workspace/cf", "min_severity": "Warning"}, &b)
	if b.FilesAnalyzed != 2 || len(b.Diagnostics) != 2 || b.Counts["Information"] != 0 || b.Diagnostics[0].File != file {
		t.Errorf("bsl_check of a directory = %+v", b)
	}

	fail004(t, d, id, "bsl_check", map[string]any{"path": "cf/readme.txt"}, 400, "path", "not a .bsl or .os file")
	fail004(t, d, id, "bsl_check", map[string]any{"path": "cf/missing.bsl"}, 404, "/workspace/cf/missing.bsl")
	fail004(t, d, id, "bsl_check", map[string]any{"path": "cf", "min_severity": "Fatal"}, 400, "min_severity")
	fail004(t, d, id, "bsl_check", map[string]any{"path": "cf", "timeout": 3601}, 400, "timeout", "1–3600")
}
