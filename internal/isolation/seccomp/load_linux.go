package seccomp

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LoadThread installs the filter on the calling thread only (no TSYNC). The
// caller holds runtime.LockOSThread, has set no_new_privs on the thread, and
// discards the thread afterwards: the filter stays with it, and with every
// process forked from it.
func (p *Program) LoadThread() error {
	prog := unix.SockFprog{Len: uint16(len(p.ins)), Filter: (*unix.SockFilter)(unsafe.Pointer(&p.ins[0]))}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(p)
	if errno != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER): %w", errno)
	}
	return nil
}

// Supported reports whether the kernel filters syscalls with seccomp-bpf,
// and why not.
func Supported() (bool, string) {
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false, "cannot read /proc/self/status: " + err.Error()
	}
	if !strings.Contains(string(st), "\nSeccomp:") {
		return false, "the kernel was built without CONFIG_SECCOMP"
	}
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return false, "prctl(PR_GET_SECCOMP): " + err.Error()
	}
	// SECCOMP_GET_ACTION_AVAIL tells filter mode is there (Linux 4.14+).
	act := uint32(unix.SECCOMP_RET_KILL_PROCESS)
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&act))); e != 0 {
		return false, "seccomp filters lack SECCOMP_RET_KILL_PROCESS: " + e.Error()
	}
	return true, ""
}
