package fault_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"sbx.dev/sbx/internal/fault"
)

// helperEnv makes the test binary a helper: it passes fault.Jail and exits 0.
const helperEnv = "SBX_FAULT_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		fault.Point(fault.Jail)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runHelper runs bin as the helper with SBX_FAULT=point and returns how it ended.
func runHelper(t *testing.T, bin, point string) *os.ProcessState {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), helperEnv+"=1", fault.Env+"="+point)
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running the helper %s: %v", bin, err)
	}
	return cmd.ProcessState
}

func killed(ps *os.ProcessState) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// This binary's own Point: a no-op without the tag, a SIGKILL with it; a point
// SBX_FAULT does not name never fires (control).
func TestPointInThisBuild(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ps := runHelper(t, self, fault.Jail)
	if fault.Enabled && !killed(ps) {
		t.Errorf("with the sbxfault tag, Point(%q) under %s=%s: helper ended %v, want SIGKILL", fault.Jail, fault.Env, fault.Jail, ps)
	}
	if !fault.Enabled && (killed(ps) || ps.ExitCode() != 0) {
		t.Errorf("without the sbxfault tag, Point(%q) under %s=%s: helper ended %v, want exit 0", fault.Jail, fault.Env, fault.Jail, ps)
	}
	if ps := runHelper(t, self, fault.Agent); killed(ps) || ps.ExitCode() != 0 {
		t.Errorf("Point(%q) under %s=%s: helper ended %v, want exit 0", fault.Jail, fault.Env, fault.Agent, ps)
	}
}

// The default build is proved above; this builds the same test with the tag and
// proves the point kills there, and only the point named.
func TestPointWithTagKills(t *testing.T) {
	if fault.Enabled {
		t.Skip("this binary has the tag; TestPointInThisBuild covers it")
	}
	bin := filepath.Join(t.TempDir(), "fault.test")
	goTool(t, "test", "-c", "-tags", "sbxfault", "-o", bin, "sbx.dev/sbx/internal/fault")
	if ps := runHelper(t, bin, fault.Jail); !killed(ps) {
		t.Errorf("tagged build, %s=%s: helper ended %v, want SIGKILL", fault.Env, fault.Jail, ps)
	}
	if ps := runHelper(t, bin, fault.Agent); killed(ps) || ps.ExitCode() != 0 {
		t.Errorf("tagged build, %s=%s: helper ended %v, want exit 0 (Point(%q) must not fire)", fault.Env, fault.Agent, ps, fault.Jail)
	}
	if ps := runHelper(t, bin, ""); killed(ps) || ps.ExitCode() != 0 {
		t.Errorf("tagged build, %s unset: helper ended %v, want exit 0", fault.Env, ps)
	}
}

// Without the tag the calls cost nothing: the compiler inlines the empty Point
// into its callers.
func TestPointInlinedWithoutTag(t *testing.T) {
	if fault.Enabled {
		t.Skip("this binary has the tag")
	}
	out := goTool(t, "build", "-gcflags=-m", "sbx.dev/sbx/internal/manager", "sbx.dev/sbx/internal/backend/native")
	// Positions are printed relative to this directory: ../manager/create.go.
	for _, pkg := range []string{"manager/", "backend/native/"} {
		found := false
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, pkg) && strings.Contains(l, "inlining call to fault.Point") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no \"inlining call to fault.Point\" in %s in the compiler's -m output", pkg)
		}
	}
}

func goTool(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
