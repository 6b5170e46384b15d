package e2b

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/backendtest"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

// startSandbox starts a sandbox on d, destroyed at t's cleanup, and a client of its agent.
func startSandbox(t *testing.T, d *Driver) (*backend.Instance, *agentclient.Client) {
	t.Helper()
	sp := backendtest.Spec()
	inst, err := d.Start(t.Context(), sp)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	cl := agentclient.New(inst.ID, inst.Dial)
	t.Cleanup(func() {
		cl.Close()
		if err := d.Destroy(context.Background(), sp.ID); err != nil {
			t.Errorf("Destroy = %v", err)
		}
	})
	return inst, cl
}

func sh(cmd string) sandbox.ExecRequest {
	return sandbox.ExecRequest{Shell: cmd, Timeout: time.Minute, OutputLimitBytes: 1 << 20}
}

// TestAdapter checks the agent protocol the adapter serves over the remote's
// envd against what the sbx agent answers: results, events, process calls,
// files, and the calls answered unimplemented.
func TestAdapter(t *testing.T) {
	rd := startRemote(t)
	instance := instanceName()
	d := open(rd.options(t, instance))
	t.Cleanup(func() { d.Close(context.Background()) })
	t.Cleanup(func() { rd.checkNone(t, instance) })
	_, cl := startSandbox(t, d)
	ctx := t.Context()

	t.Run("Foreground", func(t *testing.T) {
		res, err := cl.Exec(ctx, sh("echo out; echo err >&2; exit 3"), false, nil)
		if err != nil {
			t.Fatalf("Exec = %v", err)
		}
		if res.ExitCode != 3 || res.Reason != sandbox.ReasonExited || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" ||
			res.StdoutBytes != 4 || res.StderrBytes != 4 || res.Truncated || res.ProcessID == "" || res.PID == 0 {
			t.Errorf("Exec = %+v, want exit 3 (exited), out and err, a process id and pid", res)
		}
	})

	t.Run("Argv", func(t *testing.T) {
		res, err := cl.Exec(ctx, sandbox.ExecRequest{Argv: []string{"printf", "%s|", "a b", "$HOME"}, Env: map[string]string{"X": "y"},
			Timeout: time.Minute}, false, nil)
		if err != nil || string(res.Stdout) != "a b|$HOME|" {
			t.Errorf("Exec(argv) = %+v, %v, want the arguments verbatim", res, err)
		}
		res, err = cl.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `echo "$X"; pwd`}, Env: map[string]string{"X": "y"},
			Cwd: "/tmp", Timeout: time.Minute}, false, nil)
		if err != nil || string(res.Stdout) != "y\n/tmp\n" {
			t.Errorf("Exec(env, cwd) = %+v, %v, want y and /tmp", res, err)
		}
	})

	t.Run("MissingCwd", func(t *testing.T) {
		_, err := cl.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}, Cwd: "/no/such/dir", Timeout: time.Minute}, false, nil)
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "/no/such/dir") {
			t.Errorf("Exec(missing cwd) = %v, want ErrInvalid naming it", err)
		}
	})

	t.Run("Streamed", func(t *testing.T) {
		var mu sync.Mutex
		var kinds []string
		var out bytes.Buffer
		res, err := cl.Exec(ctx, sh("echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three"), true, func(ev sandbox.ExecEvent) error {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case ev.Started != nil:
				kinds = append(kinds, "started")
			case ev.Stdout != nil:
				kinds = append(kinds, "stdout")
				out.Write(ev.Stdout)
			case ev.Stderr != nil:
				kinds = append(kinds, "stderr")
				out.Write(ev.Stderr)
			case ev.Result != nil:
				kinds = append(kinds, "result")
			}
			return nil
		})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("Exec(stream) = %+v, %v", res, err)
		}
		if got := strings.Join(kinds, ","); got != "started,stdout,stderr,stdout,result" || out.String() != "one\ntwo\nthree\n" {
			t.Errorf("events = %s (%q), want started, stdout, stderr, stdout, result in order", got, out.String())
		}
	})

	t.Run("Stdin", func(t *testing.T) {
		req := sh("cat; echo done")
		req.Stdin = []byte("from stdin\n")
		res, err := cl.Exec(ctx, req, false, nil)
		if err != nil || string(res.Stdout) != "from stdin\ndone\n" {
			t.Errorf("Exec(stdin) = %+v, %v, want stdin echoed, then closed", res, err)
		}
		// Without stdin, a reader sees end of file at once.
		res, err = cl.Exec(ctx, sh("cat; echo eof"), false, nil)
		if err != nil || string(res.Stdout) != "eof\n" {
			t.Errorf("Exec(no stdin) = %+v, %v, want an empty stdin", res, err)
		}
	})

	t.Run("BackgroundWaitStdin", func(t *testing.T) {
		req := sh("read line; echo got $line; exit 7")
		req.Background, req.KeepStdinOpen = true, true
		var started *sandbox.ProcessInfo
		res, err := cl.Exec(ctx, req, false, func(ev sandbox.ExecEvent) error {
			if ev.Started != nil {
				started = ev.Started
			}
			return nil
		})
		if err != nil || res != nil || started == nil || started.ID == "" {
			t.Fatalf("Exec(background) = %+v, %v (started %+v), want no result and the process", res, err, started)
		}
		p, err := cl.Wait(ctx, started.ID, 100*time.Millisecond)
		if err != nil || !p.Running {
			t.Fatalf("Wait(short) = %+v, %v, want it running", p, err)
		}
		ps, err := cl.Processes(ctx)
		if err != nil || !slicesContainsID(ps, started.ID) {
			t.Errorf("Processes = %+v, %v, want %s listed", ps, err, started.ID)
		}
		if err := cl.WriteStdin(ctx, started.ID, []byte("hello\n"), true); err != nil {
			t.Fatalf("WriteStdin = %v", err)
		}
		p, err = cl.Wait(ctx, started.ID, time.Minute)
		if err != nil || p.Running || p.Result == nil || p.Result.ExitCode != 7 || string(p.Result.Stdout) != "got hello\n" {
			t.Fatalf("Wait = %+v, %v, want exit 7 with got hello", p, err)
		}
		if err := cl.WriteStdin(ctx, started.ID, []byte("late"), false); err == nil {
			t.Errorf("WriteStdin after the exit succeeded, want an error")
		}
		// Attach to the exited process replays its output, then its result.
		var replay bytes.Buffer
		res, err = cl.Attach(ctx, started.ID, true, func(ev sandbox.ExecEvent) error {
			replay.Write(ev.Stdout)
			return nil
		})
		if err != nil || res.ExitCode != 7 || replay.String() != "got hello\n" {
			t.Errorf("Attach(replay) = %+v, %v (replayed %q)", res, err, replay.String())
		}
	})

	t.Run("Timeout", func(t *testing.T) {
		req := sh("echo before; sleep 30")
		req.Timeout = time.Second
		res, err := cl.Exec(ctx, req, false, nil)
		if err != nil || res.ExitCode != 124 || res.Reason != sandbox.ReasonTimeout || string(res.Stdout) != "before\n" {
			t.Errorf("Exec(timeout 1s) = %+v, %v, want 124 timeout", res, err)
		}
	})

	t.Run("Signal", func(t *testing.T) {
		bg := func() string {
			req := sh("sleep 1000")
			req.Background = true
			var id string
			if _, err := cl.Exec(ctx, req, false, func(ev sandbox.ExecEvent) error {
				if ev.Started != nil {
					id = ev.Started.ID
				}
				return nil
			}); err != nil {
				t.Fatalf("Exec(background) = %v", err)
			}
			return id
		}
		id := bg()
		if _, err := cl.Signal(ctx, id, 2); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("Signal(2) = %v, want ErrUnsupported", err)
		}
		if out, err := cl.Signal(ctx, id, 9); err != nil || out != sandbox.OutcomeStopped {
			t.Fatalf("Signal(9) = %q, %v, want stopped", out, err)
		}
		p, err := cl.Wait(ctx, id, time.Minute)
		if err != nil || p.Result == nil || p.Result.ExitCode != 137 || p.Result.Reason != sandbox.ReasonKilled || p.Result.Signal != 9 {
			t.Errorf("Wait after kill = %+v, %v, want 137 killed", p.Result, err)
		}
		if out, err := cl.Signal(ctx, id, 9); err != nil || out != sandbox.OutcomeAlreadyExited {
			t.Errorf("Signal(9) again = %q, %v, want already_exited", out, err)
		}
		id = bg()
		if out, err := cl.Signal(ctx, id, 15); err != nil || out != sandbox.OutcomeSignaled {
			t.Fatalf("Signal(15) = %q, %v, want signaled", out, err)
		}
		p, err = cl.Wait(ctx, id, time.Minute)
		if err != nil || p.Result == nil || p.Result.ExitCode != 143 || p.Result.Reason != sandbox.ReasonSignaled || p.Result.Signal != 15 {
			t.Errorf("Wait after SIGTERM = %+v, %v, want 143 signaled", p.Result, err)
		}
		if _, err := cl.Process(ctx, "pnosuchproc"); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Process(unknown) = %v, want ErrNotFound", err)
		}
	})

	t.Run("Truncated", func(t *testing.T) {
		req := sh("head -c 5000 /dev/zero | tr '\\0' x")
		req.OutputLimitBytes = 1024
		res, err := cl.Exec(ctx, req, false, nil)
		if err != nil || !res.Truncated || res.StdoutBytes != 5000 || res.StdoutDropped != 5000-1024 ||
			!bytes.Contains(res.Stdout, []byte("[sbx: 3976 bytes dropped")) {
			t.Errorf("Exec(5000 bytes, limit 1024) = %+v, %v, want head and tail with a notice", res, err)
		}
	})

	t.Run("ReadOutput", func(t *testing.T) {
		req := sh("echo a; sleep 0.3; echo b")
		req.Background, req.OutputLogBytes = true, 1<<10
		var id string
		cl.Exec(ctx, req, false, func(ev sandbox.ExecEvent) error {
			if ev.Started != nil {
				id = ev.Started.ID
			}
			return nil
		})
		var all []byte
		since := int64(0)
		for range 100 {
			c, err := cl.ReadOutput(ctx, id, since, 5*time.Second, 0, 0)
			if err != nil {
				t.Fatalf("ReadOutput = %v", err)
			}
			all, since = append(all, c.Data...), c.Cursor
			if !c.Alive {
				if c.Result == nil || c.Result.ExitCode != 0 {
					t.Errorf("the last ReadOutput's result = %+v, want exit 0", c.Result)
				}
				break
			}
		}
		if string(all) != "a\nb\n" {
			t.Errorf("ReadOutput gave %q, want a and b", all)
		}
		if _, err := cl.ReadOutput(ctx, id, since+1, 0, 0, 0); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("ReadOutput past the end = %v, want ErrInvalid", err)
		}
	})

	t.Run("Terminal", func(t *testing.T) {
		req := sh("stty size; test -t 0 && echo tty")
		req.Pty = &sandbox.PtySize{Rows: 24, Cols: 100}
		res, err := cl.Exec(ctx, req, false, nil)
		if err != nil || !strings.Contains(string(res.Stdout), "24 100") || !strings.Contains(string(res.Stdout), "tty") {
			t.Errorf("Exec(pty) = %+v, %v, want the terminal's size and a tty", res, err)
		}
		req = sh("read l; echo got:$l")
		req.Pty, req.Stdin = &sandbox.PtySize{Rows: 24, Cols: 80}, []byte("typed\n")
		res, err = cl.Exec(ctx, req, false, nil)
		if err != nil || !strings.Contains(string(res.Stdout), "got:typed") {
			t.Errorf("Exec(pty, stdin) = %+v, %v, want the input typed into the terminal", res, err)
		}
		req = sh("sleep 1000")
		req.Background = true
		var id string
		cl.Exec(ctx, req, false, func(ev sandbox.ExecEvent) error {
			if ev.Started != nil {
				id = ev.Started.ID
			}
			return nil
		})
		if err := cl.Resize(ctx, id, 10, 10); !errors.Is(err, sandbox.ErrWrongState) {
			t.Errorf("Resize(no pty) = %v, want ErrWrongState", err)
		}
		cl.Signal(ctx, id, 9)
	})

	t.Run("Files", func(t *testing.T) {
		fi, err := cl.WriteFile(ctx, "/tmp/dir/new.sh", []byte("#!/bin/sh\necho hi\n"), 0o755, false)
		if err != nil || fi.Mode != 0o755 || fi.Size != 18 || fi.Path != "/tmp/dir/new.sh" {
			t.Fatalf("WriteFile(new, 0755) = %+v, %v", fi, err)
		}
		if res, err := cl.Exec(ctx, sh("/tmp/dir/new.sh"), false, nil); err != nil || string(res.Stdout) != "hi\n" {
			t.Errorf("running the written script = %+v, %v", res, err)
		}
		if _, err := cl.WriteFile(ctx, "/tmp/dir/new.sh", []byte("echo more\n"), 0, true); err != nil {
			t.Fatalf("WriteFile(append) = %v", err)
		}
		r, err := cl.ReadFile(ctx, "/tmp/dir/new.sh", 10, 8)
		if err != nil || string(r.Content) != "echo hi\n" || r.Size != 28 || r.EOF {
			t.Errorf("ReadFile(offset 10, limit 8) = %+v, %v", r, err)
		}
		r, err = cl.ReadFile(ctx, "/tmp/dir/new.sh", 18, 0)
		if err != nil || string(r.Content) != "echo more\n" || !r.EOF {
			t.Errorf("ReadFile(the appended tail) = %+v, %v", r, err)
		}
		if fi, err := cl.WriteFile(ctx, "/tmp/dir/new.sh", []byte("x"), 0o600, false); err != nil || fi.Mode != 0o755 {
			t.Errorf("WriteFile(existing, 0600) = %+v, %v, want its mode kept (0755)", fi, err)
		}
		if _, err := cl.ReadFile(ctx, "/tmp/dir/missing", 0, 0); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("ReadFile(missing) = %v, want ErrNotFound", err)
		}
		if _, err := cl.ReadFile(ctx, "/tmp/dir", 0, 0); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("ReadFile(a directory) = %v, want ErrInvalid", err)
		}
		// envd's own calls, forwarded.
		if list, err := cl.List(ctx, "/tmp/dir", 1); err != nil || len(list) != 1 || list[0].Name != "new.sh" {
			t.Errorf("List = %+v, %v", list, err)
		}
		// Streams both ways, sbx's mode applied.
		up, err := cl.Upload(ctx, "/tmp/up/big.bin", io.LimitReader(zeros{}, 3<<20), 0o700)
		if err != nil || up.Size != 3<<20 || up.Mode != 0o700 {
			t.Fatalf("Upload(3 MiB, 0700) = %+v, %v", up, err)
		}
		rc, _, err := cl.Download(ctx, "/tmp/up/big.bin")
		if err != nil {
			t.Fatalf("Download = %v", err)
		}
		n, _ := io.Copy(io.Discard, rc)
		rc.Close()
		if n != 3<<20 {
			t.Errorf("Download read %d bytes, want %d", n, 3<<20)
		}
	})

	t.Run("ReadLines", func(t *testing.T) {
		if _, err := cl.WriteFile(ctx, "/tmp/lines.txt", []byte("one\r\ntwo\nthree is long\n\xff\nlast"), 0, false); err != nil {
			t.Fatal(err)
		}
		l, err := cl.ReadLines(ctx, "/tmp/lines.txt", 1, 2, 5)
		if err != nil || strings.Join(l.Lines, "|") != "two|three" || l.FirstLine != 2 || l.EOF || l.TotalLines != -1 || l.CutLines != 1 {
			t.Errorf("ReadLines(offset 1, limit 2, 5 chars) = %+v, %v", l, err)
		}
		l, err = cl.ReadLines(ctx, "/tmp/lines.txt", 0, 0, 0)
		if err != nil || strings.Join(l.Lines, "|") != "one|two|three is long|\uFFFD|last" || !l.EOF || l.TotalLines != 5 {
			t.Errorf("ReadLines(all) = %+v, %v", l, err)
		}
		cl.WriteFile(ctx, "/tmp/bin.dat", []byte("a\x00b\n"), 0, false)
		if _, err := cl.ReadLines(ctx, "/tmp/bin.dat", 0, 0, 0); !errors.Is(err, sandbox.ErrWrongState) || !strings.Contains(err.Error(), "binary") {
			t.Errorf("ReadLines(binary) = %v, want ErrWrongState (a binary file)", err)
		}
		if _, err := cl.ReadLines(ctx, "/tmp/no-such", 0, 0, 0); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("ReadLines(missing) = %v, want ErrNotFound", err)
		}
	})

	t.Run("Changed", func(t *testing.T) {
		if res, err := cl.Exec(ctx, sh("mkdir -p /tmp/ch/d && echo 0 > /tmp/ch/before && ln -s before /tmp/ch/link"), false, nil); err != nil || res.ExitCode != 0 {
			t.Fatalf("setup = %+v, %v", res, err)
		}
		time.Sleep(50 * time.Millisecond) // file times are the kernel's coarse clock: keep "before" before
		since := time.Now().Add(-20 * time.Millisecond)
		time.Sleep(50 * time.Millisecond)
		if res, err := cl.Exec(ctx, sh("echo x > /tmp/ch/a; echo y > /tmp/ch/d/b; touch -d 2000-01-01 /tmp/ch/d/b; mkdir /tmp/ch/e"), false, nil); err != nil || res.ExitCode != 0 {
			t.Fatalf("writing = %+v, %v", res, err)
		}
		// d/b's mtime is old, its ctime new: listed, as the agent lists it.
		paths, more, err := cl.Changed(ctx, "/tmp/ch", since, 0)
		if err != nil || strings.Join(paths, " ") != "/tmp/ch/a /tmp/ch/d/b" || more {
			t.Errorf("Changed = %v, %v, %v, want a and d/b", paths, more, err)
		}
		paths, more, err = cl.Changed(ctx, "/tmp/ch", since, 1)
		if err != nil || strings.Join(paths, " ") != "/tmp/ch/a" || !more {
			t.Errorf("Changed(limit 1) = %v, %v, %v, want a, truncated", paths, more, err)
		}
		if _, _, err := cl.Changed(ctx, "/tmp/ch/a", since, 0); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Changed(a file) = %v, want ErrInvalid", err)
		}
		if _, _, err := cl.Changed(ctx, "/tmp/no-such-dir", since, 0); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Changed(missing) = %v, want ErrNotFound", err)
		}
	})

	t.Run("EditFile", func(t *testing.T) {
		if _, err := cl.WriteFile(ctx, "/tmp/edit.py", []byte("def f():\n    return 1\n"), 0o640, false); err != nil {
			t.Fatal(err)
		}
		// The agent's own matching: indentation ignored, the new text re-indented.
		res, err := cl.EditFile(ctx, "/tmp/edit.py", "return 1", "return 2", false)
		if err != nil || res.Replacements != 1 || res.StartLine != 2 {
			t.Fatalf("EditFile = %+v, %v", res, err)
		}
		got, err := cl.ReadFile(ctx, "/tmp/edit.py", 0, 0)
		if err != nil || string(got.Content) != "def f():\n    return 2\n" {
			t.Errorf("after the edit: %q, %v", got.Content, err)
		}
		if fi, err := cl.Stat(ctx, "/tmp/edit.py"); err != nil || fi.Mode&0o777 != 0o640 {
			t.Errorf("the edited file's mode = %o, %v, want 640 kept", fi.Mode&0o777, err)
		}
		if _, err := cl.EditFile(ctx, "/tmp/edit.py", "import nothing_of_the_kind_here", "x", false); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "not found") {
			t.Errorf("EditFile(absent text) = %v, want ErrInvalid saying not found", err)
		}
		if _, err := cl.EditFile(ctx, "/tmp/none.py", "a", "b", false); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("EditFile(missing file) = %v, want ErrNotFound", err)
		}
	})

	t.Run("Unimplemented", func(t *testing.T) {
		if _, _, err := cl.Glob(ctx, "*", "/tmp", 10); !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "Glob") ||
			!strings.Contains(err.Error(), "e2b backend") {
			t.Errorf("Glob = %v, want ErrUnsupported naming the method and the backend", err)
		}
		if _, err := cl.UploadArchive(ctx, "/tmp", strings.NewReader(""), sandbox.ArchiveLimits{}); !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("UploadArchive = %v, want ErrUnsupported", err)
		}
	})
}

