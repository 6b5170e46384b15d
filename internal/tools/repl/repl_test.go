package repl

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil/replagent"
)

// callTimeout is an upper bound on any one test call, never a measure.
const callTimeout = 60 * time.Second

type fixture struct {
	t  *testing.T
	s  *Sessions
	a  *replagent.LocalAgent
	id string
}

// testPython is the interpreter the sessions run: /usr/bin/python3, or
// $SBX_REPL_PYTHON to try the driver on another version.
func testPython() string {
	if p := os.Getenv("SBX_REPL_PYTHON"); p != "" {
		return p
	}
	return "/usr/bin/python3"
}

func newFixture(t *testing.T, llm LLM) *fixture {
	t.Helper()
	if _, err := os.Stat(testPython()); err != nil {
		t.Skipf("%s is needed: apt-get install python3", testPython())
	}
	t.Parallel()
	a := replagent.NewLocalAgent(t)
	a.Python = testPython()
	return &fixture{t: t, s: NewSessions(llm), a: a, id: "sb-" + t.Name()}
}

// exec runs code and fails the test on an Execute error.
func (f *fixture) exec(code string, opt Options) Result {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := f.s.Execute(ctx, f.id, f.a, code, opt)
	if err != nil {
		f.t.Fatalf("Execute(%q): %v", code, err)
	}
	return res
}

// ok runs code that must not raise and returns its result.
func (f *fixture) ok(code string) Result {
	f.t.Helper()
	res := f.exec(code, Options{})
	if res.Error != nil {
		f.t.Fatalf("Execute(%q) raised %s: %s\n%s", code, res.Error.Name, res.Error.Value, res.Error.Traceback)
	}
	return res
}

// value runs code and checks the repr of its last expression.
func (f *fixture) value(code, want string) {
	f.t.Helper()
	if got := f.ok(code).Value; got != want {
		f.t.Errorf("Execute(%q).Value = %q, want %q", code, got, want)
	}
}

// raises runs code and checks that it raised name with a value holding part.
func (f *fixture) raises(code, name, part string) Result {
	f.t.Helper()
	res := f.exec(code, Options{})
	if res.Error == nil {
		f.t.Fatalf("Execute(%q) raised nothing, want %s (value %q, stdout %q)", code, name, res.Value, res.Stdout)
	}
	if res.Error.Name != name || !strings.Contains(res.Error.Value, part) {
		f.t.Errorf("Execute(%q) raised %s: %q, want %s holding %q", code, res.Error.Name, res.Error.Value, name, part)
	}
	return res
}

func TestStateIsKeptAcrossCalls(t *testing.T) {
	f := newFixture(t, LLM{})
	if res := f.ok("x = 41\nimport math"); res.ExecutionCount != 1 || res.Value != "" || res.Restarted {
		t.Errorf("first cell: %+v", res)
	}
	res := f.ok("x + 1")
	if res.Value != "42" || res.ExecutionCount != 2 {
		t.Errorf("second cell: value %q count %d, want 42 and 2", res.Value, res.ExecutionCount)
	}
	f.value("round(math.pi, 2)", "3.14")
	f.value("def twice(v):\n    return 2 * v\n\ntwice(x)", "82")
	f.value("twice(1)", "2")
	if n := f.a.StartCount(); n != 1 {
		t.Errorf("%d processes started, want 1", n)
	}
}

func TestLastExpressionValue(t *testing.T) {
	f := newFixture(t, LLM{})
	for _, c := range []struct{ code, want string }{
		{"1 + 1", "2"},
		{"'text'", "'text'"},
		{"None", ""},
		{"y = 3", ""},
		{"y * 2;", ""}, // a trailing ";" hides the value, as in Jupyter
		{"print('p')", ""},
		{"[y, {'k': (1, 2)}]", "[3, {'k': (1, 2)}]"},
		{"if y:\n    z = 1\nz", "1"},
		{"_", "1"}, // the last value, as in Jupyter
		{"", ""},
	} {
		f.value(c.code, c.want)
	}
}

