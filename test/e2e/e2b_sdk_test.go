package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// e2bScenarioFloor is the fewest scenarios a run must pass: a run that
// passes fewer ran less than the suite (scenarios lost), not the suite.
const e2bScenarioFloor = 39

var (
	e2bSummary = regexp.MustCompile(`^(\d+) passed, (\d+) failed$`)
	e2bFailed  = regexp.MustCompile(`^FAIL (\S+)`)
)

// TestE2BSDK runs test/node/e2b-scenarios.mjs, E2B's official JavaScript SDKs
// unchanged (e2b, @e2b/code-interpreter) configured by the environment only,
// against a daemon of its own: lifecycle, commands, PTY, files, isolation,
// keys, bad input and the code interpreter, each scenario a line of the log
// as it ends. It fails on any failed scenario, and when a sandbox is left
// once the suite is done. Its subtest bench runs `sbx bench`'s E2B figure
// against the same daemon, small.
func TestE2BSDK(t *testing.T) {
	script := e2bScenarioScript(t)
	d := startDaemon(t, "")
	defer d.cleanup()

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = filepath.Dir(script)
	// E2B's variables of the environment the test runs in are not the
	// suite's: only the three below point the SDK at this daemon.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "E2B_API_URL="+d.url, "E2B_SANDBOX_URL="+d.url, "E2B_API_KEY="+d.key)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting node: %v", err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		lines    []string
		errLines []string
	)
	// Each line goes to the log as it comes: a scenario that hangs shows
	// where the run is.
	follow := func(r io.Reader, into *[]string, prefix string) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			t.Log(prefix + sc.Text())
			mu.Lock()
			*into = append(*into, sc.Text())
			mu.Unlock()
		}
	}
	wg.Go(func() { follow(stdout, &lines, "") })
	wg.Go(func() { follow(stderr, &errLines, "stderr: ") })
	wg.Wait()
	runErr := cmd.Wait()

	passed, failed := -1, -1
	var failedNames []string
	for _, l := range lines {
		if m := e2bSummary.FindStringSubmatch(l); m != nil {
			passed, _ = strconv.Atoi(m[1])
			failed, _ = strconv.Atoi(m[2])
		}
		if m := e2bFailed.FindStringSubmatch(l); m != nil {
			failedNames = append(failedNames, m[1])
		}
	}
	switch {
	case passed < 0:
		t.Errorf("node e2b-scenarios.mjs printed no summary (exit: %v)", runErr)
	case runErr != nil || failed > 0 || len(failedNames) > 0:
		t.Errorf("node e2b-scenarios.mjs: %v; %d passed, %d failed: %v", runErr, passed, failed, failedNames)
	case passed < e2bScenarioFloor:
		t.Errorf("only %d scenarios passed, want at least %d", passed, e2bScenarioFloor)
	}

	t.Run("bench", func(t *testing.T) { e2bBench(t, d, filepath.Dir(script)) })

	// Every sandbox the suite (and the bench) made is gone, by their own kills.
	st, body := d.api("GET", "/v1/sandboxes", nil)
	var list struct {
		Sandboxes []struct {
			ID     string            `json:"id"`
			Labels map[string]string `json:"labels"`
		} `json:"sandboxes"`
	}
	if err := json.Unmarshal(body, &list); st != 200 || err != nil {
		t.Fatalf("GET /v1/sandboxes = %d %s (%v)", st, body, err)
	}
	for _, s := range list.Sandboxes {
		t.Errorf("sandbox %s (labels %v) left after the suite", s.ID, s.Labels)
	}
}

// e2bBench runs `sbx bench --external` against d, small, and checks its E2B
// figure: samples of Sandbox.create → commands.run('true') through the
// installed SDK and as many of the /v1 peer, judged against the target.
func e2bBench(t *testing.T, d *daemon, sdkDir string) {
	const runs = 5
	stdout, stderr, code := d.cli("bench", "--external", "--json", "--runs", strconv.Itoa(runs), "--warmup", "2",
		"--cycles", "4", "--concurrency", "2", "--idle", "0", "--scale", "0", "--burst", "0", "--stream-mb", "0",
		"--net=false", "--e2b-sdk", sdkDir)
	if code != 0 {
		t.Fatalf("sbx bench = %d\nstderr: %s", code, stderr)
	}
	var rep struct {
		E2B *struct {
			SDKVersion string `json:"sdk_version"`
			SDK        struct {
				N     int     `json:"n"`
				P50MS float64 `json:"p50_ms"`
			} `json:"sdk"`
			Peer struct {
				N     int     `json:"n"`
				P50MS float64 `json:"p50_ms"`
			} `json:"peer"`
		} `json:"e2b"`
		Unavailable string `json:"e2b_unavailable"`
		Targets     []struct {
			Figure string  `json:"figure"`
			Value  float64 `json:"value"`
			Want   string  `json:"want"`
		} `json:"targets"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("sbx bench --json: %v\n%s", err, stdout)
	}
	if rep.E2B == nil {
		t.Fatalf("no E2B figure (unavailable: %q); stderr:\n%s", rep.Unavailable, stderr)
	}
	e := rep.E2B
	if e.SDKVersion != "2.51.0" || e.SDK.N != runs || e.Peer.N != runs || e.SDK.P50MS <= 0 || e.Peer.P50MS <= 0 {
		t.Errorf("E2B figure = %+v, want %d samples of each from SDK 2.51.0", *e, runs)
	}
	t.Logf("E2B SDK create → first commands.run p50 %.2f ms; through /v1 %.2f ms", e.SDK.P50MS, e.Peer.P50MS)
	judged := false
	for _, tg := range rep.Targets {
		if strings.HasPrefix(tg.Figure, "E2B SDK") {
			judged = tg.Value == e.SDK.P50MS && tg.Want == "≤ 50 ms"
		}
	}
	if !judged {
		t.Errorf("the E2B figure is not judged against ≤ 50 ms: %+v", rep.Targets)
	}
}

// e2bScenarioScript returns test/node/e2b-scenarios.mjs once node and E2B's
// SDKs are installed (make deps, or npm ci in test/node).
func e2bScenarioScript(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs("../node/e2b-scenarios.mjs")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"e2b", "@e2b/code-interpreter"} {
		if _, err := os.Stat(filepath.Join(filepath.Dir(script), "node_modules", pkg, "package.json")); err != nil {
			t.Fatalf("E2B's SDK %s is not installed: make deps (or npm ci in test/node) installs it: %v", pkg, err)
		}
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not installed: make deps installs it: %v", err)
	}
	return script
}