func slicesContainsID(ps []sandbox.ProcessInfo, id string) bool {
	for _, p := range ps {
		if p.ID == id {
			return true
		}
	}
	return false
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// cutter is a TCP proxy on loopback between the driver and the remote
// whose connections a test can cut.
type cutter struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	conns []net.Conn
}

func newCutter(t *testing.T, to string) *cutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{ln: ln, to: to}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		c.cut()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			wg.Go(func() { io.Copy(out, in); out.Close() })
			wg.Go(func() { io.Copy(in, out); in.Close() })
		}
	})
	return c
}

// cut closes every connection through the proxy.
func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// TestStreamBreak: a process outlives the remote stream that followed it;
// the adapter reattaches by pid and still gets its output and its end.
func TestStreamBreak(t *testing.T) {
	rd := startRemote(t)
	instance := instanceName()
	opts := rd.options(t, instance)
	px := newCutter(t, strings.TrimPrefix(rd.url, "http://"))
	opts.E2B.SandboxURL = "http://" + px.ln.Addr().String() // the data plane through the proxy
	d := open(opts)
	t.Cleanup(func() { d.Close(context.Background()) })
	t.Cleanup(func() { rd.checkNone(t, instance) })
	_, cl := startSandbox(t, d)
	ctx := t.Context()
	req := sh("echo first; sleep 1; echo second; exit 5")
	req.Background = true
	var id string
	if _, err := cl.Exec(ctx, req, false, func(ev sandbox.ExecEvent) error {
		if ev.Started != nil {
			id = ev.Started.ID
		}
		return nil
	}); err != nil {
		t.Fatalf("Exec = %v", err)
	}
	px.cut()
	p, err := cl.Wait(ctx, id, time.Minute)
	if err != nil || p.Result == nil || p.Result.ExitCode != 5 || !strings.Contains(string(p.Result.Stdout), "second\n") {
		t.Errorf("Wait after the stream was cut = %+v, %v, want exit 5 and the output after the cut", p.Result, err)
	}
}

