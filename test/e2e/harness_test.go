// Package e2e drives the real sbx binary: it builds cmd/sbx once, starts `sbx serve`
// on a temporary data dir, and checks stdout, stderr, JSON and exit codes of real CLI
// calls and raw HTTP requests. It needs root (namespaces, cgroups, overlayfs).
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"sbx.dev/sbx/internal/testutil"
)

var sbxBin string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("e2e: skipped: requires root (namespaces, cgroups, overlayfs)")
		os.Exit(0)
	}
	// Fds this process inherited (the shared e2e lock of flock(1) among them)
	// must not pass to the daemons it starts: a daemon left running by a
	// killed test would hold the lock for good.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		fmt.Println("e2e: marking inherited fds close-on-exec:", err)
	}
	dir, err := os.MkdirTemp("", "sbx-e2e-bin-")
	if err != nil {
		panic(err)
	}
	sbxBin = filepath.Join(dir, "sbx")
	// As the Makefile builds it: sbx-agent first, which sbx embeds (an
	// unchanged one is not rewritten), both static.
	for _, b := range [][]string{{"-o", "../../internal/agentbin/bin/sbx-agent", "sbx.dev/sbx/cmd/sbx-agent"}, {"-o", sbxBin, "sbx.dev/sbx/cmd/sbx"}} {
		build := exec.Command("go", append([]string{"build"}, b...)...)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if err := build.Run(); err != nil {
			fmt.Println("e2e: building", b[len(b)-1]+":", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	stopShared()
	os.RemoveAll(dir)
	os.Exit(code)
}

// stopShared ends the shared daemon when a run that selected only some tests
// (-run) did not reach TestZZLeakAudit: its sandboxes are deleted and it is
// stopped, so no daemon outlives the test binary.
func stopShared() {
	if shared == nil {
		return
	}
	defer os.RemoveAll(shared.dataDir)
	select {
	case <-shared.done:
		return // TestZZLeakAudit stopped it and audited the host
	default:
	}
	var list struct {
		Sandboxes []struct{ ID string } `json:"sandboxes"`
	}
	if st, body := shared.apiQuiet("GET", "/v1/sandboxes", nil); st == 200 {
		json.Unmarshal(body, &list)
	}
	for _, s := range list.Sandboxes {
		shared.apiQuiet("DELETE", "/v1/sandboxes/"+s.ID, nil)
	}
	shared.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-shared.done:
	case <-time.After(30 * time.Second):
		shared.cmd.Process.Kill()
		<-shared.done
	}
	removeInstanceGroups(shared.instance)
}

// daemon is one running `sbx serve`.
type daemon struct {
	t        *testing.T
	cmd      *exec.Cmd
	dataDir  string
	url      string
	key      string
	instance string
	log      *testutil.SyncBuffer
	done     chan struct{}
	env      []string
	// netns, when set, is the network namespace the daemon runs in (its
	// TCP listener is out of the test's reach there): the API is spoken
	// over its unix socket, which cliURL names for the CLI.
	netns  string
	cliURL string
	hc     *http.Client
}

var listenLine = regexp.MustCompile(`listening on (http://[0-9.:]+)`)

// startDaemon starts `sbx serve` on dataDir (a fresh temp dir when empty) and
// waits until it prints its URL.
func startDaemon(t *testing.T, dataDir string, env ...string) *daemon {
	t.Helper()
	return startDaemonBin(t, sbxBin, dataDir, env...)
}

// startDaemonBin is startDaemon with the sbx binary bin (a build with other tags).
func startDaemonBin(t *testing.T, bin, dataDir string, env ...string) *daemon {
	t.Helper()
	return startDaemonNetns(t, bin, dataDir, "", env...)
}

// startDaemonNetns is startDaemonBin with the daemon in network namespace
// netns ("" for the test's own).
func startDaemonNetns(t *testing.T, bin, dataDir, netns string, env ...string) *daemon {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
		// Runs before the temp dir goes: a pool a killed daemon left mounted
		// would pin it. (Tests that stop cleanly check it was unmounted.)
		t.Cleanup(func() {
			if poolMounted(dataDir) {
				syscall.Unmount(poolDir(dataDir), syscall.MNT_DETACH)
			}
		})
	}
	d := &daemon{t: t, dataDir: dataDir, log: &testutil.SyncBuffer{}, done: make(chan struct{}), env: env, netns: netns, hc: http.DefaultClient}
	sock := filepath.Join(dataDir, "sbx.sock")
	d.cmd = exec.Command(bin, "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--socket", sock)
	if netns != "" {
		d.cmd = exec.Command("nsenter", append([]string{"--net=" + netns, bin}, d.cmd.Args[1:]...)...)
	}
	d.cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	d.cmd.Stdout = io.MultiWriter(pw, d.log)
	d.cmd.Stderr = d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("starting sbx serve: %v", err)
	}
	go func() {
		d.cmd.Wait()
		pw.Close()
		close(d.done)
	}()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listenLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case d.url = <-found:
		d.cliURL = d.url
		if netns != "" {
			d.url, d.cliURL = "http://sbx", "unix:"+sock
			d.hc = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var nd net.Dialer
				return nd.DialContext(ctx, "unix", sock)
			}}}
		}
	case <-d.done:
		t.Fatalf("sbx serve exited early: %v\n%s", d.cmd.ProcessState, d.log.String())
	case <-time.After(60 * time.Second):
		d.kill()
		t.Fatalf("sbx serve printed no URL within 60s:\n%s", d.log.String())
	}
	key, err := os.ReadFile(filepath.Join(dataDir, "admin.key"))
	if err != nil {
		t.Fatalf("reading admin.key: %v", err)
	}
	d.key = strings.TrimSpace(string(key))
	inst, err := os.ReadFile(filepath.Join(dataDir, "instance"))
	if err == nil {
		d.instance = strings.TrimSpace(string(inst))
	}
	return d
}

