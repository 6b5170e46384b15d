package forker

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cloneArgs is the kernel's struct clone_args, as far as its cgroup field
// (88 bytes, CLONE_ARGS_SIZE_VER2).
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls, setTID, setTIDSize, cgroup uint64
}

// childPlan is what rawClone3's child does; the assembly reads it at fixed
// offsets (checked by init). Its pointers keep what they point to alive.
type childPlan struct {
	path    *byte
	argv    **byte
	envp    **byte
	sync    int64 // read end of the sync pipe, or -1
	err     int64 // write end of the error pipe
	setIDs  int64 // 1: setgroups(none), setresgid(0), setresuid(0)
	fds     *int64
	nfds    int64
	sigmask uint64
	dfl     *[4]uint64 // a zeroed kernel sigaction: SIG_DFL
}

func init() {
	var p childPlan
	for _, f := range []struct {
		off, want uintptr
	}{{unsafe.Offsetof(p.path), 0}, {unsafe.Offsetof(p.argv), 8}, {unsafe.Offsetof(p.envp), 16},
		{unsafe.Offsetof(p.sync), 24}, {unsafe.Offsetof(p.err), 32}, {unsafe.Offsetof(p.setIDs), 40},
		{unsafe.Offsetof(p.fds), 48}, {unsafe.Offsetof(p.nfds), 56}, {unsafe.Offsetof(p.sigmask), 64},
		{unsafe.Offsetof(p.dfl), 72}} {
		if f.off != f.want {
			panic("forker: childPlan's layout does not match clone_linux_amd64.s")
		}
	}
	if unsafe.Sizeof(cloneArgs{}) != 88 {
		panic("forker: cloneArgs is not the kernel's struct clone_args")
	}
}

// rawClone3 is in clone_linux_amd64.s.
//
//go:noescape
func rawClone3(args *cloneArgs, plan *childPlan) int64

// childStackSize is the child's stack: the assembly uses 64 bytes of it.
const childStackSize = 16 << 10

// SharedSupported says the spawner's children share its memory until their
// exec (sharedStart).
const SharedSupported = true

