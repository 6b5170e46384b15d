// This file implements Start: stdio (pipes or a PTY), the process's own cgroup,
// fork and exec through syscall.ForkExec (never os/exec: the reaper owns wait),
// and the goroutines that read its output.

package process

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/isolation/cgroup"
	"sbx.dev/sbx/internal/osthread"
	"sbx.dev/sbx/internal/ringlog"
	"sbx.dev/sbx/internal/timerslack"
)

// workloadOOMScoreAdj is the oom_score_adj of every process the agent starts.
const workloadOOMScoreAdj = "500"

// Start starts s. A command that cannot be found or executed does not fail:
// it gets a result at once, exit code 127 (not found) or 126 (not executable)
// with the reason on stderr, as a shell would report it.
func (t *Table) Start(s Spec) (*Proc, error) {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return nil, errors.New("empty command")
	}
	p := &Proc{
		Argv: s.Argv, Cwd: s.Cwd, Tag: s.Tag, PTY: s.PTY != nil, Envs: s.Envs,
		t: t, unlisted: s.Unlisted, done: make(chan struct{}), exit: make(chan struct{}), oom0: oomKills(t.cfg.OOMFD), pids0: pidsMax(t.cfg.PidsFD),
	}
	limit := s.OutputLimitBytes
	if limit <= 0 {
		limit = t.cfg.OutputLimitBytes
	}
	p.out[0] = newCapture(limit, t.cfg.SpillLimitBytes)
	p.out[1] = newCapture(limit, t.cfg.SpillLimitBytes)
	if s.NoSpill {
		p.out[0].spillFailed, p.out[1].spillFailed = true, true
	}
	if s.OutputLogBytes > 0 {
		p.log = ringlog.New(min(s.OutputLogBytes, MaxOutputLog))
	}
	t.mu.Lock()
	for p.ID == "" || t.procs[p.ID] != nil {
		p.ID = newID()
	}
	devNull := t.devNull
	t.mu.Unlock()

	path, err := lookPath(s.Argv[0], s.Env, s.Dir)
	if err != nil {
		return t.failed(p, err), nil
	}
	var (
		child   [3]int     // the child's 0, 1, 2
		readers []*os.File // ours: stdout, stderr (or the PTY)
		closers []int      // closed once the child has them
	)
	defer func() {
		for _, fd := range closers {
			unix.Close(fd)
		}
	}()
	attr := &syscall.SysProcAttr{}
	if s.PTY != nil {
		ptmx, tty, err := pty.Open()
		if err != nil {
			return nil, fmt.Errorf("opening a terminal: %w", err)
		}
		if s.PTY.Cols > 0 && s.PTY.Rows > 0 {
			pty.Setsize(ptmx, &pty.Winsize{Cols: s.PTY.Cols, Rows: s.PTY.Rows})
		}
		fd := int(tty.Fd()) // also puts it in blocking mode
		child = [3]int{fd, fd, fd}
		defer tty.Close()
		p.ptmx = ptmx
		readers = []*os.File{ptmx}
		attr.Setsid, attr.Setctty, attr.Ctty = true, true, 0
	} else {
		if s.Stdin {
			r, w, err := childPipe(false)
			if err != nil {
				return nil, err
			}
			child[0], p.stdin = r, w
			closers = append(closers, r)
		} else if child[0] = devNull; child[0] < 0 {
			fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, &os.PathError{Op: "open", Path: os.DevNull, Err: err}
			}
			child[0] = fd
			closers = append(closers, fd)
		}
		for i := 1; i <= 2; i++ {
			w, r, err := childPipe(true)
			if err != nil {
				closeAll(readers)
				p.closeStdio()
				return nil, err
			}
			child[i] = w
			closers = append(closers, w)
			readers = append(readers, r)
		}
		attr.Setpgid = true
	}
	fail := func(err error) (*Proc, error) {
		closeAll(readers)
		p.closeStdio()
		return nil, err
	}
	g, err := t.groups.get()
	if err != nil {
		return fail(err)
	}
	if g.kind == treeV2 {
		attr.UseCgroupFD, attr.CgroupFD = true, int(g.cg.dir.Fd())
	}
	files := make([]uintptr, 3)
	for i, fd := range child {
		files[i] = uintptr(fd)
	}
	pa := &syscall.ProcAttr{Dir: s.Dir, Env: s.Env, Files: files, Sys: attr}
	p.pending = len(readers) + 1
	p.readers = readers

	reaper.mu.Lock()
	p.StartedAt = time.Now()
	var pid int
	pid, err = t.fork(g, path, s.Argv, pa)
	if err == nil {
		p.Pid, p.group = pid, g
		reaper.procs[pid] = p
	}
	reaper.mu.Unlock()
	if err != nil {
		g.release()
		closeAll(readers)
		p.closeStdio()
		if errors.Is(err, syscall.EAGAIN) {
			// The sandbox's pids limit is full: a result that says so, as
			// a shell's "cannot fork" would, not an error of the agent.
			f := t.failed(p, &notRunnable{name: s.Argv[0], code: 126, err: errors.New("cannot fork: the sandbox's process limit is reached")})
			f.mu.Lock()
			f.result.Reason = ReasonPidsExhausted
			f.mu.Unlock()
			return f, nil
		}
		if code := execErrCode(err); code != 0 {
			return t.failed(p, &notRunnable{name: s.Argv[0], code: code, err: err}), nil
		}
		return nil, fmt.Errorf("starting %s: %w", s.Argv[0], err)
	}
	// The workload is the OOM killer's first choice, before the agent: the
	// agent cannot lower its own score (that needs CAP_SYS_RESOURCE), but may
	// raise its child's, which the child's descendants inherit. The child runs
	// for a few microseconds before this write; nothing it allocates in that
	// time makes the difference.
	if err := cgroup.WriteFileAt(unix.AT_FDCWD, "/proc/"+strconv.Itoa(pid)+"/oom_score_adj", workloadOOMScoreAdj); err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.cfg.Log.Debug("raising a process's OOM score", "pid", pid, "err", err)
	}
	t.list(p)
	if s.Timeout > 0 {
		p.mu.Lock()
		if p.status == nil {
			p.timer = time.AfterFunc(s.Timeout, func() { p.Kill(ReasonTimeout) })
		}
		p.mu.Unlock()
	}
	for i, r := range readers {
		go p.read(i+1, r)
	}
	return p, nil
}

