package native

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
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

// A child whose id maps cannot be written is killed and reaped, and the
// spawner says why; it leaves no child behind and starts the next one.
func TestSpawnerBadMaps(t *testing.T) {
	s, dir, null := testSpawner(t)
	bad := forker.Request{Path: "/bin/true", Args: []string{"true"}, Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UID: 3_000_000_000, Size: 0} // an empty range: the kernel refuses the map
	if _, _, err := s.spawn(bad, dir, null, nil, nil); err == nil {
		t.Fatal("spawn with an empty id range succeeded")
	}
	if kids := spawnerChildren(t, s.proc.Pid); len(kids) != 0 {
		t.Errorf("the spawner has children %v after a failed start", kids)
	}
	good := bad
	good.Size = 65536
	pid, pidfd, err := s.spawn(good, dir, null, nil, nil)
	if err != nil {
		t.Fatalf("spawn after the failure = %v", err)
	}
	syscall.Close(pidfd)
	wantExit(t, s, pid, 0)
}

// spawnerChildren lists the children of process pid, from every thread.
func spawnerChildren(t *testing.T, pid int) []string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/children")
		if err != nil {
			continue // gone
		}
		kids = append(kids, strings.Fields(string(b))...)
	}
	return kids
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

// A child starts as os/exec's fork would have started it: every signal
// unblocked and none ignored, root of its user namespace with that
// namespace's map, no_new_privs, a session of its own, in the working
// directory it was sent, with exactly the descriptors it was given.
func TestSpawnerChild(t *testing.T) {
	s, dir, null := testSpawner(t)
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	extra, extraW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	extraW.WriteString("from fd 3\n")
	extraW.Close()
	script := `grep -E '^(SigBlk|SigIgn|NoNewPrivs|Uid|Gid|Groups):' /proc/self/status >&2
cat /proc/self/uid_map /proc/self/gid_map >&2
echo "session $(cut -d' ' -f6 /proc/self/stat) pid $$" >&2
echo "cwd $(pwd)" >&2
for n in 0 1 2 3 4 5 6; do [ -e /proc/$$/fd/$n ] && echo "fd $n" >&2; done
cat <&3 >&2
read line || echo "stdin empty" >&2`
	req := forker.Request{Path: "/bin/sh", Args: []string{"sh", "-c", script}, Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UID: 3_000_000_000, Size: 65536}
	pid, pidfd, err := s.spawn(req, dir, w, nil, []*os.File{extra, nil, null})
	w.Close()
	extra.Close()
	if err != nil {
		t.Fatalf("spawn = %v", err)
	}
	syscall.Close(pidfd)
	b, err := io.ReadAll(out)
	if err != nil {
		t.Fatal(err)
	}
	wantExit(t, s, pid, 0)
	got := string(b)
	for _, want := range []string{
		"SigBlk:\t0000000000000000\n", "SigIgn:\t0000000000000000\n", "NoNewPrivs:\t1\n",
		"Uid:\t0\t0\t0\t0\n", "Gid:\t0\t0\t0\t0\n",
		"0 3000000000      65536\n",
		"cwd " + dir.Name() + "\n",
		"from fd 3\n", "stdin empty\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the child's report lacks %q:\n%s", want, got)
		}
	}
	// 0-2, 3 (the pipe) and 5 (null); 4 was sent as none.
	if fds := regexp.MustCompile(`(?m)^fd \d$`).FindAllString(got, -1); !slices.Equal(fds, []string{"fd 0", "fd 1", "fd 2", "fd 3", "fd 5"}) {
		t.Errorf("the child's descriptors are %q, want 0-3 and 5:\n%s", fds, got)
	}
	var session, spid int
	for _, l := range strings.Split(got, "\n") {
		if _, err := fmt.Sscanf(l, "session %d pid %d", &session, &spid); err == nil {
			break
		}
	}
	if session == 0 || session != spid {
		t.Errorf("the child's session is %d, want its own (%d):\n%s", session, spid, got)
	}
}

// The spawner's forks copy none of its memory (work, not time: a fork
// that copied the page tables write-protects every page the spawner has
// written, and its next write to each faults). Counted as the spawner's own
// page faults over a number of spawns.
func TestSpawnerForkCopiesNothing(t *testing.T) {
	if !forker.SharedSupported {
		t.Skip("the spawner forks through os/exec on this architecture")
	}
	s, dir, null := testSpawner(t)
	req := forker.Request{Path: "/bin/true", Args: []string{"true"}, Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UID: 3_000_000_000, Size: 65536}
	spawn := func() {
		pid, pidfd, err := s.spawn(req, dir, null, nil, nil)
		if err != nil {
			t.Fatalf("spawn = %v", err)
		}
		syscall.Close(pidfd)
		wantExit(t, s, pid, 0)
	}
	faults := func() int {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(s.proc.Pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:])) // from field 3
		n, err := strconv.Atoi(f[10-3])                                // field 10: minflt
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for range 5 { // its heap and stacks grown
		spawn()
	}
	const n = 40
	before := faults()
	for range n {
		spawn()
	}
	// ~3 a fork that shares the memory (~16 under the race detector, whose
	// shadow memory faults too); ~100 one that copies it.
	if per := float64(faults()-before) / n; per > 30 {
		t.Errorf("the spawner took %.1f page faults per fork; a fork that shares its memory takes a few", per)
	}
}
