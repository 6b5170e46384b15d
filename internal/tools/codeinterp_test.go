package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
	"sbx.dev/sbx/internal/testutil/replagent"
	"sbx.dev/sbx/internal/tools/repl"
)

// ciCallTimeout bounds any one test request, never a measure.
const ciCallTimeout = 60 * time.Second

// localHost is a ciHost whose one sandbox is this machine: its agent
// (replagent.LocalAgent) runs real local processes (python3 is
// /usr/bin/python3), and its workdir is a temporary directory. Paths are
// host paths.
type localHost struct {
	*replagent.LocalAgent
	timeout time.Duration

	mu   sync.Mutex
	gone bool
}

func newLocalHost(t *testing.T) *localHost {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("/usr/bin/python3 is needed: apt-get install python3")
	}
	return &localHost{LocalAgent: replagent.NewLocalAgent(t), timeout: ciCallTimeout}
}

func (h *localHost) Check(_ context.Context, id sandbox.ID) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gone {
		return &sandbox.Error{Op: "get", ID: id, Err: fmt.Errorf("sandbox %w", sandbox.ErrNotFound)}
	}
	return nil
}

func (h *localHost) Agent(sandbox.ID) ciAgent { return h }

func (h *localHost) MaxTimeout() time.Duration { return h.timeout }

func (h *localHost) Stat(_ context.Context, path string) (sandbox.FileInfo, error) {
	if !filepath.IsAbs(path) {
		path = filepath.Join(h.Root, path)
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return sandbox.FileInfo{}, fmt.Errorf("%s: %w", path, sandbox.ErrNotFound)
	}
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	typ := "file"
	switch {
	case fi.IsDir():
		typ = "dir"
	case fi.Mode()&os.ModeSymlink != 0:
		typ = "symlink"
	}
	return sandbox.FileInfo{Name: fi.Name(), Path: filepath.Clean(path), Type: typ}, nil
}

// running says whether a process with tag runs.
func (h *localHost) running(tag string) bool {
	_, ok, _ := h.Find(context.Background(), tag)
	return ok
}

const ciSandbox sandbox.ID = "sb-ci"

// ciFixture serves one Set's code interpreter over a local host.
type ciFixture struct {
	t    *testing.T
	host *localHost
	set  *Set
	srv  *httptest.Server
	key  *manager.Key // the caller's key; nil: none (the daemon's own)
}

func newCIFixture(t *testing.T) *ciFixture {
	t.Helper()
	testutil.CheckLeaks(t) // streams, keepalives and sessions end with the test
	f := &ciFixture{t: t, host: newLocalHost(t)}
	f.restartDaemon()
	return f
}

// restartDaemon gives the fixture a new Set: nothing is known but what runs.
func (f *ciFixture) restartDaemon() {
	f.set = New(nil, Options{})
	f.set.ci.host = f.host
	if f.srv == nil {
		f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if f.key != nil {
				r = r.WithContext(manager.WithKey(r.Context(), *f.key))
			}
			f.set.ServeCodeInterpreter(w, r, ciSandbox)
		}))
		f.t.Cleanup(f.srv.Close)
	}
}

// do sends a request and returns the status and body.
func (f *ciFixture) do(method, path, body string) (int, string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ciCallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// execution is what an execution's stream said, read as the E2B SDK reads
// it.
type execution struct {
	lines   []map[string]any
	stdout  string
	stderr  string
	results []map[string]any
	err     map[string]any
	count   float64
	main    string // the text of the main result
}

func (e execution) types() []string {
	var ts []string
	for _, l := range e.lines {
		ts = append(ts, l["type"].(string))
	}
	return ts
}

// parseExecution checks each line of body as the SDK needs it (one
// complete JSON object with a type, ASCII, never empty; end_of_execution
// last) and sums it up.
func parseExecution(t *testing.T, body string) execution {
	t.Helper()
	var e execution
	if !strings.HasSuffix(body, "\n") {
		t.Errorf("the stream does not end with a newline: %q", body[max(0, len(body)-80):])
	}
	for _, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		for _, c := range []byte(line) {
			if c >= 0x80 {
				t.Errorf("a line is not ASCII: %.100q", line)
				break
			}
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a line is no JSON object (%v): %q", err, line)
		}
		typ, _ := m["type"].(string)
		switch typ {
		case "stdout":
			e.stdout += m["text"].(string)
		case "stderr":
			e.stderr += m["text"].(string)
		case "result":
			e.results = append(e.results, m)
			if m["is_main_result"] == true {
				e.main, _ = m["text"].(string)
			}
		case "error":
			e.err = m
		case "number_of_executions":
			e.count = m["execution_count"].(float64)
		case "end_of_execution", "keepalive":
		default:
			t.Errorf("a line of unknown type: %q", line)
		}
		e.lines = append(e.lines, m)
	}
	if ts := e.types(); len(ts) == 0 || ts[len(ts)-1] != "end_of_execution" {
		t.Errorf("the last line is not end_of_execution: %v", ts)
	}
	return e
}