func TestOutputIsCaptured(t *testing.T) {
	f := newFixture(t, LLM{})
	res := f.ok(`import os, subprocess, sys
print("from print")
print("to stderr", file=sys.stderr)
os.system("echo from-system; echo system-err >&2")
subprocess.run(["sh", "-c", "echo from-subprocess"])
os.write(1, b"raw fd 1\n")
os.write(2, b"raw fd 2\n")
`)
	for _, want := range []string{"from print\n", "from-system\n", "from-subprocess\n", "raw fd 1\n"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("stdout %q lacks %q", res.Stdout, want)
		}
	}
	for _, want := range []string{"to stderr\n", "system-err\n", "raw fd 2\n"} {
		if !strings.Contains(res.Stderr, want) {
			t.Errorf("stderr %q lacks %q", res.Stderr, want)
		}
	}
	if strings.Contains(res.Stdout, "err") || strings.Contains(res.Stderr, "from") {
		t.Errorf("streams mixed up: stdout %q, stderr %q", res.Stdout, res.Stderr)
	}
	// Each cell has its own output.
	if res := f.ok("print('next')"); res.Stdout != "next\n" || res.Stderr != "" {
		t.Errorf("next cell: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	// What looks like a response, printed by a cell, is only output.
	res = f.ok(`print("\x1esbx-repl {\"type\": \"result\", \"id\": \"x\"}"); 7`)
	if res.Value != "7" || !strings.Contains(res.Stdout, "sbx-repl") {
		t.Errorf("a forged response: value %q stdout %q", res.Value, res.Stdout)
	}
	// stdin is not the protocol's: input() sees its end.
	f.raises("input()", "EOFError", "")
}

func TestExceptionKeepsSession(t *testing.T) {
	f := newFixture(t, LLM{})
	f.ok("kept = 'yes'")
	res := f.raises("def f():\n    raise ValueError('bad input')\n\nprint('before')\nf()", "ValueError", "bad input")
	tb := res.Error.Traceback
	for _, want := range []string{"Traceback (most recent call last)", `File "<cell-2>", line 5`, "in f", "raise ValueError('bad input')", "ValueError: bad input"} {
		if !strings.Contains(tb, want) {
			t.Errorf("traceback lacks %q:\n%s", want, tb)
		}
	}
	if strings.Contains(tb, driverName) || strings.Contains(tb, "repl.py") {
		t.Errorf("traceback shows the driver's frames:\n%s", tb)
	}
	if res.Stdout != "before\n" {
		t.Errorf("stdout %q, want the output before the exception", res.Stdout)
	}
	res = f.raises("x = (", "SyntaxError", "")
	if !strings.Contains(res.Error.Traceback, `File "<cell-3>", line 1`) || strings.Contains(res.Error.Traceback, "ast.py") {
		t.Errorf("a SyntaxError's traceback shows the parser's frames:\n%s", res.Error.Traceback)
	}
	f.raises("import sys; sys.exit(3)", "SystemExit", "3")
	f.value("kept", "'yes'")
}

func TestTimeoutInterruptsAndKeepsState(t *testing.T) {
	f := newFixture(t, LLM{})
	f.ok("before = 'still here'")
	res := f.exec("n = 0\nwhile True:\n    n += 1", Options{Timeout: time.Second})
	if !res.TimedOut || res.Restarted {
		t.Fatalf("timed_out %v restarted %v, want true and false (message %q)", res.TimedOut, res.Restarted, res.Message)
	}
	if res.Error == nil || res.Error.Name != "KeyboardInterrupt" {
		t.Fatalf("error %+v, want KeyboardInterrupt", res.Error)
	}
	if !strings.Contains(res.Message, "interrupted") || !strings.Contains(res.Message, "kept") {
		t.Errorf("message %q", res.Message)
	}
	f.value("before", "'still here'")
	f.value("n > 0", "True")
	// A blocking call is interrupted too.
	res = f.exec("import time\ntime.sleep(100)", Options{Timeout: time.Second})
	if !res.TimedOut || res.Restarted || res.Error == nil || res.Error.Name != "KeyboardInterrupt" {
		t.Errorf("sleep: %+v", res)
	}
	f.value("before", "'still here'")
}

func TestTimeoutIgnoringInterruptRestarts(t *testing.T) {
	f := newFixture(t, LLM{})
	f.ok("lost = 1")
	res := f.exec("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(100)", Options{Timeout: time.Second})
	if !res.TimedOut || !res.Restarted {
		t.Fatalf("timed_out %v restarted %v, want both (message %q)", res.TimedOut, res.Restarted, res.Message)
	}
	if !strings.Contains(res.Message, "state") || !strings.Contains(res.Message, "lost") {
		t.Errorf("message %q does not say the state was lost", res.Message)
	}
	f.raises("lost", "NameError", "lost")
	if res := f.ok("1 + 1"); res.Value != "2" || res.Restarted {
		t.Errorf("the fresh session: %+v", res)
	}
	// A SIGINT handler a cell left behind does not outlive it.
	f.ok("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)")
	res = f.exec("import time\ntime.sleep(100)", Options{Timeout: time.Second})
	if !res.TimedOut || res.Restarted {
		t.Errorf("after a cell set SIG_IGN: %+v", res)
	}
}

func TestRestartOption(t *testing.T) {
	f := newFixture(t, LLM{})
	f.ok("x = 1")
	f.ok("x += 1")
	res := f.exec("'x' in dir()", Options{Restart: true})
	if !res.Restarted || res.Value != "False" || res.ExecutionCount != 1 {
		t.Errorf("restart: %+v", res)
	}
	if !strings.Contains(res.Message, "restarted as asked") {
		t.Errorf("message %q", res.Message)
	}
	res = f.exec("", Options{Restart: true})
	if !res.Restarted || res.ExecutionCount != 0 {
		t.Errorf("restart without code: %+v", res)
	}
	if n := f.a.StartCount(); n != 3 {
		t.Errorf("%d processes started, want 3", n)
	}
	// The helpers are back after a restart.
	f.value("chunk_indices(3, 2)", "[(0, 2), (2, 3)]")
}

func TestHelpers(t *testing.T) {
	f := newFixture(t, LLM{})
	f.ok("import os\nwith open('data.txt', 'w') as fh:\n    fh.write('alpha\\nbeta\\nGamma\\ndelta\\n' + 'x' * 5000)")
	path := filepath.Join(f.a.Root, "data.txt")

	// peek
	f.value("peek('abcdef', n=3)", "str, 6 chars (first 3 shown):\nabc\n[... 3 more chars]")
	f.value("peek('abc')", "str, 3 chars:\nabc")
	f.value("peek(b'\\x00\\x01xyz', 2)", "bytes, 5 bytes (first 2 shown):\nb'\\x00\\x01'")
	f.value("peek(list(range(1000)), 20)", "list, 1000 items (first 4 shown):\n[0] 0\n[1] 1\n[2] 2\n[3] 3")
	f.value("peek({'a': 1, 'b': [2]})", "dict, 2 items:\n'a': 1\n'b': [2]")
	f.value("peek((1, 'two'))", "tuple, 2 items:\n[0] 1\n[1] 'two'")
	res := f.ok("peek('data.txt', 11)")
	if !strings.HasPrefix(res.Value, "file data.txt, 5023 bytes (first 11 chars shown):\nalpha\nbeta\n") {
		t.Errorf("peek of a file: %q", res.Value)
	}
	f.value("p = peek('x' * 10)\nprint(p)\ntype(p).__mro__[1].__name__", "'str'")
	f.raises("peek('x', n=0)", "ValueError", "peek: n must be >= 1")

	// grep
	f.value("grep('a$', 'alpha\\nbeta\\ngamma')", "[(1, 'alpha'), (2, 'beta'), (3, 'gamma')]")
	f.value("grep('^g', 'alpha\\nbeta\\nGamma\\ndelta', ignore_case=True)", "[(3, 'Gamma')]")
	f.value("grep('^g', 'alpha\\nbeta\\nGamma\\ndelta')", "[]")
	f.value("grep('Gamma', 'data.txt', context=1)", "[(2, 'beta'), (3, 'Gamma'), (4, 'delta')]")
	f.value("grep('Gamma', "+pyQuote(path)+")", "[(3, 'Gamma')]")
	f.value("grep(r'\\d', ['a1', 'b', 'c22'])", "[(1, 'a1'), (3, 'c22')]")
	f.value("import re\ngrep(re.compile('ALPHA'), 'alpha', ignore_case=True)", "[(1, 'alpha')]")
	res = f.ok("print(grep('a', 'a'))")
	if res.Stdout != "[(1, 'a')]\n" {
		t.Errorf("grep printed something itself: %q", res.Stdout)
	}
	f.raises("grep('(', 'text')", "ValueError", "grep: bad regular expression '('")
	f.raises("grep('a', 'a', context=-1)", "ValueError", "grep: context must be >= 0")
	f.raises("grep('a', 42)", "TypeError", "grep: text_or_var must be")

	// chunk_indices
	f.value("chunk_indices(10, 4)", "[(0, 4), (4, 8), (8, 10)]")
	f.value("chunk_indices(10, 4, overlap=1)", "[(0, 4), (3, 7), (6, 10)]")
	f.value("chunk_indices(0, 4)", "[]")
	f.value("chunk_indices(3, 5)", "[(0, 3)]")
	f.value("chunk_indices('abcde', 2)", "[(0, 2), (2, 4), (4, 5)]")
	f.raises("chunk_indices(10, 0)", "ValueError", "chunk_indices: size must be >= 1, got 0")
	f.raises("chunk_indices(10, 4, overlap=4)", "ValueError", "overlap must be smaller than size (4), got 4")
	f.raises("chunk_indices(10, 4, overlap=-1)", "ValueError", "chunk_indices: overlap must be >= 0")
	f.raises("chunk_indices(-1, 4)", "ValueError", "chunk_indices: length must be >= 0")
	f.raises("chunk_indices(10, 2.5)", "TypeError", "chunk_indices: size must be an int")
}

// pyQuote is s as a Python string literal (JSON's escapes are Python's too).
func pyQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestFinal(t *testing.T) {
	f := newFixture(t, LLM{})
	for _, c := range []struct{ code, want string }{
		{"FINAL('the answer')", "the answer"},
		{"FINAL({'a': [1, 2], 'b': None})", `{"a": [1, 2], "b": null}`},
		{"FINAL(42)", "42"},
		{"FINAL('first')\nFINAL('second')", "second"},
		{"FINAL('')", ""},
	} {
		res := f.ok(c.code)
		if res.Final == nil || *res.Final != c.want {
			t.Errorf("Execute(%q).Final = %v, want %q", c.code, res.Final, c.want)
		}
		if res.Value != "" {
			t.Errorf("Execute(%q).Value = %q, want none", c.code, res.Value)
		}
	}
	if res := f.ok("FINAL({1, 2})"); res.Final == nil || *res.Final != "{1, 2}" {
		t.Errorf("FINAL of a set (not JSON) = %v, want its repr", res.Final)
	}
	if res := f.ok("1"); res.Final != nil {
		t.Errorf("a cell without FINAL carries final %q", *res.Final)
	}
}

// fakeModel is an OpenAI-compatible endpoint that records what it is asked.
type fakeModel struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []chatRequest
	auth  []string
}

