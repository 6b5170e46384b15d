// This file implements the capability step: ambient cleared, bounding dropped to
// the kept set, then permitted, effective and inheritable set to it, then
// no_new_privs.

package nsinit

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DefaultCaps are the capabilities a sandbox's root keeps in its user
// namespace: what package managers and servers run as root need (owning,
// reading and writing any of the sandbox's files, changing user and group,
// signalling its processes, binding ports below 1024). Each is confined to
// the sandbox's own user namespace: it acts only on ids and objects the
// sandbox owns. Not kept: MKNOD (device nodes), SETFCAP (file capabilities),
// AUDIT_WRITE, NET_RAW (raw sockets) and SYS_CHROOT, which the "docker"
// profile adds back, nor SYS_ADMIN, NET_ADMIN, SYS_PTRACE, SYS_MODULE,
// DAC_READ_SEARCH and the rest, which no profile keeps.
var DefaultCaps = []string{
	"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
	"NET_BIND_SERVICE",
}

// CapProfiles are the capability sets a policy may name.
var CapProfiles = map[string][]string{
	"default": DefaultCaps,
	// docker is Docker's default set, for images that expect it: ping's raw
	// sockets, chroot, mknod (devices made still do not open: every mount is
	// nodev), setcap.
	"docker": append(slices.Clone(DefaultCaps), "SYS_CHROOT", "AUDIT_WRITE", "SETFCAP", "MKNOD", "NET_RAW"),
}

var capNumbers = map[string]uint{
	"CHOWN": unix.CAP_CHOWN, "DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
	"FOWNER": unix.CAP_FOWNER, "FSETID": unix.CAP_FSETID, "KILL": unix.CAP_KILL, "SETGID": unix.CAP_SETGID,
	"SETUID": unix.CAP_SETUID, "SETPCAP": unix.CAP_SETPCAP, "LINUX_IMMUTABLE": unix.CAP_LINUX_IMMUTABLE,
	"NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE, "NET_BROADCAST": unix.CAP_NET_BROADCAST,
	"NET_ADMIN": unix.CAP_NET_ADMIN, "NET_RAW": unix.CAP_NET_RAW, "IPC_LOCK": unix.CAP_IPC_LOCK,
	"IPC_OWNER": unix.CAP_IPC_OWNER, "SYS_MODULE": unix.CAP_SYS_MODULE, "SYS_RAWIO": unix.CAP_SYS_RAWIO,
	"SYS_CHROOT": unix.CAP_SYS_CHROOT, "SYS_PTRACE": unix.CAP_SYS_PTRACE, "SYS_PACCT": unix.CAP_SYS_PACCT,
	"SYS_ADMIN": unix.CAP_SYS_ADMIN, "SYS_BOOT": unix.CAP_SYS_BOOT, "SYS_NICE": unix.CAP_SYS_NICE,
	"SYS_RESOURCE": unix.CAP_SYS_RESOURCE, "SYS_TIME": unix.CAP_SYS_TIME, "SYS_TTY_CONFIG": unix.CAP_SYS_TTY_CONFIG,
	"MKNOD": unix.CAP_MKNOD, "LEASE": unix.CAP_LEASE, "AUDIT_WRITE": unix.CAP_AUDIT_WRITE,
	"AUDIT_CONTROL": unix.CAP_AUDIT_CONTROL, "SETFCAP": unix.CAP_SETFCAP,
}

// CapMask returns the bit mask of the named capabilities.
func CapMask(names []string) (uint64, error) {
	var m uint64
	for _, n := range names {
		c, ok := capNumbers[n]
		if !ok {
			return 0, fmt.Errorf("unknown capability %q", n)
		}
		m |= 1 << c
	}
	return m, nil
}

// InitCaps are the capabilities the init stage needs beyond the kept ones:
// mounts, pivot_root and the hostname (SYS_ADMIN), bringing lo up
// (NET_ADMIN) and the user namespace limit (SYS_RESOURCE). It holds them, and
// every other, in its own user namespace, and drops them before the agent
// serves.
var InitCaps = []string{"SYS_ADMIN", "NET_ADMIN", "SYS_RESOURCE"}