// fork starts the child. When it must start in v1 groups (its freezer
// group, the sandbox's work group for pids) or confined, a dedicated OS
// thread joins those groups (v1 places threads through "tasks"), is
// confined, forks, and is then discarded (osthread): the child never runs
// outside its groups or unconfined.
func (t *Table) fork(g *group, path string, argv []string, pa *syscall.ProcAttr) (pid int, err error) {
	if g.kind != treeV1 && t.cfg.PidsJoinFD <= 0 && t.cfg.Confine == nil {
		err = timerslack.Fork(func() (err error) {
			pid, err = syscall.ForkExec(path, argv, pa)
			return err
		})
		return pid, err
	}
	if g.kind != treeV1 {
		st := t.spawner()
		if st == nil {
			return 0, errors.New("the process table is closed")
		}
		return st.fork(path, argv, pa)
	}
	err = osthread.Discarded(func() error {
		if g.kind == treeV1 {
			if err := cgroup.WriteFileAt(int(g.cg.dir.Fd()), "tasks", cgroup.ThisThread); err != nil {
				return fmt.Errorf("joining freezer group: %w", err)
			}
		}
		if t.cfg.PidsJoinFD > 0 {
			if err := cgroup.WriteFileAt(t.cfg.PidsJoinFD, "tasks", cgroup.ThisThread); err != nil {
				return fmt.Errorf("joining the work pids group: %w", err)
			}
		}
		if t.cfg.Confine != nil {
			if err := t.cfg.Confine(); err != nil {
				return fmt.Errorf("confining: %w", err)
			}
		}
		if err := timerslack.SetDefault(); err != nil {
			return fmt.Errorf("setting the timer slack: %w", err)
		}
		pid, err = syscall.ForkExec(path, argv, pa)
		return err
	})
	return pid, err
}

// spawnThread is an OS thread that forks every process started outside v1
// freezer groups: it joined the work pids group and was confined once, when
// it started, and stays so. A v1 group change costs the kernel an RCU grace
// period when the group's threads have been quiet (~10 ms here), and a
// fork bomb may leave no room to start a thread: one thread, made early,
// pays neither per exec.
type spawnThread struct {
	reqs chan spawnReq
	err  error // why it could not start; every fork fails with it

	mu     sync.Mutex
	closed bool // guarded by mu: reqs is closed, the thread gone
}

type spawnReq struct {
	path string
	argv []string
	pa   *syscall.ProcAttr
	done chan spawnRes
}

