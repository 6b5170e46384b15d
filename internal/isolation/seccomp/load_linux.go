package seccomp

import (
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

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