// run executes code (with the request's other fields in extra, a JSON
// object's members) and returns the parsed stream.
func (f *ciFixture) run(code, extra string) execution {
	f.t.Helper()
	body, _ := json.Marshal(map[string]string{"code": code})
	if extra != "" {
		body = append(body[:len(body)-1], ","+extra+"}"...)
	}
	status, out := f.do("POST", "/execute", string(body))
	if status != http.StatusOK {
		f.t.Fatalf("POST /execute %s: %d %s", body, status, out)
	}
	return parseExecution(f.t, out)
}

// ok runs code that must not raise.
func (f *ciFixture) ok(code, extra string) execution {
	f.t.Helper()
	e := f.run(code, extra)
	if e.err != nil {
		f.t.Fatalf("%q raised %v", code, e.err)
	}
	return e
}

func TestCodeInterpreterExecute(t *testing.T) {
	f := newCIFixture(t)
	e := f.ok("x = 41\nprint('héllo ✓ 😀')\nimport sys; print('warn', file=sys.stderr)", "")
	if e.stdout != "héllo ✓ 😀\n" || e.stderr != "warn\n" || len(e.results) != 0 || e.count != 1 {
		t.Errorf("first cell: stdout %q stderr %q results %v count %v", e.stdout, e.stderr, e.results, e.count)
	}
	if ts := e.types(); ts[len(ts)-2] != "number_of_executions" {
		t.Errorf("line types %v", ts)
	}
	// State is kept; the value is the main result.
	e = f.ok("x + 1", "")
	if e.main != "42" || e.count != 2 || len(e.results) != 1 {
		t.Errorf("x + 1: main %q, count %v, results %v", e.main, e.count, e.results)
	}
	// As upstream, a string's quotes are dropped from its text.
	if e = f.ok("'a ' + \"string\"", ""); e.main != "a string" {
		t.Errorf("a string's text %q", e.main)
	}
	// An exception: its error line, and the session goes on.
	e = f.run("def f():\n    return 1 / 0\nf()", "")
	if e.err == nil || e.err["name"] != "ZeroDivisionError" || e.err["value"] != "division by zero" ||
		!strings.Contains(e.err["traceback"].(string), "return 1 / 0") || len(e.results) != 0 {
		t.Errorf("error line %v, results %v", e.err, e.results)
	}
	if e = f.ok("x", ""); e.main != "41" {
		t.Errorf("after an exception x is %q", e.main)
	}
	// language python is the default context.
	if e = f.ok("x", `"language":"python"`); e.main != "41" {
		t.Errorf("language python: x is %q", e.main)
	}
	// The default context is repl_execute's session.
	res, err := f.set.repl.Execute(context.Background(), string(ciSandbox), f.host, "x * 2", repl.Options{})
	if err != nil || res.Value != "82" {
		t.Errorf("repl_execute's session: %+v %v", res, err)
	}
	if _, err := f.set.repl.Execute(context.Background(), string(ciSandbox), f.host, "from_repl = 'r'", repl.Options{}); err != nil {
		t.Fatal(err)
	}
	if e = f.ok("from_repl", ""); e.main != "r" {
		t.Errorf("a variable of repl_execute: %q", e.main)
	}
}

