// This file implements the init stage's ordered containment steps.

package nsinit

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/isolation/cgroup"
	"sbx.dev/sbx/internal/isolation/mount"
)

// maxPlanBytes bounds the plan read from the parent.
const maxPlanBytes = 1 << 20

// Main runs the init stage in the calling process, which the backend started in
// its new namespaces and cgroups. With a program in the plan it ends in execve of
// it; without one it returns, and the caller goes on to be the agent in this same
// process (one program start per sandbox), and it returns the agent's
// configuration from the plan. StatusFD stays open on return: the
// agent closes it once it serves. On error Main reports on StatusFD and exits 1.
func Main() (agentConfig []byte) {
	Mark("runtime") // exec, the Go runtime's start and package init
	// Capabilities and no_new_privs are per thread: they are applied to every
	// thread of the process, and this one, which execs when there is a program,
	// stays put in case that is not possible.
	runtime.LockOSThread()
	agentConfig, err := run()
	if err == nil {
		runtime.UnlockOSThread()
		return agentConfig
	}
	msg := []byte(err.Error())
	unix.Write(StatusFD, msg)
	os.Stderr.Write(append([]byte("sbx init: "), append(msg, '\n')...))
	os.Exit(1)
	return nil
}

// step names a failed step in the error init reports.
func step(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}

// layers are what the steps of this process's init stage applied, each
// "applied" or why not, read back from the kernel where it tells.
var layers = map[string]string{}

// Layers returns what the init stage applied: layer name to "applied" or the
// reason it is not. The agent reports them with its own.
func Layers() map[string]string { return layers }

func run() (agentConfig []byte, err error) {
	p, err := readPlan()
	if err != nil {
		return nil, step("reading plan", err)
	}
	Mark("plan")
	keep, err := CapMask(p.Caps)
	if err != nil {
		return nil, step("caps", err)
	}
	// The parent started this process in its cgroups and in a new cgroup
	// namespace, which is therefore rooted at the sandbox's groups.
	if err := unix.Sethostname([]byte(p.Hostname)); err != nil {
		return nil, step("sethostname", err)
	}
	for _, fd := range p.CloseFDs {
		unix.Close(fd)
	}
	// Host paths (cgroup files) are reachable only until pivot_root.
	if err := openFDs(p.OpenFDs); err != nil {
		return nil, step("opening fds", err)
	}
	if err := limitUserNamespaces(p.UserNamespaces); err != nil {
		return nil, step("userns", err)
	}
	if err := mount.MakePrivate(); err != nil {
		return nil, step("mounts", err)
	}
	if len(p.Mount.Attach) > 0 {
		fds, err := receiveFDs(p.MountsFD, len(p.Mount.Attach))
		if err != nil {
			return nil, step("mounts", fmt.Errorf("receiving the idmapped layers: %w", err))
		}
		if err := mount.Attach(fds, p.Mount.Attach); err != nil {
			return nil, step("mounts", err)
		}
	}
	if err := mount.Assemble(p.Mount); err != nil {
		return nil, step("mounts", err)
	}
	if err := mount.PivotRoot(p.Mount.Root, p.Workdir); err != nil {
		return nil, step("pivot_root", err)
	}
	layers["mntns"] = "applied"
	Mark("mounts")
	if err := LoopbackUp(); err != nil {
		return nil, step("loopback", err)
	}
	if err := setRlimits(p.NoFile, p.NProc); err != nil {
		return nil, step("rlimits", err)
	}
	layers["rlimits"] = "applied"
	// Every thread, or with a program to exec (which ends the other threads)
	// at least this one; the agent runs on after, so it needs them all.
	if err := confine(keep, p.Path != "", p.BoundingPerThread && p.Path == ""); err != nil {
		return nil, err
	}
	layers["caps"], layers["nnp"], layers["userns"] = checkCaps(keep, p.BoundingPerThread && p.Path == ""), checkNNP(), checkUserNS()
	Mark("confine")
	if p.Path == "" {
		// The agent runs on in this process: every fd it holds stays open, none
		// reaches a program it starts unless handed over explicitly.
		if err := closeFDs(nil); err != nil {
			return nil, step("closefds", err)
		}
		layers["closefds"] = "applied"
		return p.Agent, nil
	}
	if err := closeFDs(keptFDs(p)); err != nil {
		return nil, step("closefds", err)
	}
	return nil, step("execve "+p.Path, unix.Exec(p.Path, p.Argv, p.Env))
}

func readPlan() (*Plan, error) {
	// The pipe may have been left non-blocking; raw reads want blocking.
	if err := unix.SetNonblock(PlanFD, false); err != nil {
		return nil, err
	}
	// A plan is a few KiB: a small buffer, grown as needed, spares the fresh
	// process page faults.
	buf := make([]byte, 0, 8<<10)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, len(buf))
		}
		n, err := unix.Read(PlanFD, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
		if len(buf) > maxPlanBytes {
			return nil, fmt.Errorf("plan exceeds %d bytes", maxPlanBytes)
		}
	}
	unix.Close(PlanFD)
	if len(buf) == 0 {
		return nil, errors.New("no plan: the parent closed the pipe")
	}
	var p Plan
	if err := p.UnmarshalBinary(buf); err != nil {
		return nil, err
	}
	return &p, nil
}