type spawnRes struct {
	pid int
	err error
}

// spawner returns the table's spawn thread, starting it on first use.
func (t *Table) spawner() *spawnThread {
	t.spawnOnce.Do(func() {
		st := &spawnThread{reqs: make(chan spawnReq)}
		ready := make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the table
			if t.cfg.PidsJoinFD > 0 {
				if err := cgroup.WriteFileAt(t.cfg.PidsJoinFD, "tasks", cgroup.ThisThread); err != nil {
					st.err = fmt.Errorf("joining the work pids group: %w", err)
				}
			}
			if st.err == nil && t.cfg.Confine != nil {
				if err := t.cfg.Confine(); err != nil {
					st.err = fmt.Errorf("confining: %w", err)
				}
			}
			if st.err == nil {
				if err := timerslack.SetDefault(); err != nil {
					st.err = fmt.Errorf("setting the timer slack: %w", err)
				}
			}
			close(ready)
			for r := range st.reqs {
				pid, err := syscall.ForkExec(r.path, r.argv, r.pa)
				r.done <- spawnRes{pid, err}
			}
		}()
		<-ready
		t.spawn = st
	})
	return t.spawn
}

func (st *spawnThread) fork(path string, argv []string, pa *syscall.ProcAttr) (int, error) {
	if st.err != nil {
		return 0, st.err
	}
	done := make(chan spawnRes, 1)
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return 0, errors.New("the process table is closed")
	}
	st.reqs <- spawnReq{path, argv, pa, done}
	st.mu.Unlock()
	r := <-done
	return r.pid, r.err
}

// close ends the thread once its last fork is done.
func (st *spawnThread) close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.closed {
		st.closed = true
		close(st.reqs)
	}
}

// childPipe makes a pipe with one end for the child, a plain blocking fd, and
// the other for the agent, non-blocking under the runtime's poller: the
// child's stdin when childWrites is false, else its stdout or stderr. Both are
// close-on-exec; ForkExec hands the child its end.
func childPipe(childWrites bool) (childFD int, ours *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return -1, nil, os.NewSyscallError("pipe2", err)
	}
	c, o := fds[0], fds[1]
	if childWrites {
		c, o = o, c
	}
	if err := unix.SetNonblock(c, false); err != nil {
		unix.Close(c)
		unix.Close(o)
		return -1, nil, os.NewSyscallError("fcntl", err)
	}
	return c, os.NewFile(uintptr(o), "|pipe"), nil
}

func (p *Proc) closeStdio() {
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	if p.ptmx != nil {
		p.ptmx.Close()
	}
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// read copies one stream into the process's capture and followers until EOF,
// at the pace of its slowest complete follower (output). Once the process
// has exited, what its pipe holds at that moment is still delivered at that
// pace, however long it takes; after it, the stream ends drainGrace later at
// the latest (a background descendant may hold the pipe open for ever), and
// what comes later is read and discarded, so that descendant never gets
// EPIPE.
func (p *Proc) read(stream int, f *os.File) {
	pool := &readBufs[0]
	if p.PTY {
		pool = &readBufs[1]
	}
	first := pool.Get().(*[]byte)
	buf := *first
	defer func() {
		if len(buf) == len(*first) { // not traded for a bulk buffer
			pool.Put(first)
		}
	}()
	open := true
	owed := int64(-1) // once the exit is seen: bytes still to deliver before the grace begins
	for {
		if open && owed < 0 && p.gone.Load() {
			owed = unread(f)
			if owed > 0 {
				f.SetReadDeadline(time.Time{})
			} else {
				f.SetReadDeadline(time.Now().Add(drainGrace))
			}
		}
		n, err := f.Read(buf)
		if n > 0 && open {
			for _, s := range p.output(stream, buf[:n]) {
				s.waitRoom()
			}
		}
		if owed > 0 {
			if owed -= int64(n); owed <= 0 {
				owed = 0
				f.SetReadDeadline(time.Now().Add(drainGrace))
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// With owed < 0, the exit's wake-up before this reader saw the
			// exit: the top of the loop sees it now.
			if open && owed >= 0 {
				open = false
				f.SetReadDeadline(time.Time{})
				p.streamDone()
			}
			continue
		}
		if err != nil {
			break
		}
		if n == len(buf) && len(buf) < bulkReadSize && !p.PTY {
			// A full read: the process writes faster than the stream is
			// read (a file cat'ed, a build's log). Larger reads from a
			// larger pipe carry the same bytes in fewer events.
			buf = make([]byte, bulkReadSize)
			control(f, func(fd int) { unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, bulkPipeSize) }) // best effort: pipe-max-size caps it
		}
	}
	if p.PTY { // WriteStdin and Resize use it under stdinMu
		// Closing the master hangs the terminal up: the kernel sends
		// SIGHUP to the session. The read ends (EIO) once the process has
		// closed its end of the terminal, which it may do before it exits
		// (GNU cat closes 0, 1 and 2, then exits 0): closed at once, the
		// master would kill it with SIGHUP on its way out. So it is
		// closed once the exit status is in.
		<-p.exit
		p.stdinMu.Lock()
		p.ptmx = nil
		f.Close()
		p.stdinMu.Unlock()
	} else {
		f.Close()
	}
	if open {
		p.streamDone()
	}
}

// unread returns how many bytes wait in f (a pipe or a terminal) to be read.
func unread(f *os.File) int64 {
	var n int
	control(f, func(fd int) { n, _ = unix.IoctlGetInt(fd, unix.TIOCINQ) }) // FIONREAD, for pipes too
	return int64(n)
}

// control runs fn on f's descriptor without taking it out of the runtime's
// poller (f.Fd would make it blocking, and its read deadlines inert).
func control(f *os.File, fn func(fd int)) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { fn(int(fd)) })
	}
}