func TestCodeInterpreterRichResults(t *testing.T) {
	f := newCIFixture(t)
	e := f.ok(`class T:
    def __repr__(self): return 'T()'
    def _repr_html_(self): return '<table><tr><td>1</td></tr></table>'
    def _repr_mimebundle_(self, include=None, exclude=None): return {'application/vnd.x': 'custom'}
display(T())
T()`, "")
	if len(e.results) != 2 {
		t.Fatalf("results %v", e.results)
	}
	for i, r := range e.results {
		main := i == 1
		if r["is_main_result"] != main || r["text"] != "T()" || r["html"] != "<table><tr><td>1</td></tr></table>" ||
			fmt.Sprint(r["extra"]) != "map[application/vnd.x:custom]" {
			t.Errorf("result %d: %v", i, r)
		}
	}
}

func TestCodeInterpreterChart(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run(); err != nil {
		t.Skip("matplotlib is not importable by /usr/bin/python3: apt-get install python3-matplotlib")
	}
	f := newCIFixture(t)
	e := f.ok("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.title('chart')\nplt.show()", "")
	if len(e.results) != 1 {
		t.Fatalf("results %v", e.types())
	}
	r := e.results[0]
	png, err := base64.StdEncoding.DecodeString(fmt.Sprint(r["png"]))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("png is no base64 PNG (%v)", err)
	}
	if r["is_main_result"] != false || !strings.Contains(fmt.Sprint(r["svg"]), "<svg") || r["text"] != "<Figure size 640x480 with 1 Axes>" {
		t.Errorf("chart result: main %v, text %v", r["is_main_result"], r["text"])
	}
	// The figure was closed: the next cell has none.
	if e = f.ok("1", ""); len(e.results) != 1 || e.results[0]["png"] != nil {
		t.Errorf("next cell's results %v", e.types())
	}
}

