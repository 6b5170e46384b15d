// Package forker is the native backend's spawner process (boot.SpawnerArg,
// run from the sealed sbx-agent): it forks the sandboxes' init stages for the
// daemon.
//
// Why a process of its own: a new user namespace rules out os/exec's vfork
// (the parent writes the child's uid map while the child waits), so its fork
// copies the forking process's page tables and write-protects all of its
// memory; the forker then takes a fault on every page it writes next, and
// the child's exec tears the copy down. Forked from the daemon, that cost ~8%
// of all CPU in a create/exec/delete profile. The spawner's memory is a few
// pages of its own, and it runs from sbx-agent, whose runtime and packages
// are smaller still. On amd64 it copies nothing at all: its child shares its
// memory until the exec (sharedStart), running a few system calls of
// assembly on a stack of its own while the spawner writes its maps.
//
// The daemon and the spawner talk over a SOCK_SEQPACKET pair: a Request (JSON,
// with its files as SCM_RIGHTS) is answered by the child's pid and pidfd; when
// a child exits, the spawner says how, before it reaps it, so a pid the daemon
// hears about is never a later process's. The spawner ends when the daemon's
// end closes; its children, each in a session of its own, live on.
package forker

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/isolation/cgroup"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/timerslack"
)

// Request is one process to start. Its files travel as SCM_RIGHTS, in
// order: the working directory, stderr, the v2 cgroup (if V2), then every
// ExtraFiles entry not listed in Nil.
type Request struct {
	Path       string   `json:"path"`
	Args       []string `json:"args"`
	Env        []string `json:"env"`
	Cloneflags uintptr  `json:"cloneflags"`
	// UID is the first host id of the user namespace's range, Size its length.
	UID  int `json:"uid"`
	Size int `json:"size"`
	// V1 are the v1 group directories the child is born in.
	V1 []string `json:"v1,omitempty"`
	V2 bool     `json:"v2,omitempty"`
	// Extra is the number of ExtraFiles; Nil, those of them that are nil.
	Extra int   `json:"extra"`
	Nil   []int `json:"nil,omitempty"`
	// PooledNet lets a CLONE_NEWNET request take a network namespace the
	// spawner made ahead (netpool.go), owned by the spawner's user
	// namespace, in place of the one the clone would make.
	PooledNet bool `json:"pooled_net,omitempty"`
}

// Message is what the spawner says: the answer to a request (Pid and a
// pidfd, or Err), or, with Exited, how child Pid ended.
type Message struct {
	Pid    int           `json:"pid,omitempty"`
	Err    string        `json:"err,omitempty"`
	Exited bool          `json:"exited,omitempty"`
	Exit   *sandbox.Exit `json:"exit,omitempty"`
}

// ReceivedFDs are the descriptors of the SCM_RIGHTS messages in oob.
func ReceivedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// CloseFDs closes fds.
func CloseFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Recv receives one message on rc, a non-blocking socket under the
// runtime's poller, waiting there (not in the kernel) until one comes. Both
// ends serve on one P (GOMAXPROCS=1), and a goroutine blocked in recvmsg
// keeps the P from every goroutine it woke before it (a create waiting for
// the spawner's answer, a child's exit to report) until the runtime's monitor
// takes the P back: up to 10 ms later in a quiet process. n is 0 once the
// other end is gone; err is the read's or the socket's.
func Recv(rc syscall.RawConn, buf, oob []byte) (n, oobn int, err error) {
	rerr := rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, err = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
			if err != unix.EINTR {
				return err != unix.EAGAIN
			}
		}
	})
	if rerr != nil {
		err = rerr // closed under us
	}
	return n, oobn, err
}

// Send sends msg with oob on rc, as Recv receives: a full socket buffer
// waits in the poller.
func Send(rc syscall.RawConn, msg, oob []byte) error {
	var err error
	werr := rc.Write(func(fd uintptr) bool {
		for {
			err = unix.Sendmsg(int(fd), msg, oob, nil, unix.MSG_DONTWAIT)
			if err != unix.EINTR {
				return err != unix.EAGAIN
			}
		}
	})
	if werr != nil {
		err = werr
	}
	return err
}

// Pollable makes fd non-blocking and returns it as a file under the
// runtime's poller, with its raw connection (for Recv and Send). It closes
// fd if it fails.
func Pollable(fd int, name string) (*os.File, syscall.RawConn, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(fd), name) // non-blocking: under the poller
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, rc, nil
}

