package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/api/openapi"
)

const (
	id1 = "aaaaaaaaaaaaaaaaaaaaaaaaaa"
	id2 = "bbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// daemon is a stand-in for the API: the few routes the CLI calls.
type daemon struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	created  []openapi.CreateSandboxRequest
	execs    []openapi.ExecRequest
	deleted  []string
	files    map[string][]byte
	result   openapi.ExecResult // what exec ends with
	local    bool               // sandboxes are on the local backend
	execFail bool               // exec answers 404 for a missing command
	dropped  int64              // exec reports this many bytes of stdout dropped
}

func newDaemon(t *testing.T) *daemon {
	d := &daemon{t: t, files: map[string][]byte{}, result: openapi.ExecResult{ProcessID: "p1", PID: 9, Reason: "exited"}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", d.create)
	mux.HandleFunc("GET /v1/sandboxes", d.list)
	mux.HandleFunc("GET /v1/sandboxes/{id}", d.get)
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", d.delete)
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", d.exec)
	mux.HandleFunc("PUT /v1/sandboxes/{id}/files/upload", d.upload)
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/download", d.download)
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer key" {
			apiError(w, 401, "unauthenticated", "", "unauthenticated: invalid API key")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func apiError(w http.ResponseWriter, status int, code, id, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(openapi.ErrorBody{Error: openapi.ErrorDetail{Code: code, Message: msg, SandboxID: id}})
}

func (d *daemon) sandbox(id string) openapi.Sandbox {
	sb := openapi.Sandbox{ID: id, State: "running", Backend: "native", CreatedAt: time.Now(), ExpiresAt: time.Now().Add(5 * time.Minute),
		Labels: map[string]string{"a": "1"}, Isolation: openapi.Isolation{Backend: "native", Level: "native", Sandbox: true, Layers: map[string]string{"pidns": "applied"}}}
	if d.local {
		sb.Backend = "local"
		sb.Isolation = openapi.Isolation{Backend: "local", Level: "none", Warning: "local backend: not a sandbox"}
	}
	return sb
}

func known(id string) bool { return id == id1 || id == id2 }

func (d *daemon) create(w http.ResponseWriter, r *http.Request) {
	var req openapi.CreateSandboxRequest
	json.NewDecoder(r.Body).Decode(&req)
	if req.Timeout != nil && *req.Timeout == 0 {
		apiError(w, 400, "invalid_argument", "", "create: invalid argument: timeout: 0 s is below 1 s")
		return
	}
	d.mu.Lock()
	d.created = append(d.created, req)
	d.mu.Unlock()
	w.WriteHeader(201)
	json.NewEncoder(w).Encode(d.sandbox(id1))
}

func (d *daemon) list(w http.ResponseWriter, r *http.Request) {
	json.NewEncoder(w).Encode(openapi.SandboxList{Sandboxes: []openapi.Sandbox{d.sandbox(id1)}})
}

func (d *daemon) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !known(id) {
		apiError(w, 404, "not_found", id, "get "+id+": sandbox not found")
		return
	}
	json.NewEncoder(w).Encode(d.sandbox(id))
}

func (d *daemon) delete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !known(id) {
		apiError(w, 404, "not_found", id, "delete "+id+": sandbox not found")
		return
	}
	d.mu.Lock()
	d.deleted = append(d.deleted, id)
	d.mu.Unlock()
	w.WriteHeader(204)
}