// The cell goes on only once the test has read its first line from the
// HTTP stream: output sent only at the end would leave it waiting.
func TestCodeInterpreterStreamsWhileTheCellRuns(t *testing.T) {
	f := newCIFixture(t)
	gate := filepath.Join(f.host.Root, "gate")
	code := `import os, time
print("first", flush=True)
deadline = time.time() + 30
while not os.path.exists("gate") and time.time() < deadline:
    time.sleep(0.01)
print("saw the gate" if os.path.exists("gate") else "no gate")`
	body, _ := json.Marshal(map[string]string{"code": code})
	resp, err := http.Post(f.srv.URL+"/execute", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for seen := ""; seen != "first\n"; {
		first, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %q: %v", seen, err)
		}
		var line map[string]any
		if err := json.Unmarshal([]byte(first), &line); err != nil || line["type"] != "stdout" || !strings.HasPrefix("first\n", seen+fmt.Sprint(line["text"])) {
			t.Fatalf("after %q, line %q (%v)", seen, first, err)
		}
		if _, ok := line["timestamp"].(string); !ok {
			t.Errorf("no timestamp: %q", first)
		}
		seen += line["text"].(string)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if e := parseExecution(t, string(rest)); e.stdout != "saw the gate\n" {
		t.Errorf("then stdout %q", e.stdout)
	}
}

func TestCodeInterpreterEnvVars(t *testing.T) {
	f := newCIFixture(t)
	e := f.ok("import os\nprint(os.environ['SBX_CI_A'], os.environ.get('SBX_CI_B'))", `"env_vars":{"SBX_CI_A":"one"}`)
	if e.stdout != "one None\n" {
		t.Errorf("with env_vars: %q", e.stdout)
	}
	if e = f.ok("'SBX_CI_A' in os.environ", ""); e.main != "False" {
		t.Errorf("env_vars outlived their execution: %q", e.main)
	}
	if status, body := f.do("POST", "/execute", `{"code":"1","env_vars":{"A=B":"x"}}`); status != 400 || !strings.Contains(body, `"A=B" is not a valid environment variable`) {
		t.Errorf("a bad name: %d %q", status, body)
	}
}

var contextIDPattern = regexp.MustCompile(`^[0-9a-f]{12}$`)

func (f *ciFixture) createContext(body string) ciContext {
	f.t.Helper()
	status, out := f.do("POST", "/contexts", body)
	var c ciContext
	if status != http.StatusOK || json.Unmarshal([]byte(out), &c) != nil || !contextIDPattern.MatchString(c.ID) || c.Language != "python" {
		f.t.Fatalf("POST /contexts %s: %d %s", body, status, out)
	}
	return c
}

func (f *ciFixture) listContexts() []ciContext {
	f.t.Helper()
	status, out := f.do("GET", "/contexts", "")
	var list []ciContext
	if status != http.StatusOK || json.Unmarshal([]byte(out), &list) != nil {
		f.t.Fatalf("GET /contexts: %d %s", status, out)
	}
	return list
}

func TestCodeInterpreterContexts(t *testing.T) {
	f := newCIFixture(t)
	dir := t.TempDir()
	def := ciContext{ID: "python", Language: "python", Cwd: f.host.Root}
	if list := f.listContexts(); len(list) != 1 || list[0] != def {
		t.Errorf("contexts at first: %+v, want the default %+v", list, def)
	}
	f.ok("x = 'default'", "")
	c := f.createContext(`{"language":"python","cwd":"` + dir + `"}`)
	if c.Cwd != dir || !f.host.running("sbx-repl-"+c.ID) {
		t.Errorf("created %+v (want cwd %s); running %v", c, dir, f.host.running("sbx-repl-"+c.ID))
	}
	d := f.createContext(`{}`) // python, in the workdir
	if d.Cwd != f.host.Root || d.ID == c.ID {
		t.Errorf("created %+v beside %+v", d, c)
	}
	list := f.listContexts()
	if len(list) != 3 || list[0] != def || !contains(list, c) || !contains(list, d) {
		t.Errorf("contexts %+v", list)
	}
	// Each context has its own state and cwd.
	inC := `"context_id":"` + c.ID + `"`
	if e := f.run("x", inC); e.err == nil || e.err["name"] != "NameError" {
		t.Errorf("the default's x in a new context: %v", e.err)
	}
	if e := f.ok("import os\nx = 'c'\nos.getcwd()", inC); e.main != dir || e.count != 2 {
		t.Errorf("in c: cwd %q, count %v", e.main, e.count)
	}
	if e := f.ok("x", `"context_id":"python"`); e.main != "default" {
		t.Errorf("the default's x: %q", e.main)
	}
	// A daemon restart finds the contexts again, their state kept.
	f.restartDaemon()
	if list := f.listContexts(); len(list) != 3 || !contains(list, c) || !contains(list, d) {
		t.Errorf("contexts after a daemon restart %+v", list)
	}
	if e := f.ok("x", inC); e.main != "c" {
		t.Errorf("c after a daemon restart: x is %q", e.main)
	}
	// Restart: a fresh process, same cwd.
	if status, body := f.do("POST", "/contexts/"+c.ID+"/restart", ""); status != http.StatusNoContent {
		t.Fatalf("restart: %d %s", status, body)
	}
	if e := f.ok("import os\n'x' in dir(), os.getcwd()", inC); e.main != "(False, '"+dir+"')" || e.count != 1 {
		t.Errorf("after restart: %q, count %v", e.main, e.count)
	}
	// Remove: the process is gone, and so is the context.
	if status, body := f.do("DELETE", "/contexts/"+c.ID, ""); status != http.StatusNoContent {
		t.Fatalf("remove: %d %s", status, body)
	}
	if f.host.running("sbx-repl-" + c.ID) {
		t.Error("the removed context's process runs")
	}
	if list := f.listContexts(); len(list) != 2 || contains(list, c) {
		t.Errorf("contexts after remove %+v", list)
	}
	want := "Context " + c.ID + " not found"
	for _, r := range [][2]string{{"POST", "/execute"}, {"DELETE", "/contexts/" + c.ID}, {"POST", "/contexts/" + c.ID + "/restart"}} {
		status, body := f.do(r[0], r[1], `{"code":"1",`+inC+`}`)
		if status != http.StatusNotFound || body != want {
			t.Errorf("%s %s of a removed context: %d %q, want 404 %q", r[0], r[1], status, body, want)
		}
	}
	// The default context can be restarted and removed: it starts afresh
	// when next used.
	if status, _ := f.do("POST", "/contexts/python/restart", ""); status != http.StatusNoContent {
		t.Errorf("restart of the default: %d", status)
	}
	if e := f.ok("'x' in dir()", ""); e.main != "False" {
		t.Errorf("the default after its restart: %q", e.main)
	}
	f.ok("y = 1", "")
	if status, _ := f.do("DELETE", "/contexts/python", ""); status != http.StatusNoContent || f.host.running(repl.Tag) {
		t.Errorf("remove of the default: %d, running %v", status, f.host.running(repl.Tag))
	}
	if e := f.ok("'y' in dir()", ""); e.main != "False" {
		t.Errorf("the default after its removal: %q", e.main)
	}
}

func contains(list []ciContext, c ciContext) bool {
	for _, x := range list {
		if x == c {
			return true
		}
	}
	return false
}

func TestCodeInterpreterBadRequests(t *testing.T) {
	f := newCIFixture(t)
	for _, c := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"POST", "/execute", `{"code":"1","language":"js"}`, 400, `language "javascript" is not supported; the supported languages are: python`},
		{"POST", "/execute", `{"code":"1","language":"R"}`, 400, `language "r" is not supported`},
		{"POST", "/execute", `{"code":"1","language":"python","context_id":"python"}`, 400, "Only one of context_id or language can be provided"},
		{"POST", "/execute", `{"code":`, 400, "the request body does not decode: unexpected end of JSON input"},
		{"POST", "/execute", `{"code":"1","env_vars":{"A":1}}`, 400, "the request body does not decode: json: cannot unmarshal number"},
		{"POST", "/execute", `{"language":"python"}`, 400, "code is required"},
		{"POST", "/execute", `{"code":"1","context_id":"nope"}`, 404, "Context nope not found"},
		{"POST", "/contexts", `{"language":"ts"}`, 400, `language "typescript" is not supported`},
		{"POST", "/contexts", `{"cwd":"/no/such/dir"}`, 400, `cwd "/no/such/dir" does not exist in the sandbox`},
		{"POST", "/contexts", `{"cwd":"/etc/passwd"}`, 400, `cwd "/etc/passwd" is not a directory`},
		{"GET", "/execute", ``, 405, "method GET is not allowed here (allowed: POST)"},
		{"PUT", "/contexts", ``, 405, "method PUT is not allowed here (allowed: GET, POST)"},
		{"GET", "/nothing", ``, 404, "not found"},
	} {
		status, body := f.do(c.method, c.path, c.body)
		if status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s %s %s: %d %q, want %d with %q", c.method, c.path, c.body, status, body, c.status, c.want)
		}
	}
	if f.host.running(repl.Tag) {
		t.Error("a bad request started a session")
	}
	if status, body := f.do("GET", "/health", ""); status != 200 || body != "\"OK\"\n" {
		t.Errorf("health: %d %q", status, body)
	}
}