// openFDs opens each file and moves it to its planned number, which must be
// free: the agent is told these numbers in advance.
func openFDs(fds []OpenFD) error {
	for _, o := range fds {
		fd, err := unix.Open(o.Path, o.Flags|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: o.Path, Err: err}
		}
		if fd == o.FD {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(o.FD), unix.F_GETFD, 0); err == nil {
			unix.Close(fd)
			return fmt.Errorf("moving %s to fd %d: fd %d is in use", o.Path, o.FD, o.FD)
		}
		if err := unix.Dup3(fd, o.FD, unix.O_CLOEXEC); err != nil {
			unix.Close(fd)
			return fmt.Errorf("moving %s to fd %d: %w", o.Path, o.FD, err)
		}
		unix.Close(fd)
	}
	return nil
}

func keptFDs(p *Plan) []int {
	keep := slices.Clone(p.KeepFDs)
	for _, o := range p.OpenFDs {
		keep = append(keep, o.FD)
	}
	return keep
}

// closeFDs marks every fd from 3 up close-on-exec, then clears the flag on keep:
// no fd the init inherited or opened reaches the agent unless declared
// (CVE-2024-21626).
func closeFDs(keep []int) error {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("close_range: %w", err)
	}
	for _, fd := range keep {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("keeping fd %d: %w", fd, err)
		}
	}
	return nil
}

// LoopbackUp brings lo up in the calling thread's network namespace, unless
// it is up already: a namespace made at the init's clone has it down, one
// the spawner made ahead (which the init has no capability over) has it up.
func LoopbackUp() error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return os.NewSyscallError("ioctl SIOCGIFFLAGS", err)
	}
	if ifr.Uint16()&unix.IFF_UP != 0 {
		return nil
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return os.NewSyscallError("ioctl SIOCSIFFLAGS", err)
	}
	return nil
}

// setRlimits sets RLIMIT_NOFILE to min(nofile, current hard) — a hard limit
// cannot be raised without CAP_SYS_RESOURCE —, RLIMIT_CORE to 0 (no core
// dumps of sandboxed memory) and, with nproc > 0, RLIMIT_NPROC to nproc (the
// tasks of the sandbox's root, a second bound behind the pids cgroup). Each
// is read back.
func setRlimits(nofile, nproc uint64) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if nofile > 0 {
		n := min(nofile, lim.Max)
		// syscall.Setrlimit, not unix's: it also stops syscall.Exec from restoring
		// the soft limit the Go runtime found at start.
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
			return fmt.Errorf("nofile %d: %w", n, err)
		}
	}
	set := []struct {
		name string
		res  int
		val  uint64
	}{{"core", unix.RLIMIT_CORE, 0}}
	if nproc > 0 {
		set = append(set, struct {
			name string
			res  int
			val  uint64
		}{"nproc", unix.RLIMIT_NPROC, nproc})
	}
	for _, r := range set {
		if err := unix.Setrlimit(r.res, &unix.Rlimit{Cur: r.val, Max: r.val}); err != nil {
			return fmt.Errorf("%s %d: %w", r.name, r.val, err)
		}
		var got unix.Rlimit
		if err := unix.Getrlimit(r.res, &got); err != nil || got.Max != r.val {
			return fmt.Errorf("%s: reads back %d, not %d (%v)", r.name, got.Max, r.val, err)
		}
	}
	return nil
}

// checkCaps reads back the calling thread's capability sets: every set holds
// keep at most, and the bounding and effective sets exactly keep (the
// bounding set whole, with perThread: the agent narrows it where it forks).
func checkCaps(keep uint64, perThread bool) string {
	st, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return "cannot read /proc/thread-self/status: " + err.Error()
	}
	for _, line := range strings.Split(string(st), "\n") {
		name, val, ok := strings.Cut(line, ":\t")
		if !ok || !strings.HasPrefix(name, "Cap") {
			continue
		}
		v, err := strconv.ParseUint(val, 16, 64)
		if err != nil {
			return "cannot parse " + line
		}
		if perThread && name == "CapBnd" {
			continue
		}
		if v&^keep != 0 || (name == "CapBnd" || name == "CapEff") && v != keep {
			return fmt.Sprintf("%s is %016x, want %016x", name, v, keep)
		}
	}
	return "applied"
}

func checkNNP() string {
	v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil || v != 1 {
		return fmt.Sprintf("no_new_privs reads %d (%v)", v, err)
	}
	return "applied"
}

// checkUserNS reads the user namespace's uid map: the initial namespace maps
// every id to itself.
func checkUserNS() string {
	m, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return "cannot read /proc/self/uid_map: " + err.Error()
	}
	f := strings.Fields(string(m))
	if len(f) < 3 || f[0] == "0" && f[1] == "0" && f[2] == "4294967295" {
		return "the process is in the host's user namespace"
	}
	return "applied"
}

// limitUserNamespaces sets how many user namespaces the sandbox's processes
// may create, in the sandbox's own user namespace (the sysctl is per user
// namespace; init, root there with every capability still, may write it).
// It runs before pivot_root, through the host's /proc.
func limitUserNamespaces(n int) error {
	if n < 0 {
		return nil
	}
	return cgroup.WriteFileAt(unix.AT_FDCWD, "/proc/sys/user/max_user_namespaces", strconv.Itoa(n))
}

// receiveFDs reads one message carrying n fds from the unix socket sock, then
// closes it.
func receiveFDs(sock, n int) ([]int, error) {
	defer unix.Close(sock)
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*n))
	for {
		_, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, err
		}
		var fds []int
		for i := range msgs {
			got, err := unix.ParseUnixRights(&msgs[i])
			if err != nil {
				return nil, err
			}
			fds = append(fds, got...)
		}
		if len(fds) != n {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return nil, fmt.Errorf("got %d fds, want %d", len(fds), n)
		}
		return fds, nil
	}
}
