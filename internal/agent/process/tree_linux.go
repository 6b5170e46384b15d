// This file implements tree kill: one cgroup per process (v2 cgroup.kill, or a
// v1 freeze → SIGKILL → thaw loop), else the process group.

package process

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sbx/internal/isolation/cgroup"
)

type treeKind int

const (
	treePgrp treeKind = iota // process group only: setsid'd descendants escape
	treeV2                   // cgroup v2 group: cgroup.kill
	treeV1                   // cgroup v1 freezer group
)

// group is the cgroup of one process. The zero kind (treePgrp) has none.
type group struct {
	kind   treeKind
	parent int    // the sandbox's cgroup directory fd (not owned)
	name   string // relative to parent

	mu  sync.Mutex
	dir *os.File // guarded by mu: the group's directory; nil once removed
}

// newGroup makes the group of process id under parent.
func newGroup(kind treeKind, parent int, id string) (*group, error) {
	g := &group{kind: kind, parent: parent, name: id}
	if kind == treePgrp {
		return g, nil
	}
	if err := unix.Mkdirat(parent, id, 0o755); err != nil {
		return nil, fmt.Errorf("making cgroup %s: %w", id, err)
	}
	fd, err := unix.Openat(parent, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Unlinkat(parent, id, unix.AT_REMOVEDIR)
		return nil, fmt.Errorf("opening cgroup %s: %w", id, err)
	}
	g.dir = os.NewFile(uintptr(fd), id)
	return g, nil
}

// kill sends SIGKILL to every process of the tree. pgid is the process group
// of the leader, used when there is no cgroup; the caller guarantees the leader
// is not yet reaped, so the group id is still ours.
func (g *group) kill(pgid int) error {
	if g.kind != treePgrp {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.dir == nil {
			return nil // removed: it was empty
		}
	}
	switch g.kind {
	case treeV2:
		return cgroup.WriteFileAt(int(g.dir.Fd()), "cgroup.kill", "1")
	case treeV1:
		return g.freezeKill()
	default:
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
			return err
		}
		return nil
	}
}

// freezeKill freezes the v1 group so nothing in it can fork, kills every member,
// thaws it so the kills land, and repeats until the group is empty.
func (g *group) freezeKill() error {
	fd := int(g.dir.Fd())
	for range 100 {
		if err := cgroup.WriteFileAt(fd, "freezer.state", "FROZEN"); err != nil {
			return fmt.Errorf("freezing: %w", err)
		}
		for range 200 { // the kernel freezes asynchronously
			st, err := cgroup.ReadFileAt(fd, "freezer.state")
			if err != nil || bytes.HasPrefix(st, []byte("FROZEN")) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		procs, err := cgroup.ReadFileAt(fd, "cgroup.procs")
		if err != nil {
			cgroup.WriteFileAt(fd, "freezer.state", "THAWED")
			return err
		}
		pids := strings.Fields(string(procs))
		for _, s := range pids {
			if pid, err := strconv.Atoi(s); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if err := cgroup.WriteFileAt(fd, "freezer.state", "THAWED"); err != nil {
			return fmt.Errorf("thawing: %w", err)
		}
		if len(pids) == 0 {
			return nil
		}
	}
	return errors.New("processes keep appearing in the freezer group")
}

// remove removes the group if it is empty; done is false while it is not.
func (g *group) remove() (done bool, err error) {
	if g.kind == treePgrp {
		return true, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	err = unix.Unlinkat(g.parent, g.name, unix.AT_REMOVEDIR)
	switch {
	case err == nil || err == unix.ENOENT:
		if g.dir != nil {
			g.dir.Close()
			g.dir = nil
		}
		return true, nil
	case err == unix.EBUSY:
		return false, nil
	default:
		return false, err
	}
}

// pidsMax reads the max counter of the sandbox's pids.events (how many forks
// the pids limit refused); -1 when there is none.
func pidsMax(fd int) int64 { return counter(fd, "max ") }

// oomKills reads the oom_kill counter of the sandbox's memory.events (v2) or
// memory.oom_control (v1); -1 when there is none.
func oomKills(fd int) int64 { return counter(fd, "oom_kill ") }

// counter reads the value of the line starting with key in the kernel file fd.
func counter(fd int, key string) int64 {
	if fd <= 0 {
		return -1
	}
	buf := make([]byte, 4096)
	n, err := unix.Pread(fd, buf, 0)
	if err != nil || n <= 0 {
		return -1
	}
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			if k, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return k
			}
		}
	}
	return -1
}