func TestCodeInterpreterNeedsToolsPython(t *testing.T) {
	f := newCIFixture(t)
	f.key = &manager.Key{ID: "k", Capabilities: []string{CapExec, CapShell}}
	for _, r := range [][2]string{{"POST", "/execute"}, {"GET", "/contexts"}, {"POST", "/contexts"}, {"DELETE", "/contexts/python"}} {
		status, body := f.do(r[0], r[1], `{"code":"1"}`)
		if status != http.StatusForbidden || body != "access denied: tools.python" {
			t.Errorf("%s %s without tools.python: %d %q", r[0], r[1], status, body)
		}
	}
	f.key = &manager.Key{ID: "k", Capabilities: []string{CapPython}}
	if e := f.ok("1", ""); e.main != "1" {
		t.Errorf("with tools.python: %q", e.main)
	}
}

func TestCodeInterpreterSandboxGone(t *testing.T) {
	f := newCIFixture(t)
	f.ok("1", "")
	f.host.mu.Lock()
	f.host.gone = true
	f.host.mu.Unlock()
	for _, r := range [][2]string{{"POST", "/execute"}, {"GET", "/contexts"}, {"POST", "/contexts"}, {"GET", "/health"}} {
		status, body := f.do(r[0], r[1], `{"code":"1"}`)
		if status != http.StatusBadGateway || body != "the sandbox is not running: get sb-ci: sandbox not found" {
			t.Errorf("%s %s of a gone sandbox: %d %q", r[0], r[1], status, body)
		}
	}
}

func TestCodeInterpreterTimeout(t *testing.T) {
	f := newCIFixture(t)
	f.host.timeout = 300 * time.Millisecond
	f.ok("kept = 1", "")
	e := f.run("print('before', flush=True)\nwhile True:\n    pass", "")
	if e.err == nil || e.err["name"] != "TimeoutError" || !strings.Contains(e.err["value"].(string), "timeout") ||
		!strings.Contains(e.err["traceback"].(string), "KeyboardInterrupt") || e.stdout != "before\n" {
		t.Errorf("error %v, stdout %q", e.err, e.stdout)
	}
	if e = f.ok("kept", ""); e.main != "1" {
		t.Errorf("after a timeout: %q", e.main)
	}
}