// client is the HTTP client that reaches the daemon.
func (d *daemon) client() *http.Client {
	if d.hc == nil {
		return http.DefaultClient
	}
	return d.hc
}

// stop sends SIGTERM and waits for a clean exit.
func (d *daemon) stop() {
	d.t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.kill()
		d.t.Errorf("sbx serve did not exit within 30s of SIGTERM")
	}
}

// kill is kill -9.
func (d *daemon) kill() {
	d.cmd.Process.Kill()
	<-d.done
}

// cleanup deletes every sandbox, stops the daemon and audits the host for leaks.
func (d *daemon) cleanup() {
	d.t.Helper()
	var list struct {
		Sandboxes []struct{ ID string } `json:"sandboxes"`
	}
	if st, body := d.api("GET", "/v1/sandboxes", nil); st == 200 {
		json.Unmarshal(body, &list)
	}
	for _, s := range list.Sandboxes {
		if st, body := d.api("DELETE", "/v1/sandboxes/"+s.ID, nil); st != 204 && st != 404 {
			d.t.Errorf("cleanup: DELETE %s = %d %s", s.ID, st, body)
		}
	}
	d.stop()
	if poolMounted(d.dataDir) {
		d.t.Errorf("leak: the disk pool %s is still mounted after a clean stop with no sandbox", poolDir(d.dataDir))
	}
	for _, g := range spareGroups(d.instance) {
		d.t.Errorf("leak: spare cgroup %s after a clean stop", g)
	}
	if d.t.Failed() {
		d.dumpLog()
	}
	auditLeaks(d.t, d.dataDir, d.instance)
	removeInstanceGroups(d.instance)
}

// dumpLog prints the tail of the daemon's log, for a failed test, and keeps
// the whole of it in $TMPDIR/sbx-e2e-logs.
func (d *daemon) dumpLog() {
	dir := filepath.Join(os.TempDir(), "sbx-e2e-logs")
	file := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(d.t.Name())+".log")
	if os.MkdirAll(dir, 0o700) == nil && os.WriteFile(file, []byte(d.log.String()), 0o600) == nil {
		d.t.Logf("the daemon's whole log: %s", file)
	}
	lines := strings.Split(strings.TrimRight(d.log.String(), "\n"), "\n")
	if len(lines) > 150 {
		lines = lines[len(lines)-150:]
	}
	d.t.Logf("the daemon's log (last %d lines):\n%s", len(lines), strings.Join(lines, "\n"))
}

