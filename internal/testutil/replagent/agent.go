// Package replagent holds a repl.Agent for tests whose "sandbox" is this
// machine: real local processes, only the transport is local.
package replagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// LocalAgent is an Agent whose "sandbox" is this machine: Start runs a real
// local process (python3 is the real /usr/bin/python3), only the transport
// is local. Files written land under root, the default cwd; a cwd is a
// host path.
type LocalAgent struct {
	// Python is what python3 resolves to; "" is a sandbox without it.
	Python string
	// StartFails makes a missing python3 fail Start itself, as an agent
	// built on os/exec would, instead of a process that exits at once
	// saying so, as the sbx agent does.
	StartFails bool
	// Root is the default cwd, a temporary directory.
	Root string

	mu     sync.Mutex
	procs  map[string]*localProc
	seq    int
	starts int
}

// localProc is one process and its output log.
type localProc struct {
	id, tag, cwd string
	argv         []string
	cmd          *exec.Cmd
	stdin        io.WriteCloser
	limit        int64

	mu      sync.Mutex
	log     []byte // output at offsets base..base+len(log)
	base    int64
	alive   bool
	changed chan struct{} // closed on new output or exit
}

// NewLocalAgent returns a LocalAgent whose processes are killed when t ends.
func NewLocalAgent(t testing.TB) *LocalAgent {
	a := &LocalAgent{Python: "/usr/bin/python3", Root: t.TempDir(), procs: map[string]*localProc{}}
	t.Cleanup(a.killAll)
	return a
}

func (a *LocalAgent) killAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.procs {
		if p.cmd != nil && p.cmd.Process != nil {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

func (a *LocalAgent) Start(_ context.Context, argv []string, env map[string]string, cwd, tag string, logBytes int64) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.starts++
	a.seq++
	if cwd == "" {
		cwd = a.Root
	}
	if fi, err := os.Stat(cwd); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w: cwd '%s' does not exist", sandbox.ErrInvalid, cwd)
	}
	p := &localProc{id: fmt.Sprintf("p%d", a.seq), tag: tag, cwd: cwd, argv: argv, limit: logBytes, changed: make(chan struct{})}
	name := argv[0]
	if name == "python3" {
		name = a.Python
	}
	if name == "" {
		if a.StartFails {
			return "", fmt.Errorf("exec: %q: %w", argv[0], exec.ErrNotFound)
		}
		p.log = []byte("sbx: " + argv[0] + ": command not found\n")
		a.procs[p.id] = p
		return p.id, nil
	}
	args := make([]string, 0, len(argv)-1)
	for _, arg := range argv[1:] {
		args = append(args, arg)
	}
	err := a.spawn(p, name, args, env)
	// A stand-in python3 a test has just written is still open for writing
	// in a child another test forked meanwhile, until that child's exec:
	// ETXTBSY, for an instant.
	for i := 0; errors.Is(err, syscall.ETXTBSY) && i < 50; i++ {
		time.Sleep(10 * time.Millisecond)
		err = a.spawn(p, name, args, env)
	}
	if err != nil {
		return "", err
	}
	a.procs[p.id] = p
	return p.id, nil
}

// spawn starts p in a process group of its own (Signal reaches the tree),
// both output streams into one pipe.
func (a *LocalAgent) spawn(p *localProc, name string, args []string, env map[string]string) error {
	cmd := exec.Command(name, args...)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = p.cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		stdin.Close()
		return err
	}
	pw.Close()
	p.cmd, p.stdin, p.alive = cmd, stdin, true
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 64<<10)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				p.append(buf[:n])
			}
			if err != nil {
				pr.Close()
				return
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		select { // what the pipe held at the exit, unless a child keeps it open
		case <-read:
		case <-time.After(time.Second):
		}
		p.mu.Lock()
		p.alive = false
		p.notify()
		p.mu.Unlock()
	}()
	return nil
}

func (p *localProc) append(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = append(p.log, b...)
	if over := int64(len(p.log)) - p.limit; p.limit > 0 && over > 0 {
		p.log = append([]byte(nil), p.log[over:]...)
		p.base += over
	}
	p.notify()
}

// notify wakes the readers; p.mu is held.
func (p *localProc) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (a *LocalAgent) proc(id string) (*localProc, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.procs[id]
	if p == nil {
		return nil, fmt.Errorf("process %s %w", id, sandbox.ErrNotFound)
	}
	return p, nil
}

func (a *LocalAgent) Find(_ context.Context, tag string) (string, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, p := range a.procs {
		p.mu.Lock()
		alive := p.alive
		p.mu.Unlock()
		if p.tag == tag && alive {
			return id, true, nil
		}
	}
	return "", false, nil
}

func (a *LocalAgent) WriteStdin(_ context.Context, id string, data []byte) error {
	p, err := a.proc(id)
	if err != nil {
		return err
	}
	if p.stdin == nil {
		return errors.New("stdin closed")
	}
	_, err = p.stdin.Write(data)
	return err
}

func (a *LocalAgent) ReadOutput(ctx context.Context, id string, since int64, wait time.Duration) ([]byte, int64, int64, bool, error) {
	p, err := a.proc(id)
	if err != nil {
		return nil, 0, 0, false, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	p.mu.Lock()
	for p.base+int64(len(p.log)) <= since && p.alive {
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			p.mu.Lock()
			end := p.base + int64(len(p.log))
			p.mu.Unlock()
			return nil, end, end, true, nil
		case <-ctx.Done():
			return nil, 0, 0, false, ctx.Err()
		}
		p.mu.Lock()
	}
	defer p.mu.Unlock()
	end := p.base + int64(len(p.log))
	start := min(max(since, p.base), end)
	return append([]byte(nil), p.log[start-p.base:]...), start, end, p.alive, nil
}

func (a *LocalAgent) Signal(_ context.Context, id string, sig int) error {
	p, err := a.proc(id)
	if err != nil {
		return err
	}
	if p.cmd == nil {
		return nil
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.Signal(sig)); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// StartCount is how many processes were started.
func (a *LocalAgent) StartCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.starts
}

// Processes lists every process started, running or not.
func (a *LocalAgent) Processes(context.Context) ([]sandbox.ProcessInfo, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]sandbox.ProcessInfo, 0, len(a.procs))
	for _, p := range a.procs {
		p.mu.Lock()
		out = append(out, sandbox.ProcessInfo{ID: p.id, Argv: p.argv, Cwd: p.cwd, Tag: p.tag, Running: p.alive})
		p.mu.Unlock()
	}
	return out, nil
}