func TestCodeInterpreterKeepalive(t *testing.T) {
	f := newCIFixture(t)
	f.set.ci.keepalive = 20 * time.Millisecond
	e := f.ok("import time\ntime.sleep(0.3)\n'done'", "")
	if !strings.Contains(fmt.Sprint(e.types()), "keepalive") || e.main != "done" {
		t.Errorf("line types %v after 0.3 s of silence with a 20 ms keepalive", e.types())
	}
}

// A client that goes away interrupts its cell; the session and its state
// are kept.
func TestCodeInterpreterClientGone(t *testing.T) {
	f := newCIFixture(t)
	f.ok("kept = 1", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body, _ := json.Marshal(map[string]string{"code": "import time\nprint('started', flush=True)\ntime.sleep(1000)"})
	req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/execute", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	if e := f.ok("kept + 1", ""); e.main != "2" {
		t.Errorf("after the client went away: %q", e.main)
	}
}

func TestASCIIJSON(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"a":"plain"}`, `{"a":"plain"}`},
		{`{"a":"héllo"}`, `{"a":"h\u00e9llo"}`},
		{`{"a":"✓😀"}`, `{"a":"\u2713\ud83d\ude00"}`},
		{"{\"a\":\"\xff\"}", `{"a":"\ufffd"}`},
	} {
		got := asciiJSON([]byte(c.in))
		if string(got) != c.want {
			t.Errorf("asciiJSON(%q) = %s, want %s", c.in, got, c.want)
		}
		var a, b any
		if json.Valid([]byte(c.in)) && (json.Unmarshal([]byte(c.in), &a) != nil || json.Unmarshal(got, &b) != nil || fmt.Sprint(a) != fmt.Sprint(b)) {
			t.Errorf("asciiJSON(%q) changed the value: %v, %v", c.in, a, b)
		}
	}
}

// The loss of a session during a cell or between cells is said, and the
// next execution runs in a fresh one.
func TestCodeInterpreterSessionLoss(t *testing.T) {
	f := newCIFixture(t)
	f.ok("kept = 1", "")
	e := f.run("import os\nos._exit(3)", "")
	if e.err == nil || e.err["name"] != "UnexpectedEndOfExecution" || !strings.Contains(e.err["value"].(string), "exited during the cell") {
		t.Errorf("os._exit: error %v", e.err)
	}
	if e = f.ok("'kept' in dir()", ""); e.main != "False" {
		t.Errorf("after os._exit: %q", e.main)
	}
	// Killed between cells: the next execution says its state is gone.
	f.ok("kept = 1", "")
	id, ok, _ := f.host.Find(context.Background(), repl.Tag)
	if !ok {
		t.Fatal("no default session")
	}
	if err := f.host.Signal(context.Background(), id, 9); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(ciCallTimeout); f.host.running(repl.Tag); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed session still runs")
		}
	}
	if e = f.ok("'kept' in dir()", ""); e.main != "False" || !strings.Contains(e.stderr, "[sbx: the Python session had exited since the previous call") {
		t.Errorf("after a kill: %q, stderr %q", e.main, e.stderr)
	}
}

// Restarting a context ends the execution that runs in it.
func TestCodeInterpreterRestartDuringACell(t *testing.T) {
	f := newCIFixture(t)
	c := f.createContext(`{}`)
	body, _ := json.Marshal(map[string]string{"code": "import time\nprint('started', flush=True)\ntime.sleep(1000)", "context_id": c.ID})
	resp, err := http.Post(f.srv.URL+"/execute", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if status, out := f.do("POST", "/contexts/"+c.ID+"/restart", ""); status != http.StatusNoContent {
		t.Fatalf("restart: %d %s", status, out)
	}
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	e := parseExecution(t, string(rest))
	if e.err == nil || e.err["name"] != "UnexpectedEndOfExecution" || !strings.Contains(e.err["value"].(string), "the session was restarted while the cell ran") {
		t.Errorf("the running execution's error %v", e.err)
	}
}