// cli runs the sbx CLI against this daemon.
func (d *daemon) cli(args ...string) (stdout, stderr string, code int) {
	d.t.Helper()
	return d.cliIn(nil, args...)
}

func (d *daemon) cliIn(stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, sbxBin, args...)
	cmd.Env = append(os.Environ(), "SBX_URL="+d.cliURL, "SBX_API_KEY="+d.key)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &o, &e, stdin
	err := cmd.Run()
	code = 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			d.t.Fatalf("running sbx %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return o.String(), e.String(), code
}

// api does one authenticated HTTP request with a JSON body (nil for none).
func (d *daemon) api(method, path string, body any) (int, []byte) {
	d.t.Helper()
	return d.apiKey(d.key, method, path, body)
}

func (d *daemon) apiKey(key, method, path string, body any) (int, []byte) {
	d.t.Helper()
	st, _, b := d.apiKeyHeaders(key, method, path, body)
	return st, b
}

// apiHeaders is api with the response's headers.
func (d *daemon) apiHeaders(method, path string, body any) (int, http.Header, []byte) {
	d.t.Helper()
	return d.apiKeyHeaders(d.key, method, path, body)
}

func (d *daemon) apiKeyHeaders(key, method, path string, body any) (int, http.Header, []byte) {
	d.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			d.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, d.url+path, r)
	if err != nil {
		d.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.client().Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// create makes a sandbox over HTTP and returns its id.
func (d *daemon) create(body map[string]any) string {
	d.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	st, b := d.api("POST", "/v1/sandboxes", body)
	if st != 201 {
		d.t.Fatalf("POST /v1/sandboxes = %d %s", st, b)
	}
	var s struct{ ID string }
	json.Unmarshal(b, &s)
	if s.ID == "" {
		d.t.Fatalf("create returned no id: %s", b)
	}
	return s.ID
}

type execResult struct {
	ProcessID     string `json:"process_id"`
	PID           int    `json:"pid"`
	Stdout        string `json:"stdout"`
	Stderr        string `json:"stderr"`
	ExitCode      int    `json:"exit_code"`
	Reason        string `json:"reason"`
	Truncated     bool   `json:"truncated"`
	StdoutDropped int64  `json:"stdout_dropped"`
	StdoutPath    string `json:"stdout_path"`
	DurationMS    int64  `json:"duration_ms"`
}

// exec runs a shell command in sandbox id and returns the result.
func (d *daemon) exec(id string, body map[string]any) execResult {
	d.t.Helper()
	st, b := d.api("POST", "/v1/sandboxes/"+id+"/exec", body)
	if st != 200 && !(st == 202 && body["background"] == true) {
		d.t.Fatalf("exec %v = %d %s", body, st, b)
	}
	var r execResult
	if err := json.Unmarshal(b, &r); err != nil {
		d.t.Fatalf("decoding exec result %s: %v", b, err)
	}
	return r
}

func (d *daemon) sh(id, command string) execResult {
	d.t.Helper()
	return d.exec(id, map[string]any{"command": command})
}

// errorBody is the API's error object.
type errorBody struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		SandboxID string `json:"sandbox_id"`
	} `json:"error"`
}

func decodeError(t *testing.T, b []byte) errorBody {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Code == "" {
		t.Fatalf("not an API error body: %s", b)
	}
	return e
}

var (
	shared     *daemon
	sharedOnce sync.Once
)

// sharedDaemon is one daemon for the tests that need no restart; its leak audit runs
// when the package's tests end (see TestZZLeakAudit).
func sharedDaemon(t *testing.T) *daemon {
	t.Helper()
	sharedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sbx-e2e-data-")
		if err != nil {
			t.Fatal(err)
		}
		shared = startDaemon(t, dir)
	})
	if shared == nil || shared.url == "" {
		t.Fatal("shared daemon did not start")
	}
	shared.t = t
	return shared
}
