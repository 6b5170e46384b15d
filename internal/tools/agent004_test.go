package tools

import (
	"encoding/json"
	"errors"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sbx.dev/sbx/internal/sandbox"
)

// Each tool's input schema names exactly its argument struct's fields, and
// both schemas are JSON objects a transport can serve.
func TestSeed004Schemas(t *testing.T) {
	for _, tool := range slices.Concat(seed004Tools(), bslTools()) {
		t.Run(tool.Name, func(t *testing.T) {
			var in struct {
				Type                 string                     `json:"type"`
				Properties           map[string]json.RawMessage `json:"properties"`
				Required             []string                   `json:"required"`
				AdditionalProperties *bool                      `json:"additionalProperties"`
			}
			if err := json.Unmarshal(tool.Input, &in); err != nil {
				t.Fatalf("input schema: %v", err)
			}
			if in.Type != "object" || in.AdditionalProperties == nil || *in.AdditionalProperties {
				t.Errorf("input schema: type %q, additionalProperties %v; want an object with no other properties", in.Type, in.AdditionalProperties)
			}
			var fields []string
			for i := 0; i < tool.in.NumField(); i++ {
				fields = append(fields, jsonName(tool.in.Field(i)))
			}
			var props []string
			for k, v := range in.Properties {
				props = append(props, k)
				var p struct {
					Description string `json:"description"`
				}
				json.Unmarshal(v, &p)
				if p.Description == "" {
					t.Errorf("parameter %s has no description", k)
				}
			}
			slices.Sort(fields)
			slices.Sort(props)
			if !slices.Equal(fields, props) {
				t.Errorf("schema properties %v, struct fields %v", props, fields)
			}
			for _, r := range in.Required {
				if !slices.Contains(props, r) {
					t.Errorf("required %q is no property", r)
				}
			}
			var out map[string]any
			if err := json.Unmarshal(tool.Output, &out); err != nil || out["type"] != "object" {
				t.Errorf("output schema: %v (type %v)", err, out["type"])
			}
			if len(tool.Description) < 200 || tool.Title == "" || tool.Capability == "" {
				t.Errorf("title %q, capability %q, description of %d bytes", tool.Title, tool.Capability, len(tool.Description))
			}
		})
	}
}

func TestSeed004Capabilities(t *testing.T) {
	want := map[string]string{
		"file_read": CapFiles, "file_write": CapFiles, "file_delete": CapFiles, "file_list": CapFiles, "file_search": CapFiles,
		"shell_exec": CapShell, "process_list": CapShell,
		"git_clone": CapGit, "git_commit": CapGit, "git_push": CapGit, "git_status": CapGit,
		"python_exec": CapPython, "pip_install": CapPython,
		"http_request": CapWeb, "browser_open": CapWeb,
		"env_get": CapEnv, "env_set": CapEnv,
		"bsl_check": CapLint,
	}
	got := map[string]string{}
	for _, tool := range slices.Concat(seed004Tools(), bslTools()) {
		got[tool.Name] = tool.Capability
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tools and capabilities:\n got %v\nwant %v", got, want)
	}
	New(nil, Options{}) // no name is taken twice (New panics)
}

func TestParsePS(t *testing.T) {
	out := "    1     0 root                             Ss         95  4096 /sbx-agent --serve\n" +
		"   42     1 root                             S       90061   980 sleep 300\n" +
		"  107    42 nobody                           R+          5  1200 python3 -c print('a  b')\n" +
		"  108     1 root                             S  4123168608   900 sleep 4004\n" + // just started: ps underflowed
		"garbage line\n"
	want := []processEntry{
		{PID: 1, PPID: 0, User: "root", State: "Ss", ElapsedSeconds: 95, Elapsed: "01:35", RSSKB: 4096, Command: "/sbx-agent --serve"},
		{PID: 42, PPID: 1, User: "root", State: "S", ElapsedSeconds: 90061, Elapsed: "1-01:01:01", RSSKB: 980, Command: "sleep 300"},
		{PID: 107, PPID: 42, User: "nobody", State: "R+", ElapsedSeconds: 5, Elapsed: "00:05", RSSKB: 1200, Command: "python3 -c print('a  b')"},
		{PID: 108, PPID: 1, User: "root", State: "S", ElapsedSeconds: 0, Elapsed: "00:00", RSSKB: 900, Command: "sleep 4004"},
	}
	if got := parsePS(out); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if got := formatElapsed(3725); got != "01:02:05" {
		t.Errorf("formatElapsed(3725) = %q", got)
	}
}

func TestParsePipOutput(t *testing.T) {
	out := "Looking in links: /tmp/wheels\nProcessing /tmp/wheels/sbxdemo-1.2.0-py3-none-any.whl\n" +
		"Requirement already satisfied: six in /usr/lib/python3/dist-packages (1.16.0)\n" +
		"Installing collected packages: sbxdemo, typing-extensions\n" +
		"Successfully installed sbxdemo-1.2.0 typing-extensions-4.12.2\n"
	inst, sat := parsePipOutput(out)
	if want := []pipPackage{{"sbxdemo", "1.2.0"}, {"typing-extensions", "4.12.2"}}; !reflect.DeepEqual(inst, want) {
		t.Errorf("installed = %v, want %v", inst, want)
	}
	if !reflect.DeepEqual(sat, []string{"six"}) {
		t.Errorf("already satisfied = %v", sat)
	}
	if e := pipErrors("Collecting x\nWARNING: Retrying\nERROR: No matching distribution found for x\n"); e != "WARNING: Retrying\nERROR: No matching distribution found for x" {
		t.Errorf("pipErrors = %q", e)
	}
	for _, bad := range []string{"", "-e", "--index-url=http://x", "a\nb"} {
		if pipRequirement(bad) == nil {
			t.Errorf("pipRequirement(%q) = nil", bad)
		}
	}
}

// The profile script, run by a real shell, exports every value as it was
// given, quotes and all.
func TestProfileScript(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	env := map[string]string{"A": "it's $HOME `x` \"q\" \\n", "B_2": "", "C": "line1\nline2"}
	script := profileScript(env) + `printf '%s\0%s\0%s' "$A" "$B_2" "$C"`
	out, err := exec.Command("sh", "-c", script).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(string(out), "\x00"); !reflect.DeepEqual(got, []string{env["A"], env["B_2"], env["C"]}) {
		t.Errorf("got %q", got)
	}
}

func TestSandboxPath(t *testing.T) {
	for in, want := range map[string]string{"app.py": "/workspace/app.py", "/etc/../etc/x": "/etc/x", "a/../../b": "/b", ".": "/workspace"} {
		if got, err := sandboxPath("file", in); err != nil || got != want {
			t.Errorf("sandboxPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "  ", "a\x00b"} {
		if _, err := sandboxPath("file", bad); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "file:") {
			t.Errorf("sandboxPath(%q): %v", bad, err)
		}
	}
}
