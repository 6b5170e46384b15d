// This file implements the reaper: one goroutine per agent process waits for
// every child on SIGCHLD (wait4(-1, WNOHANG)), hands statuses to the table by pid
// and reaps orphans, so no zombie stays. Nothing in the agent may call Wait.

package process

import (
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

var reaper struct {
	once sync.Once
	// mu is held across fork and registration, and across wait4 and delivery,
	// so a status never arrives for a pid not yet registered, and a pid is
	// never signalled after it was reaped (and perhaps reused).
	mu    sync.Mutex
	procs map[int]*Proc // guarded by mu

	gmu    sync.Mutex
	groups []*group // guarded by gmu: groups to remove once empty
}

// startReaper starts the reaper once per OS process.
func startReaper() {
	reaper.once.Do(func() {
		reaper.procs = map[int]*Proc{}
		ch := make(chan os.Signal, 16)
		signal.Notify(ch, syscall.SIGCHLD)
		go func() {
			for range ch {
				reap()
			}
		}()
		reap() // children that exited before the handler was installed
	})
}

func reap() {
	reaper.mu.Lock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			break
		}
		if p := reaper.procs[pid]; p != nil {
			delete(reaper.procs, pid)
			p.exited(ws)
		}
	}
	reaper.mu.Unlock()
	sweepGroups()
}

// sweepGroups removes the groups that have become empty.
func sweepGroups() {
	reaper.gmu.Lock()
	defer reaper.gmu.Unlock()
	keep := reaper.groups[:0]
	for _, g := range reaper.groups {
		if done, err := g.release(); !done && err == nil {
			keep = append(keep, g)
		}
	}
	clear(reaper.groups[len(keep):])
	reaper.groups = keep
}

// awaitReleased waits, for at most limit, until the groups gp lent out and
// that wait to be empty (releaseGroup) are released: on v1, the thread that
// forked a process into its group leaves it a moment after the fork, and
// a closing table should leave no group behind.
func (gp *groupPool) awaitReleased(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		sweepGroups()
		reaper.gmu.Lock()
		pending := slices.ContainsFunc(reaper.groups, func(g *group) bool { return g.pool == gp })
		reaper.gmu.Unlock()
		if !pending || time.Now().After(deadline) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// releaseGroup releases g now if it is empty, else once it is.
func releaseGroup(g *group) {
	if done, err := g.release(); done || err != nil {
		return
	}
	reaper.gmu.Lock()
	reaper.groups = append(reaper.groups, g)
	reaper.gmu.Unlock()
}

// KillDescendants kills every child of this process until none is left: as a
// subreaper the agent adopts the orphans of the trees it started, so a
// double-forked, setsid'd descendant becomes its child and dies here too. Only
// for an agent about to exit: it kills every child of the OS process.
func KillDescendants(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		pids := children()
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		reap()
		time.Sleep(5 * time.Millisecond) // orphans are reparented asynchronously
	}
}

// children lists this process's children, from every thread's children file.
func children() []int {
	tasks, _ := os.ReadDir("/proc/self/task")
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}
