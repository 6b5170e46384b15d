package nsinit

import (
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// affinities returns the CPU affinity of every thread of this process.
func affinities(t *testing.T) map[int]unix.CPUSet {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]unix.CPUSet{}
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err == nil {
			out[tid] = set
		}
	}
	return out
}

// gatherThreads puts every thread on the caller's CPU, and restore gives
// every thread, one started in between too, the caller's affinity back.
func TestGatherThreads(t *testing.T) {
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil || orig.Count() < 2 {
		t.Skipf("needs two CPUs to tell (affinity %v, %v)", orig.Count(), err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Threads parked where the runtime cannot reuse them until released.
	release := make(chan struct{})
	defer close(release)
	park := func() {
		started := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			close(started)
			<-release
		}()
		<-started
	}
	for range 3 {
		park()
	}
	restore := gatherThreads()
	gathered := affinities(t)
	park() // a thread the runtime may start now inherits the one CPU; restore reaches it too
	restore()
	if len(gathered) < 4 {
		t.Fatalf("%d threads seen, want at least 4", len(gathered))
	}
	for tid, set := range gathered {
		if set.Count() != 1 {
			t.Errorf("thread %d gathered on %d CPUs, want 1", tid, set.Count())
		}
	}
	for tid, set := range affinities(t) {
		if set != orig {
			t.Errorf("thread %d after restore: %d CPUs, want the caller's %d", tid, set.Count(), orig.Count())
		}
	}
}
