// Package testutil holds helpers for sbx's tests: a test logger, Require* probes
// that skip only when the host truly lacks a feature (and fail instead when
// SBX_TEST_REQUIRE names it), a cached build of cmd/sbx, and leak checks on the
// host and in the test process. No production package imports it.
package testutil

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Logger returns a logger writing to t's output.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Required reports whether feature is named in SBX_TEST_REQUIRE (comma-separated).
func Required(feature string) bool {
	for _, f := range strings.Split(os.Getenv("SBX_TEST_REQUIRE"), ",") {
		if strings.TrimSpace(f) == feature {
			return true
		}
	}
	return false
}

// skip skips t for lack of feature, or fails it when SBX_TEST_REQUIRE names it.
func skip(t testing.TB, feature, format string, args ...any) {
	t.Helper()
	if Required(feature) {
		t.Fatalf("SBX_TEST_REQUIRE names %s, but: "+format, append([]any{feature}, args...)...)
	}
	t.Skipf(format, args...)
}

// RequireRoot skips t unless it runs as root (feature "root").
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		skip(t, "root", "requires root (effective uid %d)", os.Geteuid())
	}
}

// RequireCgroup skips t unless cgroup controller ctrl is mounted, as a v1
// hierarchy or in the v2 root's cgroup.controllers (feature "cgroup:<ctrl>").
func RequireCgroup(t testing.TB, ctrl string) {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("reading mountinfo: %v", err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, q := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(q) < 3 {
			continue
		}
		switch q[0] {
		case "cgroup":
			if slices.Contains(strings.Split(q[2], ","), ctrl) {
				return
			}
		case "cgroup2":
			b, err := os.ReadFile(filepath.Join(f[4], "cgroup.controllers"))
			if err == nil && slices.Contains(strings.Fields(string(b)), ctrl) {
				return
			}
		}
	}
	skip(t, "cgroup:"+ctrl, "requires the %s cgroup controller (neither a v1 hierarchy nor the v2 root has it)", ctrl)
}

// RequireUserNS skips t when this host denies user namespaces, and fails it on
// any other error from the probe (feature "userns").
func RequireUserNS(t testing.TB) {
	t.Helper()
	requireNS(t, "userns", syscall.CLONE_NEWUSER)
}

// RequireNamespaces skips t unless a child can be started in new pid, mount,
// uts, ipc, net and cgroup namespaces (feature "namespaces").
func RequireNamespaces(t testing.TB) {
	t.Helper()
	requireNS(t, "namespaces", syscall.CLONE_NEWPID|syscall.CLONE_NEWNS|syscall.CLONE_NEWUTS|
		syscall.CLONE_NEWIPC|syscall.CLONE_NEWNET|syscall.CLONE_NEWCGROUP)
}

func requireNS(t testing.TB, feature string, flags uintptr) {
	t.Helper()
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
	err := cmd.Run()
	var errno syscall.Errno
	switch {
	case err == nil:
	case errors.As(err, &errno) && (errno == syscall.EPERM || errno == syscall.EINVAL || errno == syscall.ENOSYS || errno == syscall.EACCES):
		skip(t, feature, "requires namespaces %#x: %v", flags, err)
	default:
		t.Fatalf("probing namespaces %#x: %v", flags, err)
	}
}

// RequireOverlay skips t unless overlayfs is in /proc/filesystems (feature "overlay").
func RequireOverlay(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		t.Fatalf("reading /proc/filesystems: %v", err)
	}
	if !bytes.Contains(b, []byte("\toverlay\n")) {
		skip(t, "overlay", "requires overlayfs (not in /proc/filesystems)")
	}
}

var build struct {
	once sync.Once
	path string
	err  error
}

// BuildSBX builds cmd/sbx once per test process and returns the binary's path.
func BuildSBX(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			build.err = err
			return
		}
		dir, err := os.MkdirTemp("", "sbx-build-")
		if err != nil {
			build.err = err
			return
		}
		build.path = filepath.Join(dir, "sbx")
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", build.path, "./cmd/sbx")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as the Makefile builds it
		if out, err := cmd.CombinedOutput(); err != nil {
			build.err = errors.New("go build ./cmd/sbx: " + err.Error() + "\n" + string(out))
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// RemoveBuild removes what BuildSBX built. The binary serves the whole test
// process, so a package that builds it calls this from TestMain after m.Run.
func RemoveBuild() {
	if build.path != "" {
		os.RemoveAll(filepath.Dir(build.path))
	}
}

// ModuleRoot returns the directory of the sbx module's go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module sbx.dev/sbx\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod of module sbx.dev/sbx not found above the working directory")
		}
		dir = parent
	}
}

// Pending reports whether the Go file rel (relative to the module root) still
// holds panic("unimplemented"): a part written in parallel has not landed yet.
func Pending(t testing.TB, rel string) bool {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatalf("checking whether %s is implemented: %v", rel, err)
	}
	return bytes.Contains(b, []byte(`panic("unimplemented")`))
}

// DirNames lists the names in dir, sorted; an error fails t.
func DirNames(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