// TestRecoverProcesses: a restarted daemon's driver finds the processes the
// adapter started (their remote tag is its id) and follows them again.
func TestRecoverProcesses(t *testing.T) {
	testutil.CheckLeaks(t)
	rd := startRemote(t)
	instance := instanceName()
	opts := rd.options(t, instance)
	d := open(opts)
	t.Cleanup(func() { rd.checkNone(t, instance) })
	sp := backendtest.Spec()
	inst, err := d.Start(t.Context(), sp)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	cl := agentclient.New(inst.ID, inst.Dial)
	req := sh("sleep 1000")
	req.Background, req.Timeout = true, time.Hour
	var id string
	if _, err := cl.Exec(t.Context(), req, false, func(ev sandbox.ExecEvent) error {
		if ev.Started != nil {
			id = ev.Started.ID
		}
		return nil
	}); err != nil {
		t.Fatalf("Exec = %v", err)
	}
	cl.Close()
	if err := d.Close(context.Background()); err != nil { // the daemon stops; the sandbox runs on
		t.Errorf("Close = %v", err)
	}

	d2 := open(opts)
	defer d2.Close(context.Background())
	defer d2.Destroy(context.Background(), sp.ID)
	before := rd.endAt(t, inst.Saved)
	got, err := d2.Recover(t.Context(), sp.ID, inst.Saved)
	if err != nil {
		t.Fatalf("Recover = %v", err)
	}
	// The lease was renewed at once: the remote now ends it the lease from now.
	if after := rd.endAt(t, inst.Saved); after.Sub(before) < lease/2 {
		t.Errorf("the remote sandbox's end moved from %s to %s at Recover, want the lease (%s) from now", before, after, lease)
	}
	cl2 := agentclient.New(got.ID, got.Dial)
	defer cl2.Close()
	p, err := cl2.Process(t.Context(), id)
	if err != nil || !p.Running || strings.Join(p.Argv, " ") != "/bin/sh -c sleep 1000" {
		t.Fatalf("Process(%s) after Recover = %+v, %v, want it running", id, p, err)
	}
	if out, err := cl2.Signal(t.Context(), id, 9); err != nil || out != sandbox.OutcomeStopped {
		t.Fatalf("Signal(9) after Recover = %q, %v", out, err)
	}
	p, err = cl2.Wait(t.Context(), id, time.Minute)
	if err != nil || p.Result == nil || p.Result.Reason != sandbox.ReasonKilled {
		t.Errorf("Wait = %+v, %v, want it killed", p.Result, err)
	}
}