func (d *daemon) exec(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !known(id) {
		apiError(w, 404, "not_found", id, "exec "+id+": sandbox not found")
		return
	}
	var req openapi.ExecRequest
	json.NewDecoder(r.Body).Decode(&req)
	d.mu.Lock()
	d.execs = append(d.execs, req)
	d.mu.Unlock()
	if d.execFail {
		apiError(w, 404, "not_found", id, "exec "+id+": executable "+req.Argv[0]+" not found")
		return
	}
	if r.Header.Get("Accept") != openapi.FramesMediaType {
		d.t.Errorf("exec with Accept %q, want %s", r.Header.Get("Accept"), openapi.FramesMediaType)
	}
	// The frames of openapi.FramesMediaType, as the daemon writes them.
	w.Header().Set("Content-Type", openapi.FramesMediaType)
	frame := func(kind byte, payload []byte) {
		h := make([]byte, 8)
		h[0] = kind
		binary.BigEndian.PutUint32(h[4:], uint32(len(payload)))
		w.Write(append(h, payload...))
	}
	event := func(ev openapi.Event) {
		b, _ := ev.MarshalJSON()
		frame(openapi.FrameEvent, b)
	}
	event(openapi.Event{Type: "started", ProcessID: "p1", PID: 9})
	frame(openapi.FrameStdout, []byte("out:"+strings.Join(req.Argv, "|")+"\n"))
	frame(openapi.FrameStderr, []byte{0xff})
	if req.StdinBase64 != nil {
		b, _ := base64.StdEncoding.DecodeString(*req.StdinBase64)
		frame(openapi.FrameStdout, b)
	}
	if d.dropped > 0 {
		event(openapi.Event{Type: "dropped", Stream: "stdout", Bytes: d.dropped})
	}
	res := d.result
	event(openapi.Event{Type: "result", Result: &res})
}

func (d *daemon) upload(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	p := r.URL.Query().Get("path")
	d.mu.Lock()
	d.files[p] = b
	d.mu.Unlock()
	json.NewEncoder(w).Encode(openapi.FileInfo{Path: p, Type: "file", Size: int64(len(b)), Mode: r.URL.Query().Get("mode")})
}

func (d *daemon) download(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	b, ok := d.files[r.URL.Query().Get("path")]
	d.mu.Unlock()
	if !ok {
		apiError(w, 404, "not_found", r.PathValue("id"), "download: no such file")
		return
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.Write(b)
}

// sbx runs the CLI against d with stdin; it returns stdout, stderr and the code.
func (d *daemon) sbx(stdin string, args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut, euid: 1000,
		getenv: func(k string) string {
			return map[string]string{"SBX_URL": d.srv.URL, "SBX_API_KEY": "key", "HOME": "/nonexistent"}[k]
		}}
	code := e.run(context.Background(), args)
	return out.String(), errOut.String(), code
}

func TestUsage(t *testing.T) {
	d := newDaemon(t)
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{nil, 0, "usage: sbx", ""},
		{[]string{"help"}, 0, "usage: sbx", ""},
		{[]string{"frob"}, 2, "", "unknown command"},
		{[]string{"create", "--frob"}, 2, "", "flag provided but not defined"},
		{[]string{"create", "-h"}, 0, "--memory-mb", ""},
		{[]string{"help", "exec"}, 0, "ID -- CMD", ""},
		{[]string{"get"}, 2, "", "missing sandbox ID"},
		{[]string{"rm"}, 2, "", "missing sandbox ID"},
		{[]string{"cp", "a", "b"}, 2, "", "neither SRC nor DST"},
		{[]string{"exec", id1}, 125, "", "missing command"},
		{[]string{"exec"}, 125, "", "missing sandbox ID"},
		{[]string{"exec", "--frob", id1, "--", "true"}, 125, "", "flag provided but not defined"},
		{[]string{"create", "--network", "wide"}, 2, "", "--network"},
		{[]string{"create", "--label", "novalue"}, 2, "", "key=value"},
	} {
		out, errOut, code := d.sbx("", tc.args...)
		if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("sbx %v = %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, code, out, errOut, tc.code, tc.stdout, tc.stderr)
		}
	}
}

