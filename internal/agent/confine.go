// This file implements the confinement of every process the agent starts:
// the Landlock ruleset and the seccomp filter of its configuration, applied to
// the thread each process is forked from, last before its execve. The agent
// itself runs without them: it must reach its cgroup and the whole sandbox.

package agent

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/isolation/landlock"
	"sbx.dev/sbx/internal/isolation/nsinit"
	"sbx.dev/sbx/internal/isolation/seccomp/filter"
	"sbx.dev/sbx/internal/osthread"
)

// confinement is what every started process runs under.
type confinement struct {
	ruleset *landlock.Ruleset
	filter  *filter.Program
	// seccompID names the filter's profile in the report.
	seccompID string

	// proof is the report of the first thread confined, checked there; set
	// by the first confine of the hook or by prove.
	proveOnce sync.Once
	proof     boot.Report
	proofErr  error
}

// newConfinement builds the confinement cfg asks for. The report says, per
// layer, "applied" or why not; a layer cfg does not ask for is not reported.
// The caller proves it (prove) before serving: the kernel's enforcement is
// read back on a confined thread.
func newConfinement(cfg boot.AgentConfig) (*confinement, boot.Report) {
	rep := boot.Report{Layers: map[string]string{}}
	for k, v := range cfg.Layers {
		rep.Layers[k] = v
	}
	c := &confinement{seccompID: cfg.SeccompID}
	if cfg.Landlock != nil {
		rs, err := landlock.Build(landlock.Rules{Read: cfg.Landlock.Read, Write: cfg.Landlock.Write})
		if err != nil {
			rep.Layers["landlock"] = err.Error()
		} else {
			c.ruleset = rs
			rep.LandlockABI = rs.ABI()
		}
	}
	if len(cfg.Seccomp) > 0 {
		p, err := filter.FromBytes(cfg.Seccomp)
		if err != nil {
			rep.Layers["seccomp"] = "the filter does not parse: " + err.Error()
		} else {
			c.filter = p
		}
	}
	return c, rep
}

// empty reports whether there is nothing to confine with.
func (c *confinement) empty() bool { return c.ruleset == nil && c.filter == nil }

// hook is the process table's Confine: no_new_privs and the bounding set
// always, Landlock and seccomp when configured. The first thread it confines
// (the table's spawn thread, which every process is forked from) is also
// where the confinement is proved.
func (c *confinement) hook() func() error {
	return func() error {
		proved := false
		c.proveOnce.Do(func() {
			proved = true
			c.proofErr = c.confine()
			if c.proofErr == nil {
				c.proof = c.check()
			}
		})
		if proved {
			return c.proofErr
		}
		return c.confine()
	}
}

// prove adds to rep what a confined thread shows of each layer: the spawn
// thread's proof when the process table started one, else a thread of its
// own, confined and thrown away.
func (c *confinement) prove(rep *boot.Report) error {
	if c.empty() {
		return nil
	}
	c.proveOnce.Do(func() {
		c.proofErr = osthread.Discarded(func() error {
			if err := c.confine(); err != nil {
				return err
			}
			c.proof = c.check()
			return nil
		})
	})
	if c.proofErr != nil {
		return c.proofErr
	}
	for k, v := range c.proof.Layers {
		rep.Layers[k] = v
	}
	rep.SeccompProfile = c.proof.SeccompProfile
	return nil
}

// check reads back, on the calling confined thread, what the kernel enforces.
func (c *confinement) check() boot.Report {
	rep := boot.Report{Layers: map[string]string{}}
	if c.ruleset != nil {
		rep.Layers["landlock"] = probeLandlock()
	}
	if c.filter != nil {
		rep.Layers["seccomp"] = probeSeccomp()
		rep.SeccompProfile = c.seccompID
	}
	if why := probeBounding(); why != "" {
		rep.Layers["caps"] = why
	}
	return rep
}

// confine applies the confinement to the calling thread, which the caller
// discards afterwards. Landlock goes first: the filter might refuse the
// syscall that loads it.
func (c *confinement) confine() error {
	// Both need no_new_privs on the thread; in a jail the init set it on
	// every thread already, a local agent has it on none.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := nsinit.NarrowBounding(); err != nil {
		return fmt.Errorf("caps: %w", err)
	}
	if c.ruleset != nil {
		if err := c.ruleset.RestrictThread(); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
	}
	if c.filter != nil {
		if err := c.filter.LoadThread(); err != nil {
			return fmt.Errorf("seccomp: %w", err)
		}
	}
	return nil
}

// probeLandlock checks that the thread may not write where no rule lets it:
// a new entry in /, which only the rules' top-level directories are in.
func probeLandlock() string {
	const probe = "/.sbx-landlock-probe"
	err := unix.Mkdirat(unix.AT_FDCWD, probe, 0o700)
	switch {
	case err == nil:
		unix.Rmdir(probe)
		return "the ruleset did not stop a write outside its rules (mkdir " + probe + ")"
	case errors.Is(err, unix.EACCES):
		return "applied"
	default:
		return fmt.Sprintf("mkdir %s: %v, not the EACCES of the ruleset", probe, err)
	}
}

// probeSeccomp reads the thread's seccomp mode back from the kernel.
func probeSeccomp() string {
	st, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return "cannot read /proc/thread-self/status: " + err.Error()
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
			if strings.TrimSpace(v) == "2" {
				return "applied"
			}
			return "the thread's seccomp mode is " + strings.TrimSpace(v) + ", not 2 (filter)"
		}
	}
	return "the kernel shows no seccomp mode"
}

// probeBounding checks that the thread's bounding set is its effective set:
// what the processes it forks start with.
func probeBounding() string {
	st, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return "cannot read /proc/thread-self/status: " + err.Error()
	}
	sets := map[string]string{}
	for _, line := range strings.Split(string(st), "\n") {
		if k, v, ok := strings.Cut(line, ":\t"); ok && (k == "CapBnd" || k == "CapEff") {
			sets[k] = v
		}
	}
	if sets["CapBnd"] != sets["CapEff"] {
		return fmt.Sprintf("a process's bounding set %s is not its effective set %s", sets["CapBnd"], sets["CapEff"])
	}
	return ""
}
