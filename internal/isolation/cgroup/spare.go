// This file implements spare groups: v1 memory and CPU groups a removed Group
// leaves for the next Create, reset, instead of removing them.

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// SparePrefix begins the name of a spare group: one Remove kept for reuse.
// No sandbox id has a dash, so a spare is never taken for a group in use.
const SparePrefix = "spare-"

// spareMaxBytes is the most memory a removed group may still have charged
// and be kept: page cache of files its processes read (an image's shared
// libraries), which stays charged to the group that first read it until
// reclaimed. A group that cached more is removed, so a reused group starts
// with at most this much that is not its own.
const spareMaxBytes = 4 << 20

// spares are the groups a Layout keeps for reuse, by parent directory.
type spares struct {
	mu   sync.Mutex
	max  int
	seq  uint64
	dirs map[string][]string
}

// KeepSpares makes Remove keep up to n of the directories of removed groups
// per parent, in the v1 memory and cpu (and cpuacct) hierarchies, and Create
// take them (renamed) before it makes new ones. Making and removing a memory
// group is a cgroup's dearest part: the kernel allocates its per-CPU
// statistics at mkdir and frees them, after an RCU grace period, in a
// worker at rmdir. Those hierarchies are the ones a Group never delegates
// (Delegate), so nothing but sbx can have changed a spare: Remove resets
// its peak and failure counters (and the CPU time count of a co-mounted
// cpuacct) and keeps only a group without an OOM kill (memory.oom_control
// counts them for good) and with little memory still charged
// (spareMaxBytes). SetLimits writes every limit of a reused group, the
// unlimited ones too. v2 has no rename of a group, and on a pure v2 host the
// memory controller is in the delegated group: there, and with n = 0, every
// group is made and removed. DropSpares removes them.
func (l *Layout) KeepSpares(n int) {
	if n <= 0 || l.fake || l.pureV2() {
		l.spares = nil
		return
	}
	l.spares = &spares{max: n, dirs: map[string][]string{}}
}

// IsSpare reports whether name, a directory's name under a parent of
// groups, is a spare's.
func IsSpare(name string) bool { return strings.HasPrefix(name, SparePrefix) }

// reusable reports whether dir, a directory of g, may be kept and taken as
// a spare: a v1 directory that only memory, cpu or cpuacct are mounted in.
func (g *Group) reusable(dir string) bool {
	if g.layout.spares == nil || dir == g.v2 {
		return false
	}
	found := false
	for ctrl, d := range g.v1 {
		if d != dir {
			continue
		}
		if ctrl != "memory" && ctrl != "cpu" && ctrl != "cpuacct" {
			return false
		}
		found = true
	}
	return found
}

// takeSpare renames a spare of dir's parent to dir. It reports false when
// there is none or the rename failed (the spare is removed then).
func (l *Layout) takeSpare(dir string) bool {
	s := l.spares
	parent := filepath.Dir(dir)
	s.mu.Lock()
	list := s.dirs[parent]
	if len(list) == 0 {
		s.mu.Unlock()
		return false
	}
	spare := list[len(list)-1]
	s.dirs[parent] = list[:len(list)-1]
	s.mu.Unlock()
	if err := os.Rename(spare, dir); err != nil {
		syscall.Rmdir(spare)
		return false
	}
	return true
}

// keep resets dir, a group's directory no process is left in, and renames it
// to a spare of its parent. It reports false, having renamed nothing, when
// the parent has its fill of spares or dir may not be kept.
func (g *Group) keep(dir string) bool {
	s := g.layout.spares
	parent := filepath.Dir(dir)
	s.mu.Lock()
	if len(s.dirs[parent]) >= s.max {
		s.mu.Unlock()
		return false
	}
	s.seq++
	spare := filepath.Join(parent, SparePrefix+strconv.FormatUint(s.seq, 10))
	s.mu.Unlock()
	if reset(dir) != nil || os.Rename(dir, spare) != nil {
		return false
	}
	s.mu.Lock()
	if len(s.dirs[parent]) < s.max {
		s.dirs[parent] = append(s.dirs[parent], spare)
		spare = ""
	}
	s.mu.Unlock()
	if spare != "" { // others filled the parent meanwhile
		syscall.Rmdir(spare)
	}
	return true
}

// reset readies dir for another group: no member, no OOM kill counted, at
// most spareMaxBytes charged; peak and failure counters zeroed.
func reset(dir string) error {
	procs, err := readFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(procs))) > 0 {
		return errors.New("processes remain")
	}
	zero := func(name string) error {
		err := writeFile(filepath.Join(dir, name), "0")
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	// A memory group (the others have no memory.oom_control).
	if n, err := readKey(filepath.Join(dir, "memory.oom_control"), "oom_kill"); !errors.Is(err, fs.ErrNotExist) {
		if err != nil || n != 0 {
			return fmt.Errorf("an OOM kill counted (%d) or unread: %v", n, err)
		}
		if n, err := readInt(filepath.Join(dir, "memory.usage_in_bytes")); err != nil || n > spareMaxBytes {
			return fmt.Errorf("%d bytes charged or unread: %v", n, err)
		}
		for _, name := range []string{"memory.max_usage_in_bytes", "memory.failcnt", "memory.memsw.max_usage_in_bytes", "memory.memsw.failcnt"} {
			if err := zero(name); err != nil {
				return err
			}
		}
	}
	return zero("cpuacct.usage")
}

// DropSpares removes the spare groups the layout keeps.
func (l *Layout) DropSpares() {
	s := l.spares
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for parent, list := range s.dirs {
		for _, d := range list {
			syscall.Rmdir(d)
		}
		delete(s.dirs, parent)
	}
}

// RemoveSpares removes the spare groups in the directory rel (a parent of
// groups) of every hierarchy, those a process that kept them left behind:
// an sbx that stopped without DropSpares.
func (l *Layout) RemoveSpares(rel string) error {
	var errs []error
	for _, root := range l.Roots() {
		dir := filepath.Join(root, rel)
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		for _, e := range ents {
			if e.IsDir() && IsSpare(e.Name()) {
				if err := syscall.Rmdir(filepath.Join(dir, e.Name())); err != nil && err != syscall.ENOENT {
					errs = append(errs, fmt.Errorf("removing spare cgroup %s: %w", filepath.Join(dir, e.Name()), err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Roots lists the mount points of the layout's hierarchies, each once.
func (l *Layout) Roots() []string {
	var out []string
	if l.V2 != "" {
		out = append(out, l.V2)
	}
	for _, m := range l.V1 {
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}