// sharedStart starts r's program as a child that shares this process's
// memory until it execs (clone3 with CLONE_VM): files[i] (a descriptor of
// this process, or -1 for none) becomes the child's descriptor i, and the
// child is born in group cgroupFD (-1: none); with a new user namespace it
// takes ids 0 there, mapped to r.UID's range. So the fork copies no
// page table and write-protects nothing: the child runs a few system calls
// of assembly on a stack of its own, while this thread writes its uid and
// gid maps and then waits for its exec. It must run on a locked OS thread
// that is thrown away afterwards (ForkInDirs), whose signal mask it changes
// for the moment of the clone.
func sharedStart(r Request, files []int, cgroupFD int) (pid, pidfd int, err error) {
	path, err := syscall.BytePtrFromString(r.Path)
	if err != nil {
		return -1, -1, err
	}
	argv, err := syscall.SlicePtrFromStrings(r.Args)
	if err != nil {
		return -1, -1, err
	}
	envp, err := syscall.SlicePtrFromStrings(r.Env)
	if err != nil {
		return -1, -1, err
	}
	// Every source goes above the last descriptor the child sets, so that
	// setting them in order overwrites none still to be moved.
	fds := make([]int64, len(files))
	var dups []int
	defer func() {
		for _, fd := range dups {
			unix.Close(fd)
		}
	}()
	for i, fd := range files {
		fds[i] = -1
		if fd < 0 {
			continue
		}
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, len(files))
		if err != nil {
			return -1, -1, os.NewSyscallError("fcntl", err)
		}
		dups = append(dups, d)
		fds[i] = int64(d)
	}
	// The child's own ends of its pipes go above the descriptors it sets
	// too, or setting those would close or replace them.
	var errPipe [2]int
	if err := childPipe(&errPipe, 1, len(files)); err != nil {
		return -1, -1, err
	}
	defer unix.Close(errPipe[0])
	userNS := r.Cloneflags&unix.CLONE_NEWUSER != 0
	syncPipe := [2]int{-1, -1}
	if userNS {
		if err := childPipe(&syncPipe, 0, len(files)); err != nil {
			unix.Close(errPipe[1])
			return -1, -1, err
		}
		defer unix.Close(syncPipe[1])
	}
	stack, err := unix.Mmap(-1, 0, childStackSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_STACK)
	if err != nil {
		unix.Close(errPipe[1])
		unix.Close(syncPipe[0])
		return -1, -1, os.NewSyscallError("mmap", err)
	}
	plan := &childPlan{
		path: path, argv: &argv[0], envp: &envp[0],
		sync: int64(syncPipe[0]), err: int64(errPipe[1]),
		nfds: int64(len(fds)), dfl: new([4]uint64),
	}
	if len(fds) > 0 {
		plan.fds = &fds[0]
	}
	if userNS {
		plan.setIDs = 1
	}
	var childPidfd int32 = -1
	args := &cloneArgs{
		flags:      uint64(r.Cloneflags) | unix.CLONE_VM | unix.CLONE_PIDFD,
		pidfd:      uint64(uintptr(unsafe.Pointer(&childPidfd))),
		exitSignal: uint64(unix.SIGCHLD),
		stack:      uint64(uintptr(unsafe.Pointer(&stack[0]))),
		stackSize:  childStackSize,
	}
	if cgroupFD >= 0 {
		args.flags |= unix.CLONE_INTO_CGROUP
		args.cgroup = uint64(cgroupFD)
	}

	// No fd without close-on-exec is made while the child copies the table
	// (syscall.ForkLock's rule), and no signal reaches the child while it
	// still has the runtime's handlers: it starts with every one blocked.
	syscall.ForkLock.Lock()
	all, old := ^uint64(0), uint64(0)
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&all)), uintptr(unsafe.Pointer(&old)), 8, 0, 0)
	ret := rawClone3(args, plan)
	unix.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&old)), 0, 8, 0, 0)
	syscall.ForkLock.Unlock()

	unix.Close(errPipe[1])
	if syncPipe[0] >= 0 {
		unix.Close(syncPipe[0])
	}
	if ret < 0 {
		unix.Munmap(stack)
		return -1, -1, os.NewSyscallError("clone3", syscall.Errno(-ret))
	}
	pid, pidfd = int(ret), int(childPidfd)
	fail := func(err error) (int, int, error) {
		// The child exits by itself once the sync pipe closes or it failed;
		// the kill is for any other way here. Reaped before its pid can be
		// anyone else's, and before its stack goes.
		unix.Kill(pid, unix.SIGKILL)
		reap(pid)
		unix.Close(pidfd)
		unix.Munmap(stack)
		return -1, -1, err
	}
	if userNS {
		ids := fmt.Sprintf("0 %d %d\n", r.UID, r.Size)
		for _, f := range []string{"uid_map", "gid_map"} {
			if err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/"+f, []byte(ids), 0); err != nil {
				return fail(fmt.Errorf("writing the %s of %s: %w", f, r.Path, err))
			}
		}
		if _, err := unix.Write(syncPipe[1], []byte{0}); err != nil {
			return fail(os.NewSyscallError("write", err))
		}
	}
	// The error pipe reads end-of-file at the exec (or at the child's death,
	// which its wait reports), or the errno that stopped it.
	var buf [4]byte
	var n int
	for {
		n, err = unix.Read(errPipe[0], buf[:])
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fail(os.NewSyscallError("read", err))
	}
	if n != 0 {
		errno := syscall.Errno(*(*int32)(unsafe.Pointer(&buf[0])))
		return fail(&os.PathError{Op: "fork/exec", Path: r.Path, Err: errno})
	}
	runtime.KeepAlive(plan)
	runtime.KeepAlive(argv)
	runtime.KeepAlive(envp)
	runtime.KeepAlive(fds)
	unix.Munmap(stack)
	return pid, pidfd, nil
}

// childPipe makes a close-on-exec pipe into fds whose end fds[child], the
// one the child of sharedStart uses, is numbered min or above.
func childPipe(fds *[2]int, child, min int) error {
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return os.NewSyscallError("pipe2", err)
	}
	if fds[child] >= min {
		return nil
	}
	d, err := unix.FcntlInt(uintptr(fds[child]), unix.F_DUPFD_CLOEXEC, min)
	unix.Close(fds[child])
	fds[child] = d
	if err != nil {
		unix.Close(fds[1-child])
		return os.NewSyscallError("fcntl", err)
	}
	return nil
}
