package timerslack

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func slackOf(t *testing.T, tid string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + tid + "/timerslack_ns")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCoarsenEveryThread checks every thread of the process has Coarse
// afterwards, threads started later too (they inherit it), and that a
// program started through Fork has Default while the thread that started it
// goes back to Coarse.
func TestCoarsenEveryThread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("another thread's slack needs CAP_SYS_NICE")
	}
	// Threads of their own before Coarsen, parked on locked goroutines.
	release := make(chan struct{})
	var wg, locked sync.WaitGroup
	for range 4 {
		wg.Add(1)
		locked.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			locked.Done()
			<-release
		}()
	}
	defer func() { close(release); wg.Wait() }()
	locked.Wait()

	Coarsen()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) < 5 {
		t.Fatalf("%d threads; the test wants its four and the main one", len(tasks))
	}
	for _, task := range tasks {
		if n := slackOf(t, task.Name()); n != Coarse {
			t.Errorf("thread %s: slack %d, want %d", task.Name(), n, Coarse)
		}
	}

	// A thread started now inherits it.
	got := make(chan int, 1)
	go func() {
		runtime.LockOSThread() // a new thread: this one is never unlocked
		got <- Of()
	}()
	if n := <-got; n != Coarse {
		t.Errorf("a thread started after Coarsen: slack %d, want %d", n, Coarse)
	}

	// A child started without Fork inherits Coarse (the control), one
	// started through it has Default.
	read := func() int {
		out, err := exec.Command("cat", "/proc/self/timerslack_ns").Output()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		return n
	}
	if n := read(); n != Coarse {
		t.Errorf("a child started without Fork: slack %d, want the daemon's %d", n, Coarse)
	}
	var child int
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := Fork(func() error { child = read(); return nil }); err != nil {
		t.Fatal(err)
	}
	if child != Default {
		t.Errorf("a child started through Fork: slack %d, want %d", child, Default)
	}
	if n := Of(); n != Coarse {
		t.Errorf("the thread that forked: slack %d after Fork, want %d back", n, Coarse)
	}
}