func TestCreate(t *testing.T) {
	d := newDaemon(t)
	out, errOut, code := d.sbx("", "create", "--timeout", "300", "--memory-mb", "256", "--cpus", "0.5", "--pids", "64", "--label", "suite=e2e", "--label", "b=2", "--network", "none")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || lines[len(lines)-1] != id1 || errOut != "" {
		t.Fatalf("create = %d %q %q", code, out, errOut)
	}
	req := d.created[0]
	if *req.Timeout != 300 || *req.MemoryMB != 256 || *req.CPUs != 0.5 || *req.Pids != 64 || req.DiskMB != nil ||
		req.Labels["suite"] != "e2e" || req.Labels["b"] != "2" || req.Network == nil || req.Network.Mode != "none" {
		t.Errorf("create request = %+v", req)
	}
	// The tier's lists, repeatable; --allow alone means allowlist.
	d.sbx("", "create", "--allow", "pypi.org", "--allow", "10.1.0.0/16", "--block", "evil.example")
	if n := d.created[len(d.created)-1].Network; n == nil || n.Mode != "allowlist" ||
		strings.Join(n.Allow, " ") != "pypi.org 10.1.0.0/16" || strings.Join(n.Block, " ") != "evil.example" {
		t.Errorf("create --allow --block: network = %+v", n)
	}
	// Only the flags given are sent: an explicit 0 reaches the daemon, which refuses it.
	out, errOut, code = d.sbx("", "create", "--timeout", "0")
	if code != 1 || out != "" || errOut != "sbx create: create: invalid argument: timeout: 0 s is below 1 s\n" {
		t.Errorf("create --timeout 0 = %d %q %q", code, out, errOut)
	}
	out, errOut, code = d.sbx("", "create", "--json", "--timeout", "0")
	var e openapi.ErrorBody
	if code != 1 || out != "" || json.Unmarshal([]byte(errOut), &e) != nil || e.Error.Code != "invalid_argument" || !strings.Contains(e.Error.Message, "timeout") {
		t.Errorf("create --json --timeout 0 = %d %q %q", code, out, errOut)
	}
	out, _, code = d.sbx("", "create", "--json")
	var sb openapi.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || sb.ID != id1 || strings.Count(out, "\n") != 1 {
		t.Errorf("create --json = %d %q", code, out)
	}
	d.local = true
	out, errOut, _ = d.sbx("", "create")
	if out != id1+"\n" || !strings.Contains(errOut, "NOT A SANDBOX") {
		t.Errorf("local create: stdout %q stderr %q", out, errOut)
	}
}

func TestExecExitCodes(t *testing.T) {
	d := newDaemon(t)
	for _, tc := range []struct {
		res  openapi.ExecResult
		want int
	}{
		{openapi.ExecResult{Reason: "exited", ExitCode: 0}, 0},
		{openapi.ExecResult{Reason: "exited", ExitCode: 3}, 3},
		{openapi.ExecResult{Reason: "exited", ExitCode: 127}, 127},
		{openapi.ExecResult{Reason: "exited", ExitCode: 126}, 126},
		{openapi.ExecResult{Reason: "timeout", ExitCode: 124}, 124},
		{openapi.ExecResult{Reason: "signaled", Signal: 15, ExitCode: 143}, 143},
		{openapi.ExecResult{Reason: "killed", Signal: 9, ExitCode: 137}, 137},
		{openapi.ExecResult{Reason: "oom", ExitCode: 137}, 137},
	} {
		d.result = tc.res
		if _, _, code := d.sbx("", "exec", id1, "--", "x"); code != tc.want {
			t.Errorf("exec ending %+v = %d, want %d", tc.res, code, tc.want)
		}
	}
	if _, errOut, code := d.sbx("", "exec", id2[:25]+"x", "--", "true"); code != 125 || !strings.Contains(errOut, "sandbox not found") {
		t.Errorf("exec on unknown sandbox = %d %q, want 125", code, errOut)
	}
	d.execFail = true
	if _, _, code := d.sbx("", "exec", id1, "--", "no-such-command"); code != 127 {
		t.Errorf("exec of a missing command = %d, want 127", code)
	}
}

