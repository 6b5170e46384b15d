package repl

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// in runs code in session name and fails the test on an Execute error.
func (f *fixture) in(name, code string) Result {
	f.t.Helper()
	return f.exec(code, Options{Session: name})
}

// running says whether a process with tag runs.
func (f *fixture) running(tag string) bool {
	f.t.Helper()
	_, ok, err := f.a.Find(context.Background(), tag)
	if err != nil {
		f.t.Fatal(err)
	}
	return ok
}

// startCell runs code in session name in the background once the cell has
// created the file "started" in the session's cwd dir; it returns the
// call's outcome.
func (f *fixture) startCell(name, dir, code string) <-chan callOutcome {
	f.t.Helper()
	done := make(chan callOutcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		res, err := f.s.Execute(ctx, f.id, f.a, "open('started', 'w').close()\n"+code, Options{Session: name, Cwd: dir, Timeout: callTimeout})
		done <- callOutcome{res, err}
	}()
	started := filepath.Join(dir, "started")
	deadline := time.Now().Add(callTimeout)
	for _, err := os.Stat(started); err != nil; _, err = os.Stat(started) {
		if time.Now().After(deadline) {
			f.t.Fatal("the cell did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return done
}

type callOutcome struct {
	res Result
	err error
}

func TestNamedSessionsAreSeparate(t *testing.T) {
	f := newFixture(t, LLM{})
	dir := t.TempDir()
	ctx := context.Background()
	f.ok("x = 'default'\nimport os")
	if err := f.s.Open(ctx, f.id, f.a, Options{Session: "a1", Cwd: dir}); err != nil {
		t.Fatal(err)
	}
	if !f.running("sbx-repl-a1") || TagOf("a1") != "sbx-repl-a1" || TagOf("") != Tag {
		t.Fatalf("no process tagged sbx-repl-a1 (TagOf %q)", TagOf("a1"))
	}
	if res := f.in("a1", "x"); res.Error == nil || res.Error.Name != "NameError" {
		t.Errorf("the default session's x is seen in a1: %+v", res)
	}
	if res := f.in("a1", "import os\nx = 'a1'\nos.getcwd()"); res.Value != "'"+dir+"'" || res.ExecutionCount != 2 {
		t.Errorf("a1: cwd %s, count %d; want %q and 2", res.Value, res.ExecutionCount, dir)
	}
	f.value("x, os.getcwd()", "('default', '"+f.a.Root+"')")
	// A daemon restart finds both again, each by its tag.
	starts := f.a.StartCount()
	f.s = NewSessions(LLM{})
	if res := f.in("a1", "x"); res.Value != "'a1'" || res.Restarted {
		t.Errorf("a1 after a daemon restart: %+v", res)
	}
	f.value("x", "'default'")
	if n := f.a.StartCount(); n != starts {
		t.Errorf("%d processes started after the restart, want none", n-starts)
	}
	// Open on a running session changes nothing.
	if err := f.s.Open(ctx, f.id, f.a, Options{Session: "a1", Cwd: "/"}); err != nil {
		t.Fatal(err)
	}
	if res := f.in("a1", "x, os.getcwd()"); res.Value != "('a1', '"+dir+"')" {
		t.Errorf("a1 after Open: %+v", res)
	}
}

func TestOpenInAMissingDirectory(t *testing.T) {
	f := newFixture(t, LLM{})
	missing := filepath.Join(t.TempDir(), "nope")
	err := f.s.Open(context.Background(), f.id, f.a, Options{Session: "b", Cwd: missing})
	if err == nil || !strings.Contains(err.Error(), "cwd '"+missing+"' does not exist") {
		t.Errorf("Open in %s: %v", missing, err)
	}
	if f.running(TagOf("b")) {
		t.Error("a process runs")
	}
}

func TestRestartSession(t *testing.T) {
	f := newFixture(t, LLM{})
	dir := t.TempDir()
	ctx := context.Background()
	f.ok("kept = 1")
	f.exec("y = 1", Options{Session: "r", Cwd: dir})
	if err := f.s.Restart(ctx, f.id, f.a, Options{Session: "r", Cwd: dir}); err != nil {
		t.Fatal(err)
	}
	res := f.in("r", "import os\nos.getcwd(), 'y' in dir()")
	if res.Value != "('"+dir+"', False)" || res.ExecutionCount != 1 || res.Restarted {
		t.Errorf("after Restart: %+v", res)
	}
	f.value("kept", "1")
	// Restarting a session that never ran starts it.
	if err := f.s.Restart(ctx, f.id, f.a, Options{Session: "fresh"}); err != nil || !f.running(TagOf("fresh")) {
		t.Errorf("Restart of a new session: %v", err)
	}
}

func TestRestartEndsARunningCell(t *testing.T) {
	f := newFixture(t, LLM{})
	dir := t.TempDir()
	f.exec("y = 1", Options{Session: "r", Cwd: dir})
	done := f.startCell("r", dir, "import time\ntime.sleep(100)")
	if err := f.s.Restart(context.Background(), f.id, f.a, Options{Session: "r", Cwd: dir}); err != nil {
		t.Fatal(err)
	}
	out := <-done
	if out.err != nil || out.res.Error == nil || out.res.Error.Name != "SessionEnded" || out.res.Error.Value != "the session was restarted" {
		t.Fatalf("the running cell's call: %+v, %v", out.res, out.err)
	}
	if res := f.in("r", "'y' in dir()"); res.Value != "False" || res.Restarted {
		t.Errorf("after Restart: %+v", res)
	}
}

func TestCloseSession(t *testing.T) {
	f := newFixture(t, LLM{})
	ctx := context.Background()
	f.ok("kept = 1")
	f.in("c", "y = 1")
	if err := f.s.Close(ctx, f.id, f.a, "c"); err != nil {
		t.Fatal(err)
	}
	if f.running(TagOf("c")) {
		t.Error("the closed session's process runs")
	}
	if !f.running(Tag) {
		t.Error("the default session's process is gone")
	}
	// Closing what does not run is no error; a new session of the name is new.
	if err := f.s.Close(ctx, f.id, f.a, "never"); err != nil {
		t.Errorf("Close of a session that never ran: %v", err)
	}
	if res := f.in("c", "'y' in dir()"); res.Value != "False" || res.Restarted {
		t.Errorf("a session of the closed one's name: %+v", res)
	}
	f.value("kept", "1")
	// After a daemon restart, Close finds the process by its tag.
	f.s = NewSessions(LLM{})
	if err := f.s.Close(ctx, f.id, f.a, "c"); err != nil || f.running(TagOf("c")) {
		t.Errorf("Close after a daemon restart: %v, running %v", err, f.running(TagOf("c")))
	}
}

func TestCloseEndsARunningCell(t *testing.T) {
	f := newFixture(t, LLM{})
	dir := t.TempDir()
	done := f.startCell("d", dir, "import time\ntime.sleep(100)")
	if err := f.s.Close(context.Background(), f.id, f.a, "d"); err != nil {
		t.Fatal(err)
	}
	out := <-done
	if out.err != nil || out.res.Error == nil || out.res.Error.Name != "SessionEnded" || out.res.Error.Value != "the session was removed" {
		t.Fatalf("the running cell's call: %+v, %v", out.res, out.err)
	}
	if f.running(TagOf("d")) {
		t.Error("the closed session's process runs")
	}
}

// A call that waited for its turn while Close removed the session fails.
func TestCallWaitingOnAClosedSession(t *testing.T) {
	f := newFixture(t, LLM{})
	sess := f.s.session(f.id, "e")
	<-sess.turn // as Close holds it
	waiting := make(chan error, 1)
	go func() {
		_, err := f.s.Execute(context.Background(), f.id, f.a, "1", Options{Session: "e"})
		waiting <- err
	}()
	sess.removed = true
	sess.turn <- struct{}{}
	if err := <-waiting; !errors.Is(err, ErrClosed) {
		t.Errorf("error %v, want ErrClosed", err)
	}
	if f.a.StartCount() != 0 {
		t.Error("a process was started")
	}
}

// SIGINT reaches the cell: the driver's helper threads block it, so the
// kernel gives it to the main thread, which a sleeping cell is in. Taken by
// a helper, it would run Python's handler only once the main thread woke by
// itself (the interrupt of a client that went away was lost so, once).
func TestHelperThreadsBlockSigint(t *testing.T) {
	f := newFixture(t, LLM{})
	pid := f.ok("import os\nos.getpid()").Value
	tasks, err := filepath.Glob("/proc/" + pid + "/task/*")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("the session's threads (pid %s): %v, %v", pid, tasks, err)
	}
	const sigint = 1 << (2 - 1)
	helpers := 0
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(task, "status"))
		if err != nil {
			t.Fatal(err)
		}
		var blocked uint64
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "SigBlk:"); ok {
				blocked, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err != nil {
					t.Fatalf("%s: SigBlk %q: %v", task, v, err)
				}
			}
		}
		if filepath.Base(task) == pid {
			if blocked&sigint != 0 {
				t.Errorf("the main thread blocks SIGINT (SigBlk %x): no interrupt would reach a cell", blocked)
			}
			continue
		}
		helpers++
		if blocked&sigint == 0 {
			t.Errorf("helper thread %s does not block SIGINT (SigBlk %x): it may take the cell's interrupt", filepath.Base(task), blocked)
		}
	}
	if helpers < 4 {
		t.Errorf("%d helper threads, want the four that read and stream stdout and stderr", helpers)
	}
}
