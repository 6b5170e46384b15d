//go:build sbxfault

package fault

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled reports whether this binary was built with the sbxfault tag.
const Enabled = true

// armed is the point named by SBX_FAULT, read at the first Point.
var armed = sync.OnceValue(func() string { return os.Getenv(Env) })

// Point kills this process with SIGKILL when SBX_FAULT names it: no deferred
// call, no cleanup, as a power cut or the OOM killer would end the daemon.
func Point(name string) {
	if name == "" || name != armed() {
		return
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL cannot be caught; wait for it to land
}

// MissingEnv names isolation layers (comma-separated) that this build's
// native driver reports missing on the host, for the fail-closed tests
// (SECURITY.md PV-11).
const MissingEnv = "SBX_FAULT_MISSING"

// Missing says why layer is missing when SBX_FAULT_MISSING names it, else "".
func Missing(layer string) string {
	for _, l := range strings.Split(os.Getenv(MissingEnv), ",") {
		if strings.TrimSpace(l) == layer {
			return "disabled by " + MissingEnv + " (a test build)"
		}
	}
	return ""
}

// FailEnv makes the named steps fail a number of times: "teardown:3" (or
// "teardown" for always), for the quarantine tests (SECURITY.md RL-05).
const FailEnv = "SBX_FAULT_FAIL"

var failMu sync.Mutex
var failed = map[string]int{}

// Fail returns an error the first times SBX_FAULT_FAIL names step, else nil.
func Fail(step string) error {
	for _, f := range strings.Split(os.Getenv(FailEnv), ",") {
		name, n, _ := strings.Cut(strings.TrimSpace(f), ":")
		if name != step {
			continue
		}
		times := -1
		if n != "" {
			fmt.Sscan(n, &times)
		}
		failMu.Lock()
		defer failMu.Unlock()
		if times >= 0 && failed[step] >= times {
			return nil
		}
		failed[step]++
		return fmt.Errorf("%s failed by %s (a test build): %w", step, FailEnv, syscall.EBUSY)
	}
	return nil
}

// WallEnv names a file holding a duration ("1h", "-30m") by which this build's
// daemon moves its wall clock, read at every reading: the tests jump the
// daemon's wall clock without touching the host's (SECURITY.md RL-07).
const WallEnv = "SBX_FAULT_WALL"

// Wall is time.Now moved by the duration in SBX_FAULT_WALL's file (none when
// the variable is unset, the file is missing or does not parse). The monotonic
// reading is stripped, so the result compares on the wall clock alone, as a
// jumped clock's reading would.
func Wall() time.Time {
	now := time.Now()
	path := os.Getenv(WallEnv)
	if path == "" {
		return now
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return now
	}
	d, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return now
	}
	return now.Round(0).Add(d)
}