func newFakeModel(t *testing.T) *fakeModel {
	m := &fakeModel{}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req chatRequest
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" || json.Unmarshal(body, &req) != nil {
			http.Error(w, "bad request: "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		m.calls = append(m.calls, req)
		m.auth = append(m.auth, r.Header.Get("Authorization"))
		m.mu.Unlock()
		prompt := req.Messages[len(req.Messages)-1].Content
		if prompt == "fail" {
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error": {"message": "rate limited"}}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{
			"message": map[string]any{"role": "assistant", "content": "echo: " + prompt}}}})
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *fakeModel) requests() ([]chatRequest, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]chatRequest(nil), m.calls...), append([]string(nil), m.auth...)
}

func TestLLMQuery(t *testing.T) {
	model := newFakeModel(t)
	f := newFixture(t, LLM{URL: model.srv.URL + "/v1/", Model: "test-model", APIKey: "sk-test"})
	res := f.ok("reply = llm_query('what is 2+2?', system='be brief')\nprint('got it')\nreply")
	if res.Value != "'echo: what is 2+2?'" || res.Stdout != "got it\n" {
		t.Errorf("value %q stdout %q", res.Value, res.Stdout)
	}
	f.value("llm_query('again')", "'echo: again'")
	calls, auth := model.requests()
	if len(calls) != 2 {
		t.Fatalf("%d calls reached the model, want 2", len(calls))
	}
	want := chatRequest{Model: "test-model", Messages: []chatMessage{{"system", "be brief"}, {"user", "what is 2+2?"}}}
	if got, _ := json.Marshal(calls[0]); string(got) != string(must(json.Marshal(want))) {
		t.Errorf("request body %s, want %s", got, must(json.Marshal(want)))
	}
	if len(calls[1].Messages) != 1 || calls[1].Messages[0] != (chatMessage{"user", "again"}) {
		t.Errorf("without system: %+v", calls[1].Messages)
	}
	if auth[0] != "Bearer sk-test" {
		t.Errorf("Authorization %q", auth[0])
	}
	f.raises("llm_query('fail')", "RuntimeError", "llm_query: the model endpoint answered 429 Too Many Requests: rate limited")
	f.raises("llm_query(42)", "TypeError", "llm_query: prompt must be a str")
	res = f.ok("import threading\nout = []\n" +
		"def call():\n    try:\n        llm_query('x')\n    except RuntimeError as e:\n        out.append(str(e))\n" +
		"t = threading.Thread(target=call); t.start(); t.join()\nout[-1]")
	if !strings.Contains(res.Value, "not from a thread") {
		t.Errorf("llm_query from a thread: %q", res.Value)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestLLMQueryNotConfigured(t *testing.T) {
	f := newFixture(t, LLM{})
	res := f.raises("llm_query('hello')", "RuntimeError", "llm_query: no model endpoint is configured on the sbx daemon (set [llm] url in its config)")
	if !strings.Contains(res.Error.Traceback, "<cell-1>") {
		t.Errorf("traceback %q", res.Error.Traceback)
	}
	f.value("1", "1")
}

func TestLLMQueryPastTimeoutIsInterrupted(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The server sees the client go only once the body was read.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(callTimeout):
		}
	}))
	t.Cleanup(slow.Close)
	f := newFixture(t, LLM{URL: slow.URL})
	f.ok("kept = 1")
	res := f.exec("llm_query('slow')", Options{Timeout: time.Second})
	if !res.TimedOut || res.Restarted || res.Error == nil || res.Error.Name != "KeyboardInterrupt" {
		t.Errorf("%+v", res)
	}
	f.value("kept", "1")
}

