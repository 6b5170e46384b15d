// This file implements the daemon's end of the spawner (package forker),
// the process that forks the sandboxes' init stages.

package native

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/backend/native/forker"
	"sbx.dev/sbx/internal/sandbox"
)

// spawner is the daemon's end. Its socket is under the runtime's poller
// (forker.Recv says why): read from a blocking recvmsg, the answer to a
// create reached the create 1.7 ms (median) after the spawner sent it.
type spawner struct {
	conn *os.File
	rc   syscall.RawConn
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
	theirs := os.NewFile(uintptr(fds[1]), "spawner")
	defer theirs.Close()
	ours, rc, err := forker.Pollable(fds[0], "spawner")
	if err != nil {
		return nil, fmt.Errorf("starting the spawner: %w", err)
	}
	command := func(ownNet bool) *exec.Cmd {
		cmd := exec.Command(exe, boot.SpawnerArg, instance)
		// One P: it serves one request at a time, and each of its forks copies
		// the page tables of a process whose threads ran on fewer CPUs.
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
		cmd.ExtraFiles = []*os.File{theirs} // fd 3
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if ownNet {
			// A network namespace of its own, where it sizes the sandboxes'
			// TCP hash (forker.ChildEhashEntries) without touching the host's.
			cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNET
			cmd.Env = append(cmd.Env, forker.OwnNetEnv+"=1")
		}
		return cmd
	}
	cmd := command(true)
	err = cmd.Start()
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) { // no network namespaces to make here
		cmd = command(false)
		err = cmd.Start()
	}
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("starting the spawner: %w", err)
	}
	s := &spawner{conn: ours, rc: rc, proc: cmd.Process, resp: make(chan spawnResponse, 1),
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
		n, oobn, err := forker.Recv(s.rc, buf, oob)
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
		fds := forker.ReceivedFDs(oob[:oobn])
		var m forker.Message
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			forker.CloseFDs(fds)
			continue
		}
		if m.Exited {
			forker.CloseFDs(fds)
			s.exited(m.Pid, *m.Exit)
			continue
		}
		r := spawnResponse{pid: m.Pid, pidfd: -1}
		switch {
		case m.Err != "":
			r.err = errors.New(m.Err)
			forker.CloseFDs(fds)
		case len(fds) != 1:
			r.err = fmt.Errorf("the spawner answered pid %d with %d pidfds", m.Pid, len(fds))
			forker.CloseFDs(fds)
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
func (s *spawner) spawn(r forker.Request, dir, stderr, v2 *os.File, extra []*os.File) (pid, pidfd int, err error) {
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
	if err := forker.Send(s.rc, msg, unix.UnixRights(fds...)); err != nil {
		return 0, -1, fmt.Errorf("asking the spawner: %w", err)
	}
	select {
	case res := <-s.resp:
		return res.pid, res.pidfd, res.err
	case <-s.done:
		return 0, -1, errors.New("the spawner is gone")
	}
}

// close ends the spawner: it exits once its end of the pair is shut, and
// the reader, reading the end, is done.
func (s *spawner) close() {
	s.rc.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	<-s.done
	s.conn.Close()
}

// SpawnerMain is the spawner stage, for binaries that dispatch
// boot.SpawnerArg themselves (tests).
func SpawnerMain() { forker.Main() }
