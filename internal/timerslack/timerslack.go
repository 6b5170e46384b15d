// Package timerslack widens the timer slack of sbx's own processes, and gives
// the programs they start the kernel's default back.
//
// A Go process that turns busy after an idle moment has its runtime's monitor
// thread poll every 20 µs for the next millisecond or more (it backs off only
// once it found nothing to do fifty times in a row). The daemon, the spawner
// and every sandbox's agent turn busy for each call they serve, so on a
// virtual machine, where each timer wake-up costs a trip through the
// hypervisor, those polls were a fifth of their CPU: most of the cost of the
// context switches that made 40% of the daemon's. A slack of a millisecond lets
// the kernel fold them into about one wake-up per millisecond; the cost is
// that a timer of sbx's may fire up to that much late, which none of its
// deadlines (seconds) notices. A new thread inherits its creator's slack and
// execve keeps it, so the agent's threads have it from their start, without a
// capability.
//
// The processes a sandbox runs must not inherit it: the agent forks them from
// a thread set back to Default (Fork, SetDefault), so their timers are as
// precise as anywhere else. (Host tools the daemon runs for itself, such as
// mkfs.btrfs, keep the daemon's: they set no timers that matter.)
package timerslack

import (
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

const (
	// Coarse is the slack of sbx's own processes, in nanoseconds.
	Coarse = 1_000_000
	// Default is the kernel's slack for every normal task (init's, which
	// all others inherit unless changed), in nanoseconds.
	Default = 50_000
)

// Coarsen sets every thread of this process to Coarse. Another thread's slack
// needs CAP_SYS_NICE; without it only the calling thread's changes, and the
// threads it starts from then on inherit it. Threads that appear while it
// runs are caught by a second look.
func Coarsen() {
	unix.Prctl(unix.PR_SET_TIMERSLACK, Coarse, 0, 0, 0)
	done := map[string]bool{}
	for range 3 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return
		}
		changed := false
		for _, t := range tasks {
			if done[t.Name()] {
				continue
			}
			done[t.Name()] = true
			changed = true
			// /proc/<tid> reaches a thread of this process; its task
			// directory has no timerslack_ns.
			if f, err := os.OpenFile("/proc/"+t.Name()+"/timerslack_ns", os.O_WRONLY, 0); err == nil {
				f.WriteString(strconv.Itoa(Coarse))
				f.Close()
			}
		}
		if !changed {
			return
		}
	}
}

// Of returns the calling thread's slack in nanoseconds.
func Of() int {
	n, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		return -1
	}
	return n
}

// Fork runs fork, which starts a sandbox's process (its fork happens on the
// calling goroutine's thread: syscall.ForkExec, os/exec), on a thread whose
// slack is Default for the call, so the process starts with the kernel's
// default. The thread's own slack is put back before it returns to
// the scheduler.
func Fork(fork func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	was := Of()
	if was == Default || was < 0 {
		return fork()
	}
	unix.Prctl(unix.PR_SET_TIMERSLACK, Default, 0, 0, 0)
	defer unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(was), 0, 0, 0)
	return fork()
}

// SetDefault sets the calling thread's slack to Default: for a locked thread
// that only forks the programs of a sandbox and never returns to the
// scheduler.
func SetDefault() error {
	return unix.Prctl(unix.PR_SET_TIMERSLACK, Default, 0, 0, 0)
}
