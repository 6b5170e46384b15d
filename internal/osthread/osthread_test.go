package osthread

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
)

// TestDiscardedThreadEnds checks fn runs off the main thread, on a thread that
// no longer exists once Discarded returns.
func TestDiscardedThreadEnds(t *testing.T) {
	for range 50 {
		var tid int
		if err := Discarded(func() error { tid = syscall.Gettid(); return nil }); err != nil {
			t.Fatal(err)
		}
		if tid == syscall.Getpid() {
			t.Fatal("fn ran on the main thread")
		}
		// The thread is gone once the runtime has reaped it; allow it a moment.
		gone := false
		for range 1000 {
			if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid)); os.IsNotExist(err) {
				gone = true
				break
			}
			syscall.Nanosleep(&syscall.Timespec{Nsec: 1e6}, nil)
		}
		if !gone {
			t.Fatalf("thread %d still exists after Discarded returned", tid)
		}
	}
}

// TestRunOnMainThread starts run on the main thread, as a goroutine that the
// scheduler put there would: fn must still run elsewhere.
func TestRunOnMainThread(t *testing.T) {
	done := make(chan error, 1)
	mainThread <- func() {
		if syscall.Gettid() != syscall.Getpid() {
			done <- errors.New("the test's main-thread server is not on the main thread")
			return
		}
		run(func() error {
			if syscall.Gettid() == syscall.Getpid() {
				return errors.New("fn ran on the main thread")
			}
			return nil
		}, done)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

var mainThread = make(chan func())

func TestMain(m *testing.M) {
	// Keep this goroutine on the main thread, run the tests elsewhere, and
	// serve TestDiscardedFromMainThread's calls from here.
	res := make(chan int, 1)
	go func() { res <- m.Run() }()
	for {
		select {
		case f := <-mainThread:
			f()
		case code := <-res:
			os.Exit(code)
		}
	}
}

func init() { runtime.LockOSThread() } // init runs on the main thread