// readBufs keep the readers' first buffers (pipes', then a terminal's),
// which every process's streams used to allocate afresh: 64 KiB of an exec's
// ~70 KiB of garbage, a collection every ~14 execs of a short command in a
// one-P agent. Everything read is copied out (capture, log, subscribers'
// chunks) before the next read, so a buffer is free once its reader ends.
var readBufs = [2]sync.Pool{
	{New: func() any { b := make([]byte, 32<<10); return &b }},
	{New: func() any { b := make([]byte, 16<<10); return &b }},
}

// Sizes for a stream whose process writes faster than it is read: the
// reader's buffer, and the pipe's capacity (at most /proc/sys/fs/pipe-max-size,
// 1 MiB by default, for a process without CAP_SYS_RESOURCE).
const (
	bulkReadSize = 256 << 10
	bulkPipeSize = 1 << 20
)

// notRunnable is why a command could not be executed.
type notRunnable struct {
	name string
	code int
	err  error
}

func (e *notRunnable) Error() string {
	if e.code == 127 {
		return e.name + ": command not found"
	}
	return e.name + ": " + e.err.Error()
}

func execErrCode(err error) int {
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR):
		return 127
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EPERM):
		return 126
	}
	return 0
}

// failed records p as a command that could not run.
func (t *Table) failed(p *Proc, err error) *Proc {
	code := 127
	var nr *notRunnable
	if errors.As(err, &nr) {
		code = nr.code
	}
	now := time.Now()
	p.StartedAt, p.exitedAt = now, now
	p.output(Stderr, []byte("sbx: "+err.Error()+"\n"))
	p.mu.Lock()
	p.seal(&Result{ExitCode: code, Reason: ReasonExited})
	p.mu.Unlock()
	t.list(p)
	return p
}

// list adds p to the table's processes, unless it is unlisted.
func (t *Table) list(p *Proc) {
	if p.unlisted {
		return
	}
	t.mu.Lock()
	t.procs[p.ID] = p
	t.mu.Unlock()
}

// lookPath resolves name as a shell would: a name with a slash is a path
// (relative to dir), any other is looked up in env's PATH.
func lookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		path := name
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		if err := executable(path); err != nil {
			return "", &notRunnable{name: name, code: execErrCode(err), err: err}
		}
		return path, nil
	}
	pathVar := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	var denied error
	for _, d := range filepath.SplitList(pathVar) {
		if d == "" {
			d = "."
		}
		path := filepath.Join(d, name)
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, path)
		}
		err := executable(path)
		if err == nil {
			return path, nil
		}
		if errors.Is(err, fs.ErrPermission) && denied == nil {
			denied = &notRunnable{name: name, code: 126, err: err}
		}
	}
	if denied != nil {
		return "", denied
	}
	return "", &notRunnable{name: name, code: 127, err: syscall.ENOENT}
}

func executable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return syscall.EISDIR
	}
	if st.Mode()&0o111 == 0 {
		return syscall.EACCES
	}
	return nil
}