func TestMatplotlibFigures(t *testing.T) {
	if err := exec.Command(testPython(), "-c", "import matplotlib").Run(); err != nil {
		t.Skipf("matplotlib is not importable by %s: apt-get install python3-matplotlib", testPython())
	}
	f := newFixture(t, LLM{})
	res := f.ok("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.title('t')\nplt.show()")
	if len(res.Images) != 1 {
		t.Fatalf("%d images, want 1 (stderr %q)", len(res.Images), res.Stderr)
	}
	png, err := base64.StdEncoding.DecodeString(res.Images[0].PNG)
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG\r\n\x1a\n") {
		t.Errorf("not a base64 PNG (%v): %.40q", err, res.Images[0].PNG)
	}
	if !strings.Contains(res.Images[0].SVG, "<svg") {
		t.Errorf("not an SVG: %.80q", res.Images[0].SVG)
	}
	if res.Stderr != "" {
		t.Errorf("stderr %q, want nothing (plt.show() on Agg warns)", res.Stderr)
	}
	// The figures were closed: the next cell has none of its own.
	if res := f.ok("plt.get_fignums()"); res.Value != "[]" || len(res.Images) != 0 {
		t.Errorf("after: value %q, %d images", res.Value, len(res.Images))
	}
	res = f.ok("fig, ax = plt.subplots(); ax.bar([1], [2]); fig2 = plt.figure(); 'two'")
	if len(res.Images) != 2 || res.Value != "'two'" {
		t.Errorf("two figures: %d images, value %q", len(res.Images), res.Value)
	}
	// A figure of a cell that raised is still shown.
	res = f.raises("plt.plot([1]); 1/0", "ZeroDivisionError", "")
	if len(res.Images) != 1 {
		t.Errorf("a cell that raised: %d images, want 1", len(res.Images))
	}
}

