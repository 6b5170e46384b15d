// Package osthread runs code on an OS thread of its own that is thrown away
// afterwards. Linux keeps some state per thread (cgroup v1 membership through
// "tasks", capabilities, namespaces entered with setns); a thread changed that way
// must never go back to the Go scheduler, where any goroutine could run on it.
package osthread

import (
	"runtime"
	"syscall"
)

// Discarded runs fn on a locked OS thread other than the process's main thread,
// and terminates that thread when fn returns. It returns fn's result.
//
// The main thread is excluded because the Go runtime never terminates it: a
// goroutine that exits while locked to it leaves it wedged, still carrying
// whatever fn changed.
func Discarded(fn func() error) error {
	done := make(chan error, 1)
	go run(fn, done)
	return <-done
}

func run(fn func() error, done chan<- error) {
	runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
	if syscall.Gettid() == syscall.Getpid() {
		// On the main thread: hand over to a goroutine started while this one
		// still holds the main thread, so it cannot land there, then let go.
		started := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(started)
			done <- fn()
		}()
		<-started
		runtime.UnlockOSThread()
		return
	}
	done <- fn()
}
