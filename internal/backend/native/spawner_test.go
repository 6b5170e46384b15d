package native

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/backend/native/forker"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

// The spawner starts a process in a new user namespace, answers its pid and
// a pidfd, and says how it ended; a request it cannot start answers why.
func TestSpawner(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireNamespaces(t)
	s, err := startSpawner(os.Args[0], "spawnertest")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	null, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	defer null.Close()
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
		select {
		case e := <-s.exitOf(pid):
			if e != (sandbox.Exit{Code: 7, Reason: sandbox.ReasonExited}) {
				t.Errorf("exit of pid %d = %+v, want code 7", pid, e)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no exit heard for pid %d", pid)
		}
	}
	bad := req
	bad.Path = "/nonexistent/sh"
	if _, _, err := s.spawn(bad, dir, null, nil, nil); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("spawn of a missing program = %v, want its error", err)
	}
}
