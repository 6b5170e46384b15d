package native

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/backend/native/forker"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

// testSpawner starts a spawner from the test binary, with a working
// directory and a /dev/null for its children; cleanup ends them.
func testSpawner(t *testing.T) (s *spawner, dir, null *os.File) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireNamespaces(t)
	s, err := startSpawner(os.Args[0], "spawnertest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	if dir, err = os.Open(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dir.Close() })
	if null, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { null.Close() })
	return s, dir, null
}

// wantExit waits for the spawner to say child pid exited with code.
func wantExit(t *testing.T, s *spawner, pid, code int) {
	t.Helper()
	select {
	case e := <-s.exitOf(pid):
		if e != (sandbox.Exit{Code: code, Reason: sandbox.ReasonExited}) {
			t.Errorf("exit of pid %d = %+v, want code %d", pid, e, code)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit heard for pid %d", pid)
	}
}

// The spawner starts a process in a new user namespace, answers its pid and
// a pidfd, and says how it ended; a request it cannot start answers why.
func TestSpawner(t *testing.T) {
	s, dir, null := testSpawner(t)
	req := forker.Request{Path: "/bin/sh", Args: []string{"sh", "-c", "exit 7"}, Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UID: 3_000_000_000, Size: 65536}
	for range 3 { // one after another: each exit reaches its own hold
		pid, pidfd, err := s.spawn(req, dir, null, nil, []*os.File{nil, null})
		if err != nil {
			t.Fatalf("spawn = %v", err)
		}
		if pidfd < 0 || pid <= 0 {
			t.Fatalf("spawn = pid %d, pidfd %d", pid, pidfd)
		}
		syscall.Close(pidfd)
		wantExit(t, s, pid, 7)
	}
	bad := req
	bad.Path = "/nonexistent/sh"
	if _, _, err := s.spawn(bad, dir, null, nil, nil); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("spawn of a missing program = %v, want its error", err)
	}
}

// Children that live on cost the spawner no thread each: it waits for
// their exits through its poller, and still hears each one.
func TestSpawnerThreadsFlat(t *testing.T) {
	s, dir, null := testSpawner(t)
	threads := func() int {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(s.proc.Pid) + "/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Threads:"); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				return n
			}
		}
		t.Fatal("no Threads line")
		return 0
	}
	// Each child lives until its fd 3 (a pipe the test holds) closes.
	req := forker.Request{Path: "/bin/sh", Args: []string{"sh", "-c", "read x <&3; exit 3"}, Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UID: 3_000_000_000, Size: 65536}
	const n = 24
	var pids []int
	var writers []*os.File
	for range n {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		pid, pidfd, err := s.spawn(req, dir, null, nil, []*os.File{r, null})
		r.Close()
		if err != nil {
			t.Fatalf("spawn = %v", err)
		}
		syscall.Close(pidfd)
		pids, writers = append(pids, pid), append(writers, w)
	}
	time.Sleep(100 * time.Millisecond) // a thread per waiter would have started by now
	if got := threads(); got >= n {
		t.Errorf("the spawner has %d threads with %d children alive: a thread per child", got, n)
	}
	for _, w := range writers {
		w.Close()
	}
	for _, pid := range pids {
		wantExit(t, s, pid, 3)
	}
}

// Neither end waits for the other in a blocking recvmsg: each runs on one
// P, and a thread blocked there holds the P away from the goroutines it woke
// (the create the answer is for) until the runtime's monitor takes it back.
// Both wait in the runtime's poller instead.
func TestSpawnerWaitsInPoller(t *testing.T) {
	s, dir, null := testSpawner(t)
	req := forker.Request{Path: "/bin/true", Args: []string{"true"}, Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UID: 3_000_000_000, Size: 65536}
	pid, pidfd, err := s.spawn(req, dir, null, nil, nil)
	if err != nil {
		t.Fatalf("spawn = %v", err)
	}
	syscall.Close(pidfd)
	wantExit(t, s, pid, 0)
	var ours uintptr
	s.rc.Control(func(fd uintptr) { ours = fd })
	time.Sleep(50 * time.Millisecond) // both ends wait for the next message by now
	for _, end := range []struct {
		proc string
		fd   uintptr
	}{{"self", ours}, {strconv.Itoa(s.proc.Pid), 3}} {
		if tid := threadInRecvmsg(t, end.proc, end.fd); tid != "" {
			t.Errorf("thread %s of process %s waits in recvmsg on fd %d", tid, end.proc, end.fd)
		}
	}
}

// threadInRecvmsg returns a thread of process proc ("self" or a pid) that is
// blocked in recvmsg on fd, or "".
func threadInRecvmsg(t *testing.T, proc string, fd uintptr) string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/" + proc + "/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + proc + "/task/" + task.Name() + "/syscall")
		if err != nil {
			continue // gone
		}
		f := strings.Fields(string(b)) // number, then its arguments in hex
		if len(f) < 2 || f[0] != strconv.Itoa(unix.SYS_RECVMSG) {
			continue
		}
		if arg, err := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64); err == nil && uintptr(arg) == fd {
			return task.Name()
		}
	}
	return ""
}
