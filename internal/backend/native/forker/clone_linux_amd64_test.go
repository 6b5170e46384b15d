package forker

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// The child's own pipe ends never take a number among the descriptors it is
// given, however full of holes the parent's table is: setting those would
// close its error pipe (the parent would take that for its exec and free the
// stack it still runs on) or replace it.
func TestSharedStartPipesAboveTheChildsDescriptors(t *testing.T) {
	runtime.LockOSThread() // sharedStart changes the thread's signal mask for the clone
	defer runtime.UnlockOSThread()
	var opened []int
	defer func() {
		for _, fd := range opened {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	for range 40 {
		fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		opened = append(opened, fd)
	}
	null := opened[len(opened)-1]
	for i := 0; i < 20; i += 2 { // holes low in the table, where new pipes land
		unix.Close(opened[i])
		opened[i] = -1
	}
	files := make([]int, 64)
	for i := range files {
		files[i] = -1
	}
	files[0], files[1], files[2] = null, null, null
	for range 10 {
		pid, pidfd, err := sharedStart(Request{Path: "/bin/true", Args: []string{"true"}}, files, -1)
		if err != nil {
			t.Fatalf("sharedStart = %v", err)
		}
		unix.Close(pidfd)
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
			t.Fatal(err)
		}
		if !ws.Exited() || ws.ExitStatus() != 0 {
			t.Fatalf("the child ended with status %#x (signal %v), want exit 0", uint32(ws), ws.Signal())
		}
	}
}