func TestExecStreamsAndArgv(t *testing.T) {
	d := newDaemon(t)
	out, errOut, code := d.sbx("", "exec", "--timeout", "5", "--env", "A=1", "--cwd", "/w", id1, "--", "echo", "a;b", "$HOME", "`id`")
	if code != 0 || out != "out:echo|a;b|$HOME|`id`\n" || errOut != "\xff" {
		t.Errorf("exec = %d %q %q", code, out, errOut)
	}
	x := d.execs[0]
	if !slices.Equal(x.Argv, []string{"echo", "a;b", "$HOME", "`id`"}) || x.Command != "" || *x.Timeout != 5 || x.Env["A"] != "1" || x.Cwd != "/w" {
		t.Errorf("exec request = %+v", x)
	}
	// Flags between the ID and "--" count too.
	d.sbx("", "exec", id1, "--timeout", "7", "--", "true")
	if x := d.execs[1]; *x.Timeout != 7 || !slices.Equal(x.Argv, []string{"true"}) {
		t.Errorf("exec with flags after the ID = %+v", x)
	}
	// -i sends stdin.
	out, _, _ = d.sbx("from stdin\n", "exec", "-i", id1, "--", "cat")
	if !strings.HasSuffix(out, "from stdin\n") {
		t.Errorf("exec -i = %q", out)
	}
	// --json: the events, one per line.
	out, _, code = d.sbx("", "exec", "--json", id1, "--", "x")
	var types []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev openapi.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("--json line %q: %v", l, err)
		}
		types = append(types, ev.Type)
	}
	if code != 0 || strings.Join(types, ",") != "started,stdout,stderr,result" {
		t.Errorf("exec --json = %d %v", code, types)
	}
	// A stream that dropped output (a bounded view; sbx exec never asks for
	// one) is never silent.
	d.dropped = 12345
	_, errOut, _ = d.sbx("", "exec", id1, "--", "x")
	if !strings.Contains(errOut, "12345 bytes of the command's stdout were not delivered") {
		t.Errorf("exec with dropped output: stderr %q", errOut)
	}
}

func TestRunDeletesEvenOnFailure(t *testing.T) {
	d := newDaemon(t)
	d.result = openapi.ExecResult{Reason: "exited", ExitCode: 4}
	out, _, code := d.sbx("", "run", "--timeout", "120", "--memory-mb", "64", "--", "python3", "-c", "print(6*7)")
	if code != 4 || out != "out:python3|-c|print(6*7)\n" || len(d.deleted) != 1 {
		t.Errorf("run = %d %q, deleted %v", code, out, d.deleted)
	}
	if x := d.execs[0]; *x.Timeout != 120 || *d.created[0].MemoryMB != 64 {
		t.Errorf("run: exec timeout %v, memory %v", *x.Timeout, *d.created[0].MemoryMB)
	}
	d.execFail = true
	if _, _, code := d.sbx("", "run", "--", "nope"); code != 127 || len(d.deleted) != 2 {
		t.Errorf("failing run = %d, deleted %v", code, d.deleted)
	}
}

func TestLsGetRm(t *testing.T) {
	d := newDaemon(t)
	out, _, code := d.sbx("", "ls")
	if code != 0 || !strings.HasPrefix(out, "ID") || !strings.Contains(out, id1) || !strings.Contains(out, "a=1") {
		t.Errorf("ls = %d\n%s", code, out)
	}
	d.local = true
	if out, _, _ := d.sbx("", "ls"); !strings.Contains(out, "NOT A SANDBOX") {
		t.Errorf("ls does not mark local sandboxes:\n%s", out)
	}
	out, _, _ = d.sbx("", "ls", "--json")
	var l openapi.SandboxList
	if json.Unmarshal([]byte(out), &l) != nil || len(l.Sandboxes) != 1 {
		t.Errorf("ls --json = %q", out)
	}
	out, _, code = d.sbx("", "get", "--json", id1)
	var sb openapi.Sandbox
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil || sb.ID != id1 {
		t.Errorf("get --json = %d %q", code, out)
	}
	out, _, code = d.sbx("", "get", id1, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &sb) != nil {
		t.Errorf("get ID --json = %d %q", code, out)
	}
	_, errOut, code := d.sbx("", "get", "cccccccccccccccccccccccccc")
	if code != 1 || errOut != "sbx get: get cccccccccccccccccccccccccc: sandbox not found\n" {
		t.Errorf("get unknown = %d %q", code, errOut)
	}
	out, errOut, code = d.sbx("", "rm", id1, "cccccccccccccccccccccccccc", id2)
	if code != 1 || out != id1+"\n"+id2+"\n" || strings.Count(errOut, "\n") != 1 || !slices.Equal(d.deleted, []string{id1, id2}) {
		t.Errorf("rm = %d %q %q, deleted %v", code, out, errOut, d.deleted)
	}
	out, errOut, code = d.sbx("", "rm", "--json", id1, "cccccccccccccccccccccccccc")
	if code != 1 || out != `{"deleted":["`+id1+`"]}`+"\n" || !strings.HasPrefix(errOut, `{"error":{"code":"not_found"`) {
		t.Errorf("rm --json = %d %q %q", code, out, errOut)
	}
}