func TestHugeOutputIsTruncated(t *testing.T) {
	f := newFixture(t, LLM{})
	res := f.ok("print('START' + 'x' * 3_000_000 + 'END')\nimport os\nos.system('head -c 3000000 /dev/zero | tr \"\\\\0\" y >&2')\n'done'")
	if !res.Truncated || res.Value != "'done'" {
		t.Fatalf("truncated %v value %q", res.Truncated, res.Value)
	}
	if !strings.HasPrefix(res.Stdout, "STARTxxx") || !strings.HasSuffix(res.Stdout, "xxxEND\n") {
		t.Errorf("stdout does not keep head and tail: %.20q ... %q", res.Stdout, res.Stdout[max(0, len(res.Stdout)-20):])
	}
	if !strings.Contains(res.Stdout, "[sbx: output truncated: ") || len(res.Stdout) > 1<<20+200 {
		t.Errorf("stdout: %d bytes, notice present %v", len(res.Stdout), strings.Contains(res.Stdout, "output truncated"))
	}
	if !strings.Contains(res.Stderr, "[sbx: output truncated: ") || len(res.Stderr) > 1<<20+200 || !strings.HasSuffix(res.Stderr, "yyy") {
		t.Errorf("stderr: %d bytes, ends %q", len(res.Stderr), res.Stderr[max(0, len(res.Stderr)-20):])
	}
	// A huge value is cut too.
	res = f.ok("'v' * 1_000_000")
	if !res.Truncated || len(res.Value) > 110_000 || !strings.Contains(res.Value, "characters of this value omitted") {
		t.Errorf("value: truncated %v, %d chars", res.Truncated, len(res.Value))
	}
	if res := f.ok("print('small')"); res.Truncated {
		t.Errorf("a small output is marked truncated")
	}
}

