package repl

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// output records what OnOutput was given.
type output struct {
	mu     sync.Mutex
	chunks []chunk
}

type chunk struct{ stream, text string }

func (o *output) add(stream, text string) {
	o.mu.Lock()
	o.chunks = append(o.chunks, chunk{stream, text})
	o.mu.Unlock()
}

func (o *output) text(stream string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var b strings.Builder
	for _, c := range o.chunks {
		if c.stream == stream {
			b.WriteString(c.text)
		}
	}
	return b.String()
}

// The cell goes on only once the test has seen its first line through
// OnOutput: output that came only with the result would leave it waiting.
func TestOutputIsStreamedWhileTheCellRuns(t *testing.T) {
	f := newFixture(t, LLM{})
	gate := filepath.Join(f.a.Root, "gate")
	var out output
	opened := false
	onOutput := func(stream, text string) {
		out.add(stream, text)
		if !opened && strings.Contains(out.text("stdout"), "first\n") {
			opened = true
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	code := `import os, sys, time
print("first")
deadline = time.time() + 30
while not os.path.exists("gate") and time.time() < deadline:
    time.sleep(0.01)
print("saw the gate" if os.path.exists("gate") else "no gate")
print("to stderr", file=sys.stderr)
os.system("echo from a child")
"héllo wörld ✓"`
	res := f.exec(code, Options{OnOutput: onOutput})
	if res.Error != nil {
		t.Fatalf("raised %+v", res.Error)
	}
	want := "first\nsaw the gate\nfrom a child\n"
	if got := out.text("stdout"); got != want {
		t.Errorf("streamed stdout %q, want %q", got, want)
	}
	if got := out.text("stderr"); got != "to stderr\n" {
		t.Errorf("streamed stderr %q", got)
	}
	// The result still holds all of it.
	if res.Stdout != want || res.Stderr != "to stderr\n" || res.Value != "'héllo wörld ✓'" {
		t.Errorf("result stdout %q stderr %q value %q", res.Stdout, res.Stderr, res.Value)
	}
	// Without OnOutput nothing is streamed, and the next streamed cell gets
	// only its own output.
	f.ok("print('quiet')")
	var next output
	f.exec("print('é' * 3000)", Options{OnOutput: next.add})
	if got := next.text("stdout"); got != strings.Repeat("é", 3000)+"\n" {
		t.Errorf("a multibyte stream came out as %d bytes, not whole characters: %.40q", len(got), got)
	}
}

func TestStreamedOutputIsCapped(t *testing.T) {
	f := newFixture(t, LLM{})
	var out output
	res := f.exec("import sys\nfor _ in range(9):\n    sys.stdout.write('x' * (1 << 20))\nprint('end')", Options{OnOutput: out.add})
	got := out.text("stdout")
	if !strings.HasPrefix(got, strings.Repeat("x", 8<<20)) ||
		!strings.Contains(got, "[sbx: 1048580 more bytes of this cell's stdout were not streamed") {
		t.Errorf("streamed %d bytes, ending %q", len(got), got[max(0, len(got)-200):])
	}
	if !res.Truncated || !strings.HasSuffix(res.Stdout, "xxxend\n") {
		t.Errorf("result: truncated %v, stdout ends %q", res.Truncated, res.Stdout[max(0, len(res.Stdout)-20):])
	}
}

func TestEnvIsPerCell(t *testing.T) {
	f := newFixture(t, LLM{})
	f.ok("import os, subprocess\nos.environ['SBX_TEST_KEPT'] = 'set by a cell'")
	res := f.exec(`print(os.environ.get('SBX_TEST_A'), os.environ['SBX_TEST_KEPT'])
print(subprocess.run(['sh', '-c', 'echo "$SBX_TEST_A"'], capture_output=True, text=True).stdout, end='')`,
		Options{Env: map[string]string{"SBX_TEST_A": "one", "SBX_TEST_KEPT": "for this cell"}})
	if res.Error != nil || res.Stdout != "one for this cell\none\n" {
		t.Errorf("with env: stdout %q, error %+v", res.Stdout, res.Error)
	}
	f.value("os.environ.get('SBX_TEST_A'), os.environ['SBX_TEST_KEPT']", "(None, 'set by a cell')")
	// Restored after an exception too.
	res = f.exec("raise ValueError(os.environ['SBX_TEST_A'])", Options{Env: map[string]string{"SBX_TEST_A": "two"}})
	if res.Error == nil || res.Error.Value != "two" {
		t.Errorf("error %+v", res.Error)
	}
	f.value("'SBX_TEST_A' in os.environ", "False")
	// A name the OS cannot take fails the call, not the session.
	ctx := context.Background()
	if _, err := f.s.Execute(ctx, f.id, f.a, "1", Options{Env: map[string]string{"A=B": "x"}}); err == nil ||
		!strings.Contains(err.Error(), "env: bad variable name 'A=B'") {
		t.Errorf("a bad name: %v", err)
	}
	f.value("os.environ['SBX_TEST_KEPT']", "'set by a cell'")
}

func bundleText(t *testing.T, b Bundle, mime string) string {
	t.Helper()
	var s string
	if raw, ok := b[mime]; ok {
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Errorf("%s is not a string: %s", mime, raw)
		}
	}
	return s
}

func TestRichRepresentations(t *testing.T) {
	f := newFixture(t, LLM{})
	f.ok(`class Rich:
    def __repr__(self): return 'Rich()'
    def _repr_html_(self): return '<b>rich</b>'
    def _repr_markdown_(self): return '**rich**'
    def _repr_latex_(self): return r'$\alpha$'
    def _repr_json_(self): return {'k': [1, 2]}
    def _repr_png_(self): return b'\x89PNG fake'
    def _repr_svg_(self): return None  # no such representation

class Bundled:
    def _repr_mimebundle_(self, include=None, exclude=None):
        return {'text/html': '<i>b</i>', 'application/vnd.custom+json': {'x': 1}}, {}

class Broken:
    def _repr_html_(self): raise RuntimeError('no html')

class Anything:  # makes up every attribute, as some proxies do
    def __getattr__(self, name): return lambda *a, **k: 'made up'
`)
	res := f.exec("display(Bundled(), Broken())\ndisplay(Anything())\nRich()", Options{Rich: true})
	if res.Error != nil {
		t.Fatalf("raised %+v", res.Error)
	}
	d := res.Data
	if bundleText(t, d, "text/plain") != "Rich()" || bundleText(t, d, "text/html") != "<b>rich</b>" ||
		bundleText(t, d, "text/markdown") != "**rich**" || bundleText(t, d, "text/latex") != `$\alpha$` ||
		string(d["application/json"]) != `{"k":[1,2]}` || bundleText(t, d, "image/png") != base64.StdEncoding.EncodeToString([]byte("\x89PNG fake")) {
		t.Errorf("value bundle %v", d)
	}
	if _, ok := d["image/svg+xml"]; ok || res.Value != "Rich()" {
		t.Errorf("svg present %v, value %q", ok, res.Value)
	}
	if len(res.Displays) != 3 {
		t.Fatalf("%d displays, want 3: %v", len(res.Displays), res.Displays)
	}
	if b := res.Displays[0]; bundleText(t, b, "text/html") != "<i>b</i>" || string(b["application/vnd.custom+json"]) != `{"x":1}` {
		t.Errorf("mimebundle display %v", b)
	}
	if b := res.Displays[1]; len(b) != 1 || !strings.HasPrefix(bundleText(t, b, "text/plain"), "<__main__.Broken object") {
		t.Errorf("broken display %v", b)
	}
	if !strings.Contains(res.Stderr, "[sbx: Broken._repr_html_ failed: RuntimeError: no html]") {
		t.Errorf("stderr %q", res.Stderr)
	}
	if b := res.Displays[2]; len(b) != 1 {
		t.Errorf("an object that makes up attributes has representations %v", b)
	}
	// Without Rich: display prints, and no bundle comes back.
	res = f.ok("display(Rich())\nRich()")
	if res.Stdout != "Rich()\n" || res.Data != nil || res.Displays != nil || res.Value != "Rich()" {
		t.Errorf("plain: %+v", res)
	}
}

func TestRichFigures(t *testing.T) {
	if err := exec.Command(testPython(), "-c", "import matplotlib").Run(); err != nil {
		t.Skipf("matplotlib is not importable by %s: apt-get install python3-matplotlib", testPython())
	}
	f := newFixture(t, LLM{})
	res := f.exec("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n42", Options{Rich: true})
	if res.Error != nil || len(res.Images) != 0 || len(res.Displays) != 1 {
		t.Fatalf("error %+v, %d images, %d displays", res.Error, len(res.Images), len(res.Displays))
	}
	fig := res.Displays[0]
	png, err := base64.StdEncoding.DecodeString(bundleText(t, fig, "image/png"))
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG\r\n\x1a\n") {
		t.Errorf("not a base64 PNG (%v)", err)
	}
	if !strings.Contains(bundleText(t, fig, "image/svg+xml"), "<svg") || bundleText(t, fig, "text/plain") != "<Figure size 640x480 with 1 Axes>" {
		t.Errorf("figure bundle: text %q", bundleText(t, fig, "text/plain"))
	}
	if bundleText(t, res.Data, "text/plain") != "42" {
		t.Errorf("value bundle %v", res.Data)
	}
}
