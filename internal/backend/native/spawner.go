// This file implements the spawner: a small process of this binary
// (`sbx __sbx_spawner`) that forks the sandboxes' init stages for the daemon.
//
// Why: a new user namespace rules out vfork (the parent writes the child's
// uid map while the child waits), so a sandbox's first process comes from a
// real fork, which copies the forking process's page tables and
// write-protects all of its memory; the forker then takes a fault on every
// page it writes next. Forked from the daemon, that cost ~8% of all CPU in a
// create/exec/delete profile (the fork's page-table copy, then do_wp_page and
// TLB shootdowns across the daemon's heap). The spawner's memory is a few
// pages of its own, so its forks cost little.
//
// The daemon and the spawner talk over a SOCK_SEQPACKET pair: a request (JSON,
// with its files as SCM_RIGHTS) is answered by the child's pid and pidfd; when
// a child exits, the spawner says how, before it reaps it, so a pid the daemon
// hears about is never a later process's. The spawner ends when the daemon's
// end closes; its children, each in a session of its own, live on.

package native

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"sbx/api/agent/boot"
	"sbx/internal/backend"
	"sbx/internal/isolation/cgroup"
	"sbx/internal/osthread"
	"sbx/internal/sandbox"
)

// spawnRequest is one process to start. Its files travel as SCM_RIGHTS, in
// order: the working directory, stderr, the v2 cgroup (if V2), then every
// ExtraFiles entry not listed in Nil.
type spawnRequest struct {
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
}

// spawnMessage is what the spawner says: the answer to a request (Pid and a
// pidfd, or Err), or, with Exited, how child Pid ended.
type spawnMessage struct {
	Pid    int           `json:"pid,omitempty"`
	Err    string        `json:"err,omitempty"`
	Exited bool          `json:"exited,omitempty"`
	Exit   *sandbox.Exit `json:"exit,omitempty"`
}

// spawner is the daemon's end.
type spawner struct {
	conn *os.File
	proc *os.Process

	call sync.Mutex // one request at a time
	resp chan spawnResponse

	mu     sync.Mutex
	exits  map[int]chan sandbox.Exit // guarded by mu: by pid, those held
	early  map[int]sandbox.Exit      // guarded by mu: exits heard before their hold
	closed bool                      // guarded by mu: the spawner is gone
	done   chan struct{}
}

type spawnResponse struct {
	pid, pidfd int
	err        error
}

// startSpawner starts exe's spawner stage for instance (its argv names the
// instance only, so that the process is known for whose it is).
func startSpawner(exe, instance string) (*spawner, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("starting the spawner: %w", os.NewSyscallError("socketpair", err))
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "spawner"), os.NewFile(uintptr(fds[1]), "spawner")
	defer theirs.Close()
	cmd := exec.Command(exe, boot.SpawnerArg, instance)
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		ours.Close()
		return nil, fmt.Errorf("starting the spawner: %w", err)
	}
	s := &spawner{conn: ours, proc: cmd.Process, resp: make(chan spawnResponse, 1),
		exits: map[int]chan sandbox.Exit{}, early: map[int]sandbox.Exit{}, done: make(chan struct{})}
	go s.read()
	go cmd.Wait()
	return s, nil
}

// read receives the spawner's messages until it is gone.
func (s *spawner) read() {
	defer close(s.done)
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(int(s.conn.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			s.mu.Lock()
			s.closed = true
			for pid, ch := range s.exits {
				close(ch) // the holds fall back to their pidfds
				delete(s.exits, pid)
			}
			s.mu.Unlock()
			select {
			case s.resp <- spawnResponse{err: errors.New("the spawner is gone")}:
			default:
			}
			return
		}
		fds := receivedFDs(oob[:oobn])
		var m spawnMessage
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			closeFDs(fds)
			continue
		}
		if m.Exited {
			closeFDs(fds)
			s.exited(m.Pid, *m.Exit)
			continue
		}
		r := spawnResponse{pid: m.Pid, pidfd: -1}
		switch {
		case m.Err != "":
			r.err = errors.New(m.Err)
			closeFDs(fds)
		case len(fds) != 1:
			r.err = fmt.Errorf("the spawner answered pid %d with %d pidfds", m.Pid, len(fds))
			closeFDs(fds)
		default:
			r.pidfd = fds[0]
		}
		s.resp <- r
	}
}

func (s *spawner) exited(pid int, e sandbox.Exit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch, ok := s.exits[pid]; ok {
		ch <- e
		close(ch)
		delete(s.exits, pid)
		return
	}
	s.early[pid] = e
}

// exitOf returns the channel that gets how pid ends (closed without a value
// if the spawner goes first).
func (s *spawner) exitOf(pid int) <-chan sandbox.Exit {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan sandbox.Exit, 1)
	if e, ok := s.early[pid]; ok {
		delete(s.early, pid)
		ch <- e
		close(ch)
		return ch
	}
	if s.closed {
		close(ch)
		return ch
	}
	s.exits[pid] = ch
	return ch
}

