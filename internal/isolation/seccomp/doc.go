// Package seccomp compiles seccomp-bpf profiles (data) into filters and loads
// them on one thread.
//
// A profile is a deny list: every syscall is allowed unless a rule denies it,
// with an errno or by killing the process. Under every profile lies a floor
// no profile can lift (module and kexec calls, bpf, the mount family, the
// keyring, reboot, swapon, open_by_handle_at, perf_event_open, btrfs's
// subvolume and snapshot ioctls, which would let a sandbox escape its disk
// quota), and every
// filter starts by checking the architecture: a call through another ABI
// (i386's int 0x80, x32's numbers) kills the process, so a rule written for
// x86_64 numbers cannot be walked around.
//
// clone3 cannot be inspected (its flags sit behind a pointer) and gets
// ENOSYS, so libc falls back to clone, whose flags the filter checks. The
// agent forks processes with Go's runtime, which calls clone3 only to start a
// child in its cgroup and passes 0 in the third register where glibc's
// wrapper always passes its function pointer; the default profile lets that
// one shape through. A clone3 that copies it still makes no namespace: the
// sandbox's processes hold no CAP_SYS_ADMIN and their user namespace limit is
// 0.
//
// ptrace and process_vm_readv stay allowed (debuggers and profilers need
// them): the agent is not dumpable, and each process the agent starts gets a
// Landlock domain of its own, which may not trace outside itself.
//
// The agent loads a filter on the thread it forks a process from, last before
// the fork (the child inherits it, and the thread is thrown away), so the
// agent itself is not filtered.
package seccomp