// confine applies keep and no_new_privs. Both are per thread: with allThreads
// they go to every thread of the process through syscall.AllThreadsSyscall
// (which a binary built with cgo lacks: that is an error), its threads
// gathered on one CPU meanwhile (gatherThreads), else to the calling thread
// only, which must be the one that execs.
func confine(keep uint64, threadOnly, skipBounding bool) error {
	if !threadOnly {
		defer gatherThreads()()
	}
	call := func(trap, a1, a2, a3 uintptr) error {
		var errno syscall.Errno
		if threadOnly {
			_, _, errno = syscall.RawSyscall6(trap, a1, a2, a3, 0, 0, 0)
		} else {
			_, _, errno = syscall.AllThreadsSyscall6(trap, a1, a2, a3, 0, 0, 0)
		}
		if errno == syscall.ENOTSUP && !threadOnly {
			return errors.New("the sbx binary was built with cgo, which cannot confine every thread: build it with CGO_ENABLED=0")
		}
		if errno != 0 {
			return errno
		}
		return nil
	}
	// Every thread has the calling thread's sets (threads inherit them, and
	// nothing here changes them per thread), so reading this thread's tells
	// which calls are needed.
	if ambientSet() {
		if err := call(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
			return fmt.Errorf("caps: clearing ambient capabilities: %w", err)
		}
	}
	for c := uint(0); c < 64 && !skipBounding; c++ {
		if keep&(1<<c) != 0 {
			continue
		}
		// Each drop stops every thread: only what is still there is dropped.
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err == nil && in == 0 {
			continue // the parent dropped it already (LimitBounding)
		}
		err = call(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("caps: dropping capability %d from the bounding set: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for i := range data {
		v := uint32(keep >> (32 * i))
		data[i] = unix.CapUserData{Effective: v, Permitted: v, Inheritable: v}
	}
	err := call(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(&hdr)
	runtime.KeepAlive(&data)
	if err != nil {
		return fmt.Errorf("caps: setting capabilities: %w", err)
	}
	// no_new_privs cannot be unset, and a thread inherits it from the thread
	// that made it: when this process started with it (the native backend's
	// spawner forks the init so), every thread has it, and the second stop of
	// every thread is not needed.
	if nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err == nil && nnp == 1 {
		return nil
	}
	if err := call(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	return nil
}

// ambientSet reports whether the calling thread has any ambient capability.
func ambientSet() bool {
	for c := uint(0); c < 64; c++ {
		set, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, uintptr(c), 0, 0)
		if err != nil {
			return false // past the kernel's last capability
		}
		if set == 1 {
			return true
		}
	}
	return false
}

// NarrowBounding drops from the calling thread's bounding set every
// capability not in its effective set: what a thread that forks processes
// does when init left the bounding sets whole (Plan.BoundingPerThread). It
// needs CAP_SETPCAP, which every profile keeps.
func NarrowBounding() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	eff := uint64(data[0].Effective) | uint64(data[1].Effective)<<32
	for c := uint(0); c < 64; c++ {
		if eff&(1<<c) != 0 {
			continue
		}
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			return nil // past the kernel's last capability
		}
		if err != nil || in == 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}

// gatherThreads pins every thread of the process to the CPU the calling
// thread runs on, and returns what gives them all (any thread started
// meanwhile too) the calling thread's affinity back. For AllThreadsSyscall:
// it signals each other thread and yields until that thread has made the
// call, and a thread woken on a CPU busy with other work makes it wait
// there, yielding in a loop on an otherwise idle one. Gathered, each
// signalled thread wakes where the caller yields its CPU to it. In create,
// exec and delete cycles of four workers on two cores, the init's capset
// took 2.7-2.9% of all CPU (1.6% in sched_yield) scattered, 0.7% gathered
// (this function's 0.45% included); with idle CPUs it costs ~25 us.
func gatherThreads() (restore func()) {
	var orig unix.CPUSet
	if unix.SchedGetaffinity(0, &orig) != nil {
		return func() {}
	}
	var cpu uint32
	if _, _, errno := syscall.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); errno != 0 {
		return func() {}
	}
	var one unix.CPUSet
	one.Set(int(cpu))
	setAll := func(set *unix.CPUSet) {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return
		}
		for _, e := range ents {
			if tid, err := strconv.Atoi(e.Name()); err == nil {
				unix.SchedSetaffinity(tid, set)
			}
		}
	}
	setAll(&one)
	return func() { setAll(&orig) }
}
