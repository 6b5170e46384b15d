package landlock

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// requireLandlock skips without Landlock, unless SBX_TEST_REQUIRE names it.
func requireLandlock(t *testing.T) int {
	t.Helper()
	abi, err := ABI()
	if err != nil || abi < 1 {
		if strings.Contains(os.Getenv("SBX_TEST_REQUIRE"), "landlock") {
			t.Fatalf("Landlock required: %v", err)
		}
		t.Skipf("no Landlock: %v", err)
	}
	return abi
}

// TestMain runs the child half of TestRestrictThread when asked.
func TestMain(m *testing.M) {
	if os.Getenv("SBX_LANDLOCK_CHILD") != "" {
		child()
		return
	}
	os.Exit(m.Run())
}

// child reports, as JSON on stdout, the outcome of each probe before and
// after restricting one thread, and on a second, unrestricted thread.
func child() {
	a, b := os.Getenv("DIR_A"), os.Getenv("DIR_B")
	out := map[string]string{}
	probe := func(prefix string) {
		res := func(err error) string {
			if err == nil {
				return "ok"
			}
			var errno syscall.Errno
			if errors.As(err, &errno) {
				return unix.ErrnoName(errno)
			}
			return err.Error()
		}
		out[prefix+"write_a"] = res(os.WriteFile(filepath.Join(a, prefix+"f"), []byte("x"), 0o644))
		out[prefix+"write_b"] = res(os.WriteFile(filepath.Join(b, prefix+"f"), []byte("x"), 0o644))
		f, err := os.Open("/etc/hostname")
		if err == nil {
			f.Close()
		}
		out[prefix+"read_etc"] = res(err)
		out[prefix+"devnull"] = res(os.WriteFile("/dev/null", []byte("x"), 0))
		out[prefix+"fifo_a"] = res(unix.Mkfifo(filepath.Join(a, prefix+"fifo"), 0o600))
		out[prefix+"mknod_a"] = res(unix.Mknod(filepath.Join(a, prefix+"null"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))))
		_, err = syscall.ForkExec("/bin/sh", []string{"sh", "-c", "echo x > " + b + "/" + prefix + "sh"}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
		if err == nil {
			var ws syscall.WaitStatus
			syscall.Wait4(-1, &ws, 0, nil)
			if ws.ExitStatus() != 0 {
				err = errors.New("child shell failed")
			}
		}
		out[prefix+"child_write_b"] = res(err)
	}
	runtime.LockOSThread()
	probe("before_")
	// A second thread, locked before the restriction, for the per-thread check.
	other := make(chan string)
	go func() {
		runtime.LockOSThread()
		<-other
		err := os.WriteFile(filepath.Join(b, "other"), []byte("x"), 0o644)
		if err != nil {
			other <- err.Error()
		} else {
			other <- "ok"
		}
	}()
	rs, err := Build(Rules{Read: []string{"/"}, Write: []string{a, "/dev/null", "/nonexistent/sbx"}})
	if err != nil {
		out["build"] = err.Error()
	} else {
		out["skipped"] = strings.Join(rs.Skipped(), ",")
		if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
			out["nnp"] = e.Error()
		}
		if err := rs.RestrictThread(); err != nil {
			out["restrict"] = err.Error()
		}
		probe("after_")
	}
	other <- ""
	out["other_thread_write_b"] = <-other
	json.NewEncoder(os.Stdout).Encode(out)
	os.Exit(0)
}

func TestRestrictThread(t *testing.T) {
	requireLandlock(t)
	a, b := t.TempDir(), t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SBX_LANDLOCK_CHILD=1", "DIR_A="+a, "DIR_B="+b)
	cmd.Stderr = os.Stderr
	js, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var got map[string]string
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatalf("child said %q: %v", js, err)
	}
	want := map[string]string{
		// Controls: before the restriction everything works.
		"before_write_a": "ok", "before_write_b": "ok", "before_read_etc": "ok", "before_devnull": "ok",
		"before_fifo_a": "ok", "before_mknod_a": "ok", "before_child_write_b": "ok",
		// After: only the rules.
		"after_write_a": "ok", "after_write_b": "EACCES", "after_read_etc": "ok", "after_devnull": "ok",
		"after_fifo_a": "ok", "after_mknod_a": "EACCES", "after_child_write_b": "child shell failed",
		// The restriction is the thread's alone.
		"other_thread_write_b": "ok",
		"skipped":              "/nonexistent/sbx",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, k := range []string{"build", "nnp", "restrict"} {
		if got[k] != "" {
			t.Errorf("%s: %s", k, got[k])
		}
	}
}

func TestABI(t *testing.T) {
	abi := requireLandlock(t)
	if handled(abi)&readRights != readRights {
		t.Errorf("ABI %d handles %#x, lacking read rights", abi, handled(abi))
	}
}
