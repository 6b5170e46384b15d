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

	"sbx.dev/sbx/internal/isolation/cgroup"
)

type treeKind int

const (
	treePgrp treeKind = iota // process group only: setsid'd descendants escape
	treeV2                   // cgroup v2 group: cgroup.kill
	treeV1                   // cgroup v1 freezer group
)

// group is the cgroup of one process. The zero kind (treePgrp) has none.
type group struct {
	kind treeKind
	pool *groupPool

	mu sync.Mutex
	cg *cgdir // guarded by mu: the directory; nil once released
}

// cgdir is a cgroup directory under the sandbox's, lent to one process at a
// time.
type cgdir struct {
	name string
	dir  *os.File
	// killed: cgroup.kill was written here. Such a group is removed, not
	// lent again: a kernel may kill a process forked into it later
	// (CLONE_INTO_CGROUP compares kill counts of two different groups).
	killed bool
}

// groupPool makes the table's process groups and keeps the empty ones for
// the next processes: a cgroup's mkdir and rmdir cost far more than reading
// that it is empty. A group is lent again only once no process is left in it
// and its handle is released, so a kill through an old handle reaches
// nothing.
type groupPool struct {
	kind   treeKind
	parent int // the sandbox's cgroup directory fd (not owned)

	mu     sync.Mutex
	free   []*cgdir // guarded by mu
	made   int      // guarded by mu: groups made, for their names
	closed bool     // guarded by mu: no group is kept from now on
}

// maxFreeGroups bounds the empty groups a table keeps.
const maxFreeGroups = 16

// get lends a group: an empty one kept, else a new one.
func (gp *groupPool) get() (*group, error) {
	g := &group{kind: gp.kind, pool: gp}
	if gp.kind == treePgrp {
		return g, nil
	}
	gp.mu.Lock()
	if len(gp.free) == 0 && !gp.closed { // groups emptied since the last reap
		gp.mu.Unlock()
		sweepGroups()
		gp.mu.Lock()
	}
	if n := len(gp.free); n > 0 {
		g.cg = gp.free[n-1]
		gp.free[n-1] = nil
		gp.free = gp.free[:n-1]
		gp.mu.Unlock()
		return g, nil
	}
	gp.mu.Unlock()
	// A name taken by a group this table did not make (another agent's in
	// the same directory) is skipped.
	var name string
	for {
		gp.mu.Lock()
		gp.made++
		name = "p" + strconv.Itoa(gp.made)
		gp.mu.Unlock()
		err := unix.Mkdirat(gp.parent, name, 0o755)
		if err == nil {
			break
		}
		if err != unix.EEXIST {
			return nil, fmt.Errorf("making cgroup %s: %w", name, err)
		}
	}
	fd, err := unix.Openat(gp.parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Unlinkat(gp.parent, name, unix.AT_REMOVEDIR)
		return nil, fmt.Errorf("opening cgroup %s: %w", name, err)
	}
	g.cg = &cgdir{name: name, dir: os.NewFile(uintptr(fd), name)}
	return g, nil
}

// put keeps the empty group c for another process, or removes it.
func (gp *groupPool) put(c *cgdir) error {
	gp.mu.Lock()
	if !gp.closed && !c.killed && len(gp.free) < maxFreeGroups {
		gp.free = append(gp.free, c)
		gp.mu.Unlock()
		return nil
	}
	gp.mu.Unlock()
	return c.remove(gp.parent)
}

// close removes the groups kept; groups lent out are removed when released.
func (gp *groupPool) close() {
	gp.mu.Lock()
	free := gp.free
	gp.free, gp.closed = nil, true
	gp.mu.Unlock()
	for _, c := range free {
		c.remove(gp.parent)
	}
}

// remove removes the empty group.
func (c *cgdir) remove(parent int) error {
	c.dir.Close()
	if err := unix.Unlinkat(parent, c.name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return fmt.Errorf("removing cgroup %s: %w", c.name, err)
	}
	return nil
}

// empty reports whether no process is left in the group.
func (c *cgdir) empty() (bool, error) {
	procs, err := cgroup.ReadFileAt(int(c.dir.Fd()), "cgroup.procs")
	if err != nil {
		return false, err
	}
	return len(bytes.TrimSpace(procs)) == 0, nil
}

// kill sends SIGKILL to every process of the tree. pgid is the process group
// of the leader, used when there is no cgroup; the caller guarantees the leader
// is not yet reaped, so the group id is still ours.
func (g *group) kill(pgid int) error {
	if g.kind != treePgrp {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.cg == nil {
			return nil // released: it was empty
		}
	}
	switch g.kind {
	case treeV2:
		g.cg.killed = true
		return cgroup.WriteFileAt(int(g.cg.dir.Fd()), "cgroup.kill", "1")
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
	fd := int(g.cg.dir.Fd())
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

// release gives the group back once it is empty (kept for another process,
// or removed); done is false while it is not empty.
func (g *group) release() (done bool, err error) {
	if g.kind == treePgrp {
		return true, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cg == nil {
		return true, nil
	}
	empty, err := g.cg.empty()
	if err != nil || !empty {
		return false, err
	}
	c := g.cg
	g.cg = nil
	return true, g.pool.put(c)
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
