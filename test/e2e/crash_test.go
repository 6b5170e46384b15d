package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/fault"
)

// crashRunsEnv sets the runs per fault point: 3 by default (make test), 20 for
// the soak RL-02 asks for (SBX_CRASH_RUNS=20).
const crashRunsEnv = "SBX_CRASH_RUNS"

var faultBuild struct {
	once sync.Once
	path string
	err  error
}

// faultBinary builds cmd/sbx with the sbxfault tag once, beside sbxBin.
func faultBinary(t *testing.T) string {
	t.Helper()
	faultBuild.once.Do(func() {
		faultBuild.path = filepath.Join(filepath.Dir(sbxBin), "sbx-fault")
		cmd := exec.Command("go", "build", "-tags", "sbxfault", "-o", faultBuild.path, "sbx.dev/sbx/cmd/sbx")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as the Makefile builds it
		if out, err := cmd.CombinedOutput(); err != nil {
			faultBuild.err = fmt.Errorf("go build -tags sbxfault: %v\n%s", err, out)
		}
	})
	if faultBuild.err != nil {
		t.Fatal(faultBuild.err)
	}
	return faultBuild.path
}

func crashRuns(t *testing.T) int {
	t.Helper()
	v := os.Getenv(crashRunsEnv)
	if v == "" {
		return 3
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of runs per point", crashRunsEnv, v)
	}
	return n
}

// RL-02: the daemon is killed (SIGKILL, by the fault hook of a test build) at
// each step of a create; a restart on the same data dir, without the fault,
// leaves the sandbox either running and usable or fully gone, with nothing of
// it on the host; and the restarted daemon creates sandboxes.
func TestCrashMidCreate(t *testing.T) {
	bin := faultBinary(t)
	runs := crashRuns(t)
	for _, point := range fault.Points {
		t.Run(point, func(t *testing.T) {
			t.Parallel() // each run has its own data dir and instance: audits do not overlap
			for i := range runs {
				if !t.Run(strconv.Itoa(i), func(t *testing.T) { crashAt(t, bin, point) }) {
					return // one failure of a point says enough; the others go on
				}
			}
		})
	}
}

// crashAt does one run: crash at point, restart, check.
func crashAt(t *testing.T, bin, point string) {
	dir := t.TempDir()
	d := startDaemonBin(t, bin, dir, fault.Env+"="+point, "SBX_POOL_SIZE=0")
	if err := postCreate(d); err == nil {
		d.kill()
		t.Fatalf("create answered although the daemon should have crashed at %q", point)
	}
	select {
	case <-d.done:
	case <-time.After(time.Minute):
		d.kill()
		t.Fatalf("the daemon did not die at fault point %q", point)
	}
	if ws, ok := d.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the daemon ended %v, want SIGKILL at fault point %q\n%s", d.cmd.ProcessState, point, d.log.String())
	}
	onHost := hostSandboxes(dir, d.instance)

	r := startDaemonBin(t, bin, dir, "SBX_POOL_SIZE=0") // no fault this time
	defer r.cleanup()                                   // stop, then the leak audit of the whole data dir
	var list struct {
		Sandboxes []struct {
			ID          string `json:"id"`
			State       string `json:"state"`
			StateReason string `json:"state_reason"`
		} `json:"sandboxes"`
	}
	st, b := r.api("GET", "/v1/sandboxes", nil)
	if st != 200 || json.Unmarshal(b, &list) != nil {
		t.Fatalf("GET /v1/sandboxes after restart = %d %s", st, b)
	}
	if len(list.Sandboxes) > 1 {
		t.Fatalf("after one interrupted create the restarted daemon lists %d sandboxes: %s", len(list.Sandboxes), b)
	}
	outcome := "gone"
	for _, s := range list.Sandboxes {
		switch s.State {
		case "running":
			outcome = "running"
			if res := r.sh(s.ID, "echo adopted"); res.Stdout != "adopted\n" || res.ExitCode != 0 {
				t.Errorf("exec in the re-adopted sandbox %s = %+v", s.ID, res)
			}
		default:
			outcome = s.State
			t.Logf("sandbox %s is %s after restart (%s); it must delete cleanly", s.ID, s.State, s.StateReason)
		}
		if st, b := r.api("DELETE", "/v1/sandboxes/"+s.ID, nil); st != 204 {
			t.Errorf("DELETE %s (%s) = %d %s", s.ID, s.State, st, b)
		}
	}
	// Whatever the crash left on the host is reconciled: gone, or adopted (and
	// deleted just above). The host is checked, not the daemon's word.
	for _, id := range onHost {
		if st, b := r.api("GET", "/v1/sandboxes/"+id, nil); st != 404 {
			t.Errorf("GET %s (left on the host by the crash) after its delete = %d %s", id, st, b)
		}
	}
	auditLeaks(t, dir, r.instance)
	if point == fault.Commit && outcome != "running" {
		t.Errorf("crash at %q (the store said running): sandbox %s after restart, want running and re-adopted", point, outcome)
	}
	t.Logf("crash at %q: sandbox %s after restart; host held %v", point, outcome, onHost)

	// The restarted daemon serves new creates.
	id := r.create(nil)
	if res := r.sh(id, "echo fresh"); res.Stdout != "fresh\n" {
		t.Errorf("exec in a sandbox created after the restart = %+v", res)
	}
	if st, b := r.api("DELETE", "/v1/sandboxes/"+id, nil); st != 204 {
		t.Errorf("DELETE %s = %d %s", id, st, b)
	}
}

// postCreate sends a create whose answer is not expected: the daemon dies.
func postCreate(d *daemon) error {
	req, err := http.NewRequest("POST", d.url+"/v1/sandboxes", bytes.NewReader([]byte(`{}`)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+d.key)
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: time.Minute}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return nil
}

// hostSandboxes lists the sandbox ids of instance found on the host: directories
// under the native driver's data dir and cgroups in any hierarchy.
func hostSandboxes(dataDir, instance string) []string {
	var ids []string
	add := func(dir string) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() && idShape.MatchString(e.Name()) && !slices.Contains(ids, e.Name()) {
				ids = append(ids, e.Name())
			}
		}
	}
	add(filepath.Join(dataDir, "backends", "native"))
	hier, _ := filepath.Glob("/sys/fs/cgroup/*/sbx/" + instance)
	hier = append(hier, "/sys/fs/cgroup/sbx/"+instance)
	for _, h := range hier {
		add(h)
	}
	slices.Sort(ids)
	return ids
}