func TestCp(t *testing.T) {
	d := newDaemon(t)
	dir := t.TempDir()
	blob := make([]byte, 1<<20+7)
	for i := range blob {
		blob[i] = byte(i * 7)
	}
	local := filepath.Join(dir, "in.bin")
	os.WriteFile(local, blob, 0o640)
	if _, e, c := d.sbx("", "cp", local, id1+":/workspace/"); c != 0 {
		t.Fatalf("cp in = %d %s", c, e)
	}
	if !bytes.Equal(d.files["/workspace/in.bin"], blob) {
		t.Fatalf("uploaded %d bytes, want %d", len(d.files["/workspace/in.bin"]), len(blob))
	}
	if _, e, c := d.sbx("", "cp", id1+":/workspace/in.bin", dir); c != 0 { // into a directory
		t.Fatalf("cp out = %d %s", c, e)
	}
	back, _ := os.ReadFile(filepath.Join(dir, "in.bin"))
	if !bytes.Equal(back, blob) {
		t.Errorf("round trip differs")
	}
	out, _, c := d.sbx("", "cp", id1+":/workspace/in.bin", "-")
	if c != 0 || out != string(blob) {
		t.Errorf("cp to stdout = %d, %d bytes", c, len(out))
	}
	if _, _, c := d.sbx("stdin bytes", "cp", "-", id1+":/w/s"); c != 0 || string(d.files["/w/s"]) != "stdin bytes" {
		t.Errorf("cp from stdin = %d %q", c, d.files["/w/s"])
	}
	// A failed download leaves no file behind.
	if _, e, c := d.sbx("", "cp", id1+":/missing", filepath.Join(dir, "m")); c != 1 || !strings.Contains(e, "no such file") {
		t.Errorf("cp missing = %d %q", c, e)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("files left in %s: %v", dir, ents)
	}
}

func TestUnreachableDaemon(t *testing.T) {
	var out, errOut bytes.Buffer
	dir := t.TempDir()
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, euid: 1000,
		getenv: func(k string) string { return map[string]string{"SBX_DATA_DIR": dir}[k] }}
	code := e.run(context.Background(), []string{"ls"})
	if code != 1 || out.Len() != 0 || strings.Count(errOut.String(), "\n") != 1 ||
		!strings.Contains(errOut.String(), filepath.Join(dir, "sbx.sock")) || !strings.Contains(errOut.String(), "sbx serve") {
		t.Errorf("ls without a daemon = %d %q", code, errOut.String())
	}
	errOut.Reset()
	if code := e.run(context.Background(), []string{"exec", id1, "--", "true"}); code != 125 {
		t.Errorf("exec without a daemon = %d, want 125", code)
	}
}

func TestToolArguments(t *testing.T) {
	strs := map[string]bool{"command": true}
	got, err := toolArguments([]string{"command=true", "timeout_seconds=5", "cwd=/tmp", "flags=[1,2]"}, strs)
	if err != nil {
		t.Fatal(err)
	}
	if got["command"] != "true" || got["timeout_seconds"] != 5.0 || got["cwd"] != "/tmp" || fmt.Sprint(got["flags"]) != "[1 2]" {
		t.Errorf("got %#v", got)
	}
	if got, err := toolArguments([]string{`{"a":1}`}, nil); err != nil || got["a"] != 1.0 {
		t.Errorf("JSON object: %v %v", got, err)
	}
	if _, err := toolArguments([]string{"novalue"}, nil); err == nil || !strings.Contains(err.Error(), "KEY=VALUE") {
		t.Errorf("bad pair: %v", err)
	}
}