// spawn starts r with files (nil entries of extra allowed) and returns the
// child's pid and pidfd.
func (s *spawner) spawn(r spawnRequest, dir, stderr, v2 *os.File, extra []*os.File) (pid, pidfd int, err error) {
	fds := []int{int(dir.Fd()), int(stderr.Fd())}
	if v2 != nil {
		r.V2 = true
		fds = append(fds, int(v2.Fd()))
	}
	r.Extra = len(extra)
	for i, f := range extra {
		if f == nil {
			r.Nil = append(r.Nil, i)
			continue
		}
		fds = append(fds, int(f.Fd()))
	}
	msg, err := json.Marshal(r)
	if err != nil {
		return 0, -1, err
	}
	s.call.Lock()
	defer s.call.Unlock()
	if err := unix.Sendmsg(int(s.conn.Fd()), msg, unix.UnixRights(fds...), nil, 0); err != nil {
		return 0, -1, fmt.Errorf("asking the spawner: %w", err)
	}
	select {
	case res := <-s.resp:
		return res.pid, res.pidfd, res.err
	case <-s.done:
		return 0, -1, errors.New("the spawner is gone")
	}
}

// close ends the spawner: it exits once its end of the pair is shut. (A
// shutdown, not a close, wakes the reader blocked in recvmsg.)
func (s *spawner) close() {
	unix.Shutdown(int(s.conn.Fd()), unix.SHUT_RDWR)
	<-s.done
	s.conn.Close()
}

func receivedFDs(oob []byte) []int {
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

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// SpawnerMain is the spawner stage (`sbx __sbx_spawner`): it serves the
// daemon on fd 3 until the daemon's end closes, then exits.
func SpawnerMain() {
	conn := 3
	var send sync.Mutex
	// sayLocked sends m; the caller holds send.
	sayLocked := func(m spawnMessage, fds ...int) {
		b, _ := json.Marshal(m)
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		unix.Sendmsg(conn, b, oob, nil, 0)
	}
	say := func(m spawnMessage, fds ...int) {
		send.Lock()
		defer send.Unlock()
		sayLocked(m, fds...)
	}
	buf := make([]byte, 1<<20)
	oob := make([]byte, unix.CmsgSpace(4*64))
	for {
		n, oobn, _, _, err := unix.Recvmsg(conn, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			os.Exit(0) // the daemon is gone; the children live on
		}
		fds := receivedFDs(oob[:oobn])
		var r spawnRequest
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			closeFDs(fds)
			say(spawnMessage{Err: "spawner: " + err.Error()})
			continue
		}
		cmd, pidfd, err := startRequest(r, fds) // it closes fds
		if err != nil {
			say(spawnMessage{Err: err.Error()})
			continue
		}
		say(spawnMessage{Pid: cmd.Process.Pid}, pidfd)
		unix.Close(pidfd)
		go func() {
			// Wait for the exit without reaping, then reap and say so under
			// the send lock: the pid is free only from the reap, and no answer
			// naming a later child with that pid can go out before this.
			var info unix.Siginfo
			for {
				err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
				if err != unix.EINTR {
					break
				}
			}
			send.Lock()
			defer send.Unlock()
			ps, err := cmd.Process.Wait()
			e := backend.ExitOf(ps)
			if err != nil {
				e = backend.ExitOf(nil)
			}
			sayLocked(spawnMessage{Pid: cmd.Process.Pid, Exited: true, Exit: &e})
		}()
	}
}

// startRequest starts r with fds (see spawnRequest), which it closes, as
// the init stage's fork did in the daemon: born in its v1 groups (and v2
// group), in its working directory.
func startRequest(r spawnRequest, fds []int) (*exec.Cmd, int, error) {
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "fd"+strconv.Itoa(i))
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	want := 2 + r.Extra - len(r.Nil)
	if r.V2 {
		want++
	}
	if len(fds) != want {
		return nil, -1, fmt.Errorf("spawner: %d files for a request of %d", len(fds), want)
	}
	dir, stderr := fds[0], files[1]
	rest := files[2:]
	v2 := -1
	if r.V2 {
		v2, rest = int(rest[0].Fd()), rest[1:]
	}
	extra := make([]*os.File, r.Extra)
	for i := range extra {
		if slices.Contains(r.Nil, i) {
			continue
		}
		extra[i], rest = rest[0], rest[1:]
	}
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: r.UID, Size: r.Size}}
	pidfd := -1
	cmd := &exec.Cmd{
		Path:       r.Path,
		Args:       r.Args,
		Env:        r.Env,
		Stderr:     stderr,
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: r.Cloneflags, Setsid: true, PidFD: &pidfd,
			UidMappings: ids, GidMappings: ids, GidMappingsEnableSetgroups: true,
			Credential: &syscall.Credential{Uid: 0, Gid: 0},
		},
	}
	if v2 >= 0 {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, v2
	}
	err := osthread.Discarded(func() error {
		if err := cgroup.JoinThread(r.V1); err != nil {
			return err
		}
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fmt.Errorf("unsharing the working directory: %w", err)
		}
		if err := unix.Fchdir(dir); err != nil {
			return fmt.Errorf("changing into the sandbox's directory: %w", err)
		}
		return cmd.Start()
	})
	if err != nil {
		return nil, -1, err
	}
	return cmd, pidfd, nil
}
