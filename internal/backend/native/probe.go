// This file implements Probe: what this host lacks for the native driver, in
// words an operator can act on.

package native

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/fault"
	"sbx.dev/sbx/internal/isolation/landlock"
	"sbx.dev/sbx/internal/isolation/seccomp"
	"sbx.dev/sbx/internal/sandbox"
)

// Probe implements backend.Driver.
func (d *Driver) Probe(ctx context.Context) (backend.Report, error) {
	var checks []backend.Check
	check := func(name string, ok bool, reason string, args ...any) {
		c := backend.Check{Name: name, OK: ok}
		if !ok {
			c.Reason = fmt.Sprintf(reason, args...)
		}
		checks = append(checks, c)
	}
	check("root", os.Geteuid() == 0, "the native backend needs root (effective uid is %d): run sbx serve as root", os.Geteuid())

	fss, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return backend.Report{}, fmt.Errorf("probing native: %w", err)
	}
	check("overlayfs", strings.Contains(string(fss), "\toverlay\n"),
		"overlay is not in /proc/filesystems: load the overlay module (modprobe overlay)")

	var noNS []string
	for _, ns := range []string{"pid", "mnt", "net", "uts", "ipc", "cgroup"} {
		if _, err := os.Stat("/proc/self/ns/" + ns); err != nil {
			noNS = append(noNS, ns)
		}
	}
	check("namespaces", len(noNS) == 0, "the kernel lacks namespaces %v (/proc/self/ns): enable them in the kernel configuration", noNS)

	var noCtrl []string
	for _, c := range []string{"memory", "pids", "cpu"} {
		if !d.layout.Has(c) {
			noCtrl = append(noCtrl, c)
		}
	}
	check("cgroup controllers", len(noCtrl) == 0,
		"cgroup controllers %v are not mounted (cgroup layout %s): mount cgroup v2 with them enabled, or their v1 hierarchies", noCtrl, d.layout.Mode())

	var notWritable []string
	for _, root := range d.hierarchies() {
		dir := filepath.Join(root, "sbx", d.opts.Instance)
		for { // the group itself, or the nearest ancestor it would be made in
			if _, err := os.Stat(dir); err == nil || dir == root {
				break
			}
			dir = filepath.Dir(dir)
		}
		if unix.Access(dir, unix.W_OK) != nil {
			notWritable = append(notWritable, dir)
		}
	}
	check("cgroup delegation", len(notWritable) == 0, "%s is not writable: sbx must be able to create its groups there", strings.Join(notWritable, ", "))

	// The native jail is built on the user namespace: without it there is
	// no native sandbox at all, accepted gap or not.
	usernsWhy := d.missingReason(sandbox.LayerUserNS)
	check("user namespaces", usernsWhy == "", "%s", usernsWhy)

	// The sandbox runs sbx-agent, which agentbin refuses when built with
	// cgo, or else this very binary.
	check("static binary", d.agentExe != d.exe || !builtWithCgo(),
		"this sbx binary was built with cgo, so the init stage cannot confine every thread of the sandbox: rebuild it with CGO_ENABLED=0 (make build does)")

	_, err = os.Stat(d.exe)
	if err == nil {
		_, err = os.Stat(d.agentExe)
	}
	check("sealed binary", err == nil, "the sealed copy of the sbx binary is missing (%v): restart sbx serve to make it again", err)

	rep := backend.Report{Backend: Name, Available: true, Sandbox: true, Layers: d.layers(), Checks: checks, Templates: d.templateNames()}
	for l, st := range rep.Layers {
		if st == sandbox.Missing {
			if rep.LayerReasons == nil {
				rep.LayerReasons = map[string]string{}
			}
			rep.LayerReasons[l] = d.missingReason(l)
		}
	}
	rep.Level = sandbox.LevelName(Name, rep.Layers)
	for _, c := range checks {
		rep.Available = rep.Available && c.OK
	}
	return rep, nil
}

// missingReason says why this host cannot apply layer l, or "" when it can.
func (d *Driver) missingReason(l string) string {
	if why, ok := d.unsupported[l]; ok {
		return why
	}
	if why := fault.Missing(l); why != "" {
		return why
	}
	switch l {
	case sandbox.LayerCgroup:
		if !d.cgroupComplete() {
			return fmt.Sprintf("the memory, pids and cpu cgroup controllers are not all available (cgroup layout %s)", d.layout.Mode())
		}
	case sandbox.LayerUserNS:
		b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
		if err != nil {
			return "the kernel has no user namespaces (/proc/sys/user/max_user_namespaces: " + err.Error() + ")"
		}
		if strings.TrimSpace(string(b)) == "0" {
			return "user namespaces are disabled: user.max_user_namespaces is 0"
		}
	case sandbox.LayerLandlock:
		if abi, err := landlockABI(); err != nil || abi < 1 {
			return fmt.Sprintf("Landlock is not available (%v): add landlock to the kernel's lsm= boot parameter", err)
		}
	case sandbox.LayerSeccomp:
		if ok, why := seccompSupported(); !ok {
			return "seccomp filters are not available: " + why
		}
	}
	return ""
}

// The kernel's Landlock ABI and seccomp support, asked once: every create
// asks what this host can apply.
var (
	landlockABI      = sync.OnceValues(landlock.ABI)
	seccompSupported = sync.OnceValues(seccomp.Supported)
)

// builtWithCgo reports whether this binary was built with cgo, which stops
// syscall.AllThreadsSyscall, and so the init stage's confinement of every
// thread.
func builtWithCgo() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" {
			return s.Value == "1"
		}
	}
	return false
}