func TestNoPython(t *testing.T) {
	for _, startFails := range []bool{false, true} {
		t.Run(map[bool]string{false: "exits", true: "start-fails"}[startFails], func(t *testing.T) {
			f := newFixture(t, LLM{})
			f.a.Python, f.a.StartFails = "", startFails
			_, err := f.s.Execute(context.Background(), f.id, f.a, "1", Options{})
			if !errors.Is(err, ErrNoPython) || err.Error() != "repl_execute: python3 is not installed in this sandbox" {
				t.Errorf("error %v, want ErrNoPython", err)
			}
		})
	}
}

func TestDriverThatCannotStart(t *testing.T) {
	for _, c := range []struct{ name, script, want string }{
		{"old-python", `printf '\036sbx-repl {"type":"fatal","message":"the REPL needs Python 3.9 or newer; python3 in this sandbox is 3.8.10"}\n'`,
			"repl_execute: the REPL needs Python 3.9 or newer; python3 in this sandbox is 3.8.10"},
		{"crash", `echo "boom: no such module" >&2; exit 1`,
			"repl_execute: python3 exited before the REPL driver was ready; its last output: boom: no such module"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, LLM{})
			f.a.Python = filepath.Join(t.TempDir(), "python3")
			if err := os.WriteFile(f.a.Python, []byte("#!/bin/sh\n"+c.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := f.s.Execute(context.Background(), f.id, f.a, "1", Options{})
			if err == nil || err.Error() != c.want {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestResyncAfterDaemonRestart(t *testing.T) {
	f := newFixture(t, LLM{})
	f.ok("x = 5")
	f.ok("print('noise ' * 100)")
	// A new daemon knows nothing but the tag.
	f.s = NewSessions(LLM{})
	res := f.ok("x * 2")
	if res.Value != "10" || res.Restarted || res.ExecutionCount != 3 {
		t.Errorf("after a daemon restart: %+v", res)
	}
	if n := f.a.StartCount(); n != 1 {
		t.Errorf("%d processes started, want 1", n)
	}
}

func TestResyncWhileACellWaitsForTheModel(t *testing.T) {
	model := newFakeModel(t)
	f := newFixture(t, LLM{})
	f.ok("x = 1")
	// The old daemon sent a cell, which asked the model, and died.
	id, ok, err := f.a.Find(context.Background(), Tag)
	if err != nil || !ok {
		t.Fatalf("Find: %v %v", ok, err)
	}
	orphan := `{"type": "execute", "id": "orphan", "code": "y = llm_query('from before')"}` + "\n"
	if err := f.a.WriteStdin(context.Background(), id, []byte(orphan)); err != nil {
		t.Fatal(err)
	}
	f.s = NewSessions(LLM{URL: model.srv.URL + "/v1", Model: "m"})
	res := f.ok("x, y")
	if res.Value != "(1, 'echo: from before')" || res.Restarted {
		t.Errorf("%+v", res)
	}
	if calls, _ := model.requests(); len(calls) != 1 {
		t.Errorf("the model was asked %d times, want once", len(calls))
	}
}

func TestProcessExitDuringCell(t *testing.T) {
	f := newFixture(t, LLM{})
	f.ok("x = 1")
	res := f.exec("import os\nos._exit(3)", Options{})
	if !res.Restarted || res.Error == nil || res.Error.Name != "SessionExited" || !strings.Contains(res.Message, "lost") {
		t.Errorf("%+v", res)
	}
	f.raises("x", "NameError", "")
}

func TestProcessGoneBetweenCalls(t *testing.T) {
	f := newFixture(t, LLM{})
	f.ok("x = 1")
	id, _, _ := f.a.Find(context.Background(), Tag)
	if err := f.a.Signal(context.Background(), id, 9); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(callTimeout)
	for _, ok, _ := f.a.Find(context.Background(), Tag); ok && time.Now().Before(deadline); _, ok, _ = f.a.Find(context.Background(), Tag) {
		time.Sleep(10 * time.Millisecond)
	}
	res := f.exec("'x' in dir()", Options{})
	if !res.Restarted || res.Value != "False" || !strings.Contains(res.Message, "had exited since the previous call") {
		t.Errorf("%+v", res)
	}
}

func TestCancelledCallInterruptsTheCell(t *testing.T) {
	f := newFixture(t, LLM{})
	f.ok("x = 1")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // once the cell runs
		started := filepath.Join(f.a.Root, "started")
		for _, err := os.Stat(started); err != nil && ctx.Err() == nil; _, err = os.Stat(started) {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	code := "import time\nopen('started', 'w').close()\ntime.sleep(100)"
	if _, err := f.s.Execute(ctx, f.id, f.a, code, Options{Timeout: callTimeout}); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	res := f.ok("x + 1")
	if res.Value != "2" || res.Restarted {
		t.Errorf("after a cancelled call: %+v", res)
	}
}

func TestCallsOnOneSandboxAreSerialised(t *testing.T) {
	f := newFixture(t, LLM{})
	f.ok("log = []")
	var wg sync.WaitGroup
	counts := make(chan int, 4)
	for i := range 4 {
		wg.Go(func() {
			res, err := f.s.Execute(context.Background(), f.id, f.a, "import time\nlog.append(1)\ntime.sleep(0.05)\nlog.append(2)", Options{})
			if err != nil || res.Error != nil {
				t.Errorf("call %d: %v %+v", i, err, res.Error)
			}
			counts <- res.ExecutionCount
		})
	}
	wg.Wait()
	close(counts)
	seen := map[int]bool{}
	for n := range counts {
		seen[n] = true
	}
	if len(seen) != 4 {
		t.Errorf("execution counts %v, want 4 distinct", seen)
	}
	f.value("log == [1, 2] * 4", "True")
	// Another sandbox has a session of its own.
	other := &fixture{t: t, s: f.s, a: replagent.NewLocalAgent(t), id: "other"}
	other.raises("log", "NameError", "")
	f.s.Forget("other")
}