// OwnNetEnv, set to "1" in the spawner's environment, says the daemon
// started it in a network namespace of its own (the host's stays untouched).
const OwnNetEnv = "SBX_SPAWNER_OWN_NETNS"

// ChildEhashEntries is the size of each sandbox's own TCP connection hash
// (net.ipv4.tcp_child_ehash_entries, set in the spawner's own network
// namespace, which the namespaces it makes read it from). Without one, a
// sandbox's connections share the host's table, its time-wait sockets
// count against the host's limit, and the kernel walks the host's whole
// table (262144 buckets on a 24 GiB machine) when the sandbox's network
// namespace goes. 2048 buckets take 16 KiB; the namespace's time-wait
// limit is half of them.
const ChildEhashEntries = 2048

// Main is the spawner stage (boot.SpawnerArg): it serves the daemon on fd 3
// until the daemon's end closes, then exits.
func Main() {
	timerslack.Coarsen() // the inits it forks, sbx's agents, inherit it
	if os.Getenv(OwnNetEnv) == "1" {
		// A kernel before 6.1 has no such setting: the sandboxes share the
		// host's table, as before.
		if err := os.WriteFile("/proc/sys/net/ipv4/tcp_child_ehash_entries", []byte(strconv.Itoa(ChildEhashEntries)), 0); err != nil && !os.IsNotExist(err) {
			fmt.Fprintln(os.Stderr, "sbx spawner: sizing the sandboxes' TCP hash:", err)
		}
	}
	f, conn, err := Pollable(3, "daemon")
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbx spawner:", err)
		os.Exit(1)
	}
	nets := newNetPool(NetPoolSize)
	var send sync.Mutex
	// sayLocked sends m; the caller holds send.
	sayLocked := func(m Message, fds ...int) {
		b, _ := json.Marshal(m)
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		Send(conn, b, oob)
	}
	say := func(m Message, fds ...int) {
		send.Lock()
		defer send.Unlock()
		sayLocked(m, fds...)
	}
	buf := make([]byte, 1<<20)
	oob := make([]byte, unix.CmsgSpace(4*64))
	for {
		n, oobn, err := Recv(conn, buf, oob)
		if err != nil || n == 0 {
			os.Exit(0) // the daemon is gone; the children live on
		}
		runtime.KeepAlive(f) // its finalizer would close fd 3
		fds := ReceivedFDs(oob[:oobn])
		var r Request
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			CloseFDs(fds)
			say(Message{Err: "spawner: " + err.Error()})
			continue
		}
		pid, pidfd, err := start(r, fds, nets) // it closes fds
		if err != nil {
			say(Message{Err: err.Error()})
			continue
		}
		say(Message{Pid: pid}, pidfd)
		nets.refillSoon()
		go func() {
			// Wait for the exit without reaping, then reap and say so under
			// the send lock: the pid is free only from the reap, and no answer
			// naming a later child with that pid can go out before this.
			awaitExit(pid, pidfd) // it closes pidfd
			send.Lock()
			defer send.Unlock()
			e := reap(pid)
			sayLocked(Message{Pid: pid, Exited: true, Exit: &e})
		}()
	}
}

// awaitExit returns once child pid has exited, without reaping it. It
// watches pidfd (which it closes) through the runtime's poller, so a live
// sandbox costs the spawner no thread: a thread blocked in waitid per child
// stayed parked after, one per sandbox ever live at once (a burst of 500
// creates left 500). Without a pollable pidfd (a kernel before 5.10 does not
// answer waitid on a non-blocking one), it waits on a thread as before.
func awaitExit(pid, pidfd int) {
	var info unix.Siginfo
	exited := func(fd int) (bool, error) {
		for {
			switch err := unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOWAIT, nil); err {
			case nil:
				return true, nil
			case unix.EAGAIN: // running: wait until the pidfd reads
				return false, nil
			case unix.EINTR:
			default:
				return false, err
			}
		}
	}
	if err := unix.SetNonblock(pidfd, true); err == nil {
		f := os.NewFile(uintptr(pidfd), "pidfd") // non-blocking: the poller's
		defer f.Close()
		if rc, err := f.SyscallConn(); err == nil {
			var werr error
			rerr := rc.Read(func(fd uintptr) bool {
				var done bool
				done, werr = exited(int(fd))
				return done || werr != nil
			})
			if rerr == nil && werr == nil {
				return
			}
		}
	} else {
		defer unix.Close(pidfd)
	}
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

