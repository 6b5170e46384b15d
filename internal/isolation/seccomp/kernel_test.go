package seccomp

import (
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	switch os.Getenv("SBX_SECCOMP_CHILD") {
	case "probes":
		probes()
	case "int80":
		int80()
	}
	os.Exit(m.Run())
}

// filtered locks the thread, sets no_new_privs on it and loads the default
// profile there.
func filtered() {
	runtime.LockOSThread()
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
		panic(e)
	}
	p, _ := Lookup("default")
	prog, err := Compile(p)
	if err != nil {
		panic(err)
	}
	if err := prog.LoadThread(); err != nil {
		panic(err)
	}
}

// probes makes each call on the filtered thread and reports its errno.
func probes() {
	filtered()
	out := map[string]string{}
	res := func(name string, e syscall.Errno) {
		if e == 0 {
			out[name] = "ok"
		} else {
			out[name] = unix.ErrnoName(e)
		}
	}
	src, tgt := []byte("none\x00"), []byte("/tmp\x00")
	_, _, e := syscall.RawSyscall6(syscall.SYS_MOUNT, uintptr(unsafe.Pointer(&src[0])), uintptr(unsafe.Pointer(&tgt[0])), uintptr(unsafe.Pointer(&src[0])), 0, 0, 0)
	res("mount", e)
	_, _, e = syscall.RawSyscall(syscall.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
	res("unshare_user", e)
	var args [88]byte
	_, _, e = syscall.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args[0])), 88, 0x1234)
	res("clone3_libc", e)
	_, _, e = syscall.RawSyscall(unix.SYS_KEYCTL, 0, 0, 0)
	res("keyctl", e)
	_, _, e = syscall.RawSyscall(syscall.SYS_PERSONALITY, 8, 0, 0)
	res("personality_linux32", e)
	_, _, e = syscall.RawSyscall(syscall.SYS_PERSONALITY, 0xffffffff, 0, 0)
	res("personality_query", e)
	addr, _, e := syscall.RawSyscall6(syscall.SYS_MMAP, 0, 4096, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, ^uintptr(0), 0)
	res("mmap_wx", e)
	if e == 0 {
		syscall.RawSyscall(syscall.SYS_MUNMAP, addr, 4096, 0)
	}
	_, _, e = syscall.RawSyscall(syscall.SYS_GETPID, 0, 0, 0)
	res("getpid", e)
	// A plain fork from the filtered thread works, and the child inherits
	// the filter: it cannot mount either.
	pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", "grep -q '^Seccomp:.2' /proc/self/status"}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
	if err != nil {
		out["fork"] = err.Error()
	} else {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
		out["fork"] = "ok"
		if ws.ExitStatus() != 0 {
			out["child_filtered"] = "no"
		} else {
			out["child_filtered"] = "yes"
		}
	}
	json.NewEncoder(os.Stdout).Encode(out)
	os.Exit(0)
}

func int80() {
	filtered()
	int80getpid()
	os.Exit(0) // not reached: the process is killed
}

func child(t *testing.T, which string) *exec.Cmd {
	if ok, why := Supported(); !ok {
		t.Skipf("no seccomp: %s", why)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SBX_SECCOMP_CHILD="+which)
	cmd.Stderr = os.Stderr
	return cmd
}

func TestKernelDefault(t *testing.T) {
	js, err := child(t, "probes").Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var got map[string]string
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatalf("child said %q", js)
	}
	for k, v := range map[string]string{
		"mount": "EPERM", "unshare_user": "EPERM", "clone3_libc": "ENOSYS", "keyctl": "EPERM",
		"personality_linux32": "EPERM", "personality_query": "ok", "mmap_wx": "ok", "getpid": "ok",
		"fork": "ok", "child_filtered": "yes",
	} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

// A call through the i386 ABI kills the process (SIGSYS).
func TestKernelForeignABI(t *testing.T) {
	err := child(t, "int80").Run()
	ee, ok := err.(*exec.ExitError)
	if !ok {
		t.Fatalf("the child survived an int $0x80 call: %v", err)
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
		t.Errorf("child ended %v, want killed by SIGSYS", ee)
	}
}