// reap waits for child pid to end, reaps it and says how it ended.
func reap(pid int) sandbox.Exit {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		switch err {
		case nil:
			return backend.ExitOfStatus(syscall.WaitStatus(ws))
		case unix.EINTR:
		default:
			return backend.ExitOf(nil)
		}
	}
}

// start starts r with fds (see Request), which it closes, as
// the init stage's fork did in the daemon: born in its v1 groups (and v2
// group), in its working directory, and in a network namespace of nets when
// r allows and one is ready. It returns the child's pid and a pidfd.
func start(r Request, fds []int, nets *netPool) (int, int, error) {
	defer CloseFDs(fds)
	want := 2 + r.Extra - len(r.Nil)
	if r.V2 {
		want++
	}
	if len(fds) != want {
		return -1, -1, fmt.Errorf("spawner: %d files for a request of %d", len(fds), want)
	}
	dir, stderr, rest := fds[0], fds[1], fds[2:]
	v2 := -1
	if r.V2 {
		v2, rest = rest[0], rest[1:]
	}
	extra := make([]int, r.Extra)
	for i := range extra {
		extra[i] = -1
		if !slices.Contains(r.Nil, i) {
			extra[i], rest = rest[0], rest[1:]
		}
	}
	var pid, pidfd int
	err := cgroup.ForkInDirs(r.V1, func() error {
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fmt.Errorf("unsharing the working directory: %w", err)
		}
		if err := unix.Fchdir(dir); err != nil {
			return fmt.Errorf("changing into the sandbox's directory: %w", err)
		}
		// Born with no_new_privs (this thread is thrown away after the
		// fork): the init then need not set it on each of its threads,
		// which stops them all. It gains nothing by its exec either way:
		// it is root of its new user namespace before and after.
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("setting no_new_privs: %w", err)
		}
		if r.PooledNet && r.Cloneflags&unix.CLONE_NEWNET != 0 && nets.joinPooled() {
			r.Cloneflags &^= unix.CLONE_NEWNET // born in the namespace this thread joined
		}
		var err error
		pid, pidfd, err = fork(r, stderr, extra, v2)
		return err
	})
	if err != nil {
		return -1, -1, err
	}
	return pid, pidfd, nil
}

// fork starts r's program on the calling thread: standard input and output
// on /dev/null, standard error on stderr, extra from descriptor 3 (-1: none
// there), in group v2 (-1: none). Where sharedStart works, the child shares
// this process's memory until its exec; elsewhere it is an os/exec fork.
func fork(r Request, stderr int, extra []int, v2 int) (int, int, error) {
	null, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, -1, &os.PathError{Op: "open", Path: os.DevNull, Err: err}
	}
	defer unix.Close(null)
	if r.Env == nil {
		r.Env = os.Environ()
	}
	if SharedSupported {
		return sharedStart(r, append([]int{null, null, stderr}, extra...), v2)
	}
	// os/exec takes *os.File, which close their descriptors when collected:
	// it gets copies, so start's stay start's to close.
	var copies []*os.File
	defer func() {
		for _, f := range copies {
			f.Close()
		}
	}()
	file := func(fd int, name string) (*os.File, error) {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, os.NewSyscallError("fcntl", err)
		}
		f := os.NewFile(uintptr(d), name)
		copies = append(copies, f)
		return f, nil
	}
	errFile, err := file(stderr, "stderr")
	if err != nil {
		return -1, -1, err
	}
	files := make([]*os.File, len(extra))
	for i, fd := range extra {
		if fd >= 0 {
			if files[i], err = file(fd, "fd"+strconv.Itoa(3+i)); err != nil {
				return -1, -1, err
			}
		}
	}
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: r.UID, Size: r.Size}}
	pidfd := -1
	cmd := &exec.Cmd{
		Path:       r.Path,
		Args:       r.Args,
		Env:        r.Env,
		Stderr:     errFile,
		ExtraFiles: files,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: r.Cloneflags, Setsid: true, PidFD: &pidfd,
			UidMappings: ids, GidMappings: ids, GidMappingsEnableSetgroups: true,
			Credential: &syscall.Credential{Uid: 0, Gid: 0},
		},
	}
	if v2 >= 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, v2
	}
	if err := cmd.Start(); err != nil {
		return -1, -1, err
	}
	pid := cmd.Process.Pid
	cmd.Process.Release() // reaped by pid (reap)
	return pid, pidfd, nil
}
