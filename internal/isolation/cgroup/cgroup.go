// This file implements a Group: create, limit, add, kill, wait, remove, stats.

package cgroup

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/osthread"
)

// Limits are the resource limits of a Group. A zero field leaves that resource
// unlimited.
type Limits struct {
	MemoryBytes int64
	Pids        int64
	// MilliCPUs is the CPU bandwidth in thousandths of a core (1000 = one core).
	MilliCPUs int64
}

// cpuPeriodUS is the CFS period the CPU quota is expressed against.
const cpuPeriodUS = 100_000

// Stats is the resource use of a Group.
type Stats struct {
	MemoryBytes     int64
	MemoryPeakBytes int64
	Pids            int64
	CPUUsage        time.Duration
	OOMKills        int64
}

// Group is one cgroup at the same relative path in every hierarchy it uses.
type Group struct {
	layout *Layout
	rel    string
	// v1 maps a controller to its directory (co-mounted controllers share one).
	v1 map[string]string
	// v2 is the directory in the unified hierarchy, or "".
	v2 string
	// reused are the directories Create took from spares (KeepSpares).
	reused []string
}

// Group returns the group at rel (e.g. "sbx/inst/id") without creating it, for
// groups created earlier (by this process or a previous one).
func (l *Layout) Group(rel string) (*Group, error) {
	clean := filepath.Clean(rel)
	if rel == "" || clean != rel || filepath.IsAbs(rel) || strings.HasPrefix(rel, "..") ||
		!strings.Contains(rel, "/") {
		return nil, fmt.Errorf("cgroup path %q: want a clean relative path of at least two elements", rel)
	}
	g := &Group{layout: l, rel: rel, v1: map[string]string{}}
	for ctrl, mnt := range l.V1 {
		if ctrl == "cpuacct" && l.V1["cpu"] == mnt {
			continue // co-mounted with cpu: the cpu directory serves both
		}
		dir := filepath.Join(mnt, rel)
		if ctrl == "freezer" && l.NoFreezer && !exists(dir) {
			continue // the unified group kills and freezes; one made earlier is kept track of
		}
		if ctrl == "cpuacct" && l.NoCPUAcct && !exists(dir) {
			continue // the unified group counts CPU time; one made earlier is kept track of
		}
		g.v1[ctrl] = dir
	}
	if l.V2 != "" {
		g.v2 = filepath.Join(l.V2, rel)
	}
	return g, nil
}

// Path is the group's relative path.
func (g *Group) Path() string { return g.rel }

// V2Dir is the group's directory in the unified hierarchy, or "".
func (g *Group) V2Dir() string { return g.v2 }

// V1Dirs are the group's directories in the v1 hierarchies, each once.
func (g *Group) V1Dirs() []string {
	var out []string
	for _, d := range g.dirs() {
		if d != g.v2 {
			out = append(out, d)
		}
	}
	return out
}

// Dir is the group's directory for v1 controller ctrl, or "".
func (g *Group) Dir(ctrl string) string {
	if ctrl == "cpuacct" && g.v1["cpuacct"] == "" {
		return g.v1["cpu"]
	}
	return g.v1[ctrl]
}

// OOMFile is the file whose oom_kill counter tells an OOM kill, and its format:
// memory.events ("v2") or memory.oom_control ("v1"). It is "" without a memory
// controller.
func (g *Group) OOMFile() (path, format string) {
	if d := g.v1["memory"]; d != "" {
		return filepath.Join(d, "memory.oom_control"), "v1"
	}
	if g.layout.pureV2() && g.layout.Has("memory") {
		return filepath.Join(g.v2, "memory.events"), "v2"
	}
	return "", ""
}

// WorkGroup is where the processes a group's agent starts go, apart from
// the agent: the group's own limits bound both together, the work group's
// pids limit the workload alone, so a fork bomb leaves the agent room to
// fork, answer and clean up. On a v1 host it is a child of the group in the
// pids hierarchy, which the agent makes; on a pure v2 host a leaf of the
// group (Leaves) beside AgentGroup.
const WorkGroup = "work"

// AgentGroup is the leaf of a group, on a pure v2 host, that its agent lives
// in (Leaves).
const AgentGroup = "agent"

// PidsDir is the group's directory in the v1 pids hierarchy, or "".
func (g *Group) PidsDir() string { return g.v1["pids"] }

// Leaves reports whether the group holds its processes in two leaves of its
// own in the unified hierarchy, AgentGroup and WorkGroup: on a pure v2 host.
// v2 lets no process live in a group whose children have a controller (the
// "no internal processes" rule), and the work leaf's pids limit needs the
// pids controller enabled for the group's children: so the agent cannot stay
// in the group itself, and goes in a leaf of its own (SettleAgent).
func (g *Group) Leaves() bool { return g.v2 != "" && g.layout.pureV2() }

// WorkDir is the directory, in the unified hierarchy, that the groups of the
// processes the agent starts are made under: the work leaf where the group
// has leaves, else the group's own directory; "" without a unified hierarchy.
func (g *Group) WorkDir() string {
	if g.Leaves() {
		return filepath.Join(g.v2, WorkGroup)
	}
	return g.v2
}

// MakeLeaves makes the group's agent and work leaves (Leaves) in the unified
// hierarchy, while no process is in the group.
func (g *Group) MakeLeaves() error {
	if !g.Leaves() {
		return fmt.Errorf("cgroup %s: leaves are made on a pure v2 host only", g.rel)
	}
	for _, name := range []string{AgentGroup, WorkGroup} {
		dir := filepath.Join(g.v2, name)
		if err := g.layout.mkdir(dir); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
	}
	return nil
}

// SettleAgent moves process pid from the group's own v2 directory into its
// agent leaf, then enables the pids controller for the leaves and limits the
// work leaf to workPids (unlimited when 0), where the host has the pids
// controller. The agent is born in the group itself, not in its leaf, so
// that the cgroup namespace it makes at birth (CLONE_NEWCGROUP with
// CLONE_INTO_CGROUP) is rooted at the group, above both leaves: under
// nsdelegate a process may place children only in groups its namespace
// holds, and the agent forks its workload into the work leaf. The move waits
// for the kernel's threadgroup lock (an RCU grace period); the controller is
// enabled only once no process is left in the group, as v2 requires.
func (g *Group) SettleAgent(pid int, workPids int64) error {
	if !g.Leaves() {
		return fmt.Errorf("cgroup %s: no agent leaf: leaves are made on a pure v2 host only", g.rel)
	}
	agent := filepath.Join(g.v2, AgentGroup)
	if err := writeFile(filepath.Join(agent, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("moving pid %d to cgroup %s: %w", pid, agent, err)
	}
	if !g.layout.Has("pids") {
		return nil
	}
	if err := writeFile(filepath.Join(g.v2, "cgroup.subtree_control"), "+pids"); err != nil {
		return fmt.Errorf("enabling the pids controller in %s: %w", g.v2, err)
	}
	if workPids <= 0 {
		return nil
	}
	// Not SetWorkPids, which passes over a missing file: pids.max exists
	// now, and a limit that cannot be set fails the start.
	work := filepath.Join(g.v2, WorkGroup, "pids.max")
	if err := writeFile(work, strconv.FormatInt(workPids, 10)); err != nil {
		return fmt.Errorf("setting cgroup limit %s=%d: %w", work, workPids, err)
	}
	return nil
}

// SetWorkPids sets the pids limit of the group's WorkGroup, when there is one
// with a pids controller.
func (g *Group) SetWorkPids(n int64) error {
	d := g.v1["pids"]
	if g.Leaves() && g.layout.Has("pids") {
		d = g.v2
	}
	if d == "" {
		return nil
	}
	err := writeFile(filepath.Join(d, WorkGroup, "pids.max"), strconv.FormatInt(n, 10))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("setting cgroup limit %s/pids.max=%d: %w", WorkGroup, n, err)
	}
	return nil
}

// dirs lists each directory of the group once: v2 first, then v1, sorted.
func (g *Group) dirs() []string {
	var out []string
	if g.v2 != "" {
		out = append(out, g.v2)
	}
	var v1 []string
	for _, d := range g.v1 {
		if !slices.Contains(v1, d) {
			v1 = append(v1, d)
		}
	}
	slices.Sort(v1)
	return append(out, v1...)
}

// Create makes the group at rel in every hierarchy it uses, or takes a spare
// for it where the layout keeps them (KeepSpares). The leaf must not exist:
// Create never adopts a group it did not make. Missing ancestors are made
// too; on a pure v2 host the memory, pids and cpu controllers are enabled down to
// the leaf's parent. On error, what Create made of the leaf is removed.
func (l *Layout) Create(rel string) (_ *Group, retErr error) {
	g, err := l.Group(rel)
	if err != nil {
		return nil, err
	}
	if len(g.dirs()) == 0 {
		return nil, errors.New("creating cgroup: no cgroup hierarchy is mounted")
	}
	var made []string
	defer func() {
		if retErr != nil {
			for _, d := range slices.Backward(made) {
				l.rmdir(d)
			}
		}
	}()
	for _, d := range g.dirs() {
		if err := l.mkdirParents(filepath.Dir(d)); err != nil {
			return nil, err
		}
		if g.layout.pureV2() && d == g.v2 {
			if err := l.enableControllers(g.v2); err != nil {
				return nil, err
			}
		}
		if g.reusable(d) && l.takeSpare(d) {
			g.reused = append(g.reused, d)
			made = append(made, d)
			continue
		}
		if err := l.mkdir(d); err != nil {
			return nil, fmt.Errorf("creating cgroup %s: %w", d, err)
		}
		made = append(made, d)
	}
	return g, nil
}

// mkdirParents makes dir and its missing ancestors, which sbx owns (its own
// top-level group and instance group), never a leaf of another owner.
func (l *Layout) mkdirParents(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := l.mkdirParents(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := l.mkdir(dir); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating cgroup %s: %w", dir, err)
	}
	return nil
}

// enableControllers enables the v2 controllers in the subtree_control of every
// ancestor of leaf below the v2 root, and of the root itself, where missing.
func (l *Layout) enableControllers(leaf string) error {
	rel, err := filepath.Rel(l.V2, filepath.Dir(leaf))
	if err != nil {
		return err
	}
	dir := l.V2
	parts := []string{}
	if rel != "." {
		parts = strings.Split(rel, "/")
	}
	for i := 0; ; i++ {
		avail, err := readFields(filepath.Join(dir, "cgroup.controllers"))
		if err != nil {
			return fmt.Errorf("enabling cgroup controllers in %s: %w", dir, err)
		}
		on, err := readFields(filepath.Join(dir, "cgroup.subtree_control"))
		if err != nil {
			return fmt.Errorf("enabling cgroup controllers in %s: %w", dir, err)
		}
		var add []string
		for _, c := range v2Controllers {
			if slices.Contains(avail, c) && !slices.Contains(on, c) {
				add = append(add, "+"+c)
			}
		}
		if len(add) > 0 {
			if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), strings.Join(add, " ")); err != nil {
				return fmt.Errorf("enabling cgroup controllers %v in %s: %w", add, dir, err)
			}
		}
		if i == len(parts) {
			return nil
		}
		dir = filepath.Join(dir, parts[i])
	}
}

// SetLimits writes lim into the group: into v1 controllers where mounted, else
// into the v2 group on a pure v2 host, each limit whose controller the host
// has. On a pure v2 host they are the group's own, above its leaves: its
// memory and CPU limits bound the agent and the workload together, as its
// pids limit does (the work leaf's is SettleAgent's).
func (g *Group) SetLimits(lim Limits) error {
	var errs []error
	set := func(dir, file, val string) {
		if err := writeFile(filepath.Join(dir, file), val); err != nil {
			errs = append(errs, fmt.Errorf("setting cgroup limit %s=%s: %w", file, val, err))
		}
	}
	if g.layout.pureV2() { // each limit whose controller the host has, as on v1
		if lim.MemoryBytes > 0 && g.layout.Has("memory") {
			set(g.v2, "memory.max", strconv.FormatInt(lim.MemoryBytes, 10))
			if _, err := os.Stat(filepath.Join(g.v2, "memory.swap.max")); err == nil {
				set(g.v2, "memory.swap.max", "0")
			}
		}
		if lim.Pids > 0 && g.layout.Has("pids") {
			set(g.v2, "pids.max", strconv.FormatInt(lim.Pids, 10))
		}
		if lim.MilliCPUs > 0 && g.layout.Has("cpu") {
			set(g.v2, "cpu.max", fmt.Sprintf("%d %d", lim.MilliCPUs*cpuPeriodUS/1000, cpuPeriodUS))
		}
		return errors.Join(errs...)
	}
	// A spare group taken (KeepSpares) may hold its last user's limits: the
	// unlimited ones are written too.
	if d := g.v1["memory"]; d != "" && (lim.MemoryBytes > 0 || slices.Contains(g.reused, d)) {
		v := "-1"
		if lim.MemoryBytes > 0 {
			v = strconv.FormatInt(lim.MemoryBytes, 10)
		}
		// memsw (memory+swap) exists only with swap accounting; equal means no
		// swap. The kernel keeps memory ≤ memsw, so raising a limit writes memsw
		// first and lowering it writes memory first.
		memsw := filepath.Join(d, "memory.memsw.limit_in_bytes")
		if _, err := os.Stat(memsw); err != nil {
			set(d, "memory.limit_in_bytes", v)
		} else if writeFile(filepath.Join(d, "memory.limit_in_bytes"), v) == nil {
			set(d, "memory.memsw.limit_in_bytes", v)
		} else {
			set(d, "memory.memsw.limit_in_bytes", v)
			set(d, "memory.limit_in_bytes", v)
		}
	}
	if d := g.v1["pids"]; d != "" && lim.Pids > 0 {
		set(d, "pids.max", strconv.FormatInt(lim.Pids, 10))
	}
	if d := g.v1["cpu"]; d != "" && lim.MilliCPUs > 0 {
		set(d, "cpu.cfs_period_us", strconv.Itoa(cpuPeriodUS))
		set(d, "cpu.cfs_quota_us", strconv.FormatInt(lim.MilliCPUs*cpuPeriodUS/1000, 10))
	} else if d != "" && slices.Contains(g.reused, d) {
		set(d, "cpu.cfs_quota_us", "-1")
	}
	return errors.Join(errs...)
}

// AddPid moves process pid into the group in every hierarchy.
func (g *Group) AddPid(pid int) error {
	var errs []error
	for _, d := range g.dirs() {
		if err := writeFile(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			errs = append(errs, fmt.Errorf("adding pid %d to cgroup %s: %w", pid, d, err))
		}
	}
	return errors.Join(errs...)
}

// ForkIn runs fork, which starts one process, so that the process is born in the
// group in every hierarchy and never runs outside it: fork runs on an OS thread
// of its own that first joins the group in each v1 hierarchy (v1 places single
// threads through "tasks"), and that thread is discarded afterwards rather than
// returned to the Go scheduler — so fork may change other per-thread state too.
// fork receives the v2 directory's fd (or -1) for CLONE_INTO_CGROUP
// (syscall.SysProcAttr.UseCgroupFD).
func (g *Group) ForkIn(fork func(v2fd int) error) error {
	v2fd := -1
	if g.v2 != "" {
		fd, err := syscall.Open(g.v2, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening cgroup %s: %w", g.v2, err)
		}
		defer syscall.Close(fd)
		v2fd = fd
	}
	return ForkInDirs(g.V1Dirs(), func() error { return fork(v2fd) })
}

// ForkInDirs runs fork on an OS thread of its own that first joins the v1
// group directories v1 and is discarded afterwards: a process fork starts
// there is born in those groups (ForkIn, for a Group; the native backend's
// spawner, for directories it was sent).
func ForkInDirs(v1 []string, fork func() error) error {
	return osthread.Discarded(func() error {
		if err := JoinThread(v1); err != nil {
			return err
		}
		return fork()
	})
}

// ThisThread, written to a v1 group's "tasks", moves the writing thread. The
// kernel then skips the threadgroup lock that a thread id written there takes,
// whose write side waits for an RCU grace period: 5-17 ms for the five joins
// before a sandbox's fork.
const ThisThread = "0"

// JoinThread moves the calling OS thread into the v1 group directories dirs.
// The caller locks the thread and discards it afterwards (osthread).
func JoinThread(dirs []string) error {
	for _, d := range dirs {
		if err := writeFile(filepath.Join(d, "tasks"), ThisThread); err != nil {
			return fmt.Errorf("joining cgroup %s: %w", d, err)
		}
	}
	return nil
}

// Procs lists the pids in the group and its descendants, in every hierarchy,
// each once. A group that does not exist has none.
func (g *Group) Procs() ([]int, error) {
	var pids []int
	var errs []error
	for _, d := range g.dirs() {
		p, err := procsUnder(d)
		if err != nil {
			errs = append(errs, err)
		}
		for _, pid := range p {
			if !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids, errors.Join(errs...)
}

// Kill sends SIGKILL to every process of the group and its descendants. It
// uses v2 cgroup.kill where a v2 group exists, else freezes the v1 freezer group,
// kills each member and thaws, until no member is left (at most a few rounds),
// else kills the listed members. It does not wait for them to exit: see WaitEmpty.
// A group that does not exist is not an error.
func (g *Group) Kill() error {
	if g.v2 != "" {
		err := writeFile(filepath.Join(g.v2, "cgroup.kill"), "1")
		switch {
		case err == nil, errors.Is(err, fs.ErrNotExist) && !exists(g.v2):
			return nil
		case !errors.Is(err, fs.ErrNotExist): // cgroup.kill is missing before Linux 5.14
			return fmt.Errorf("killing cgroup %s: %w", g.v2, err)
		}
	}
	if d := g.v1["freezer"]; d != "" && exists(d) {
		return freezeKill(d)
	}
	pids, err := g.Procs()
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return err
}

// freezeKill freezes dir, kills every member, thaws; it repeats while members
// remain, at most maxRounds times.
func freezeKill(dir string) error {
	const maxRounds = 8
	state := filepath.Join(dir, "freezer.state")
	for range maxRounds {
		if err := writeFile(state, "FROZEN"); err != nil {
			return fmt.Errorf("freezing cgroup %s: %w", dir, err)
		}
		// A task stuck in an uninterruptible sleep keeps the group FREEZING; kill
		// what is listed anyway: the signal is delivered once it is thawed.
		for i := 0; i < 100; i++ {
			b, err := readFile(state)
			if err != nil || strings.TrimSpace(string(b)) == "FROZEN" {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		pids, err := procsUnder(dir)
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		if terr := writeFile(state, "THAWED"); terr != nil {
			return fmt.Errorf("thawing cgroup %s: %w", dir, terr)
		}
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		left, _ := procsUnder(dir)
		if len(left) == 0 {
			return nil
		}
		time.Sleep(time.Millisecond) // let the killed tasks leave before the next round
	}
	return fmt.Errorf("killing cgroup %s: members remain after %d rounds", dir, maxRounds)
}

// WaitEmpty blocks until the group and its descendants hold no process, or ctx
// ends. It polls Populated with a backoff from 100µs to 5ms.
func (g *Group) WaitEmpty(ctx context.Context) error {
	delay := 100 * time.Microsecond
	for {
		busy, err := g.Populated()
		if err == nil && !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("processes remain")
			}
			return fmt.Errorf("waiting for cgroup %s to empty: %w (%w)", g.rel, context.Cause(ctx), err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 5*time.Millisecond)
	}
}

// Populated reports whether a process is left in the group or under it. Every
// process is in exactly one group of each hierarchy and only sbx moves them, so
// one hierarchy answers: the v2 group's cgroup.events "populated", else the v1
// pids controller's pids.current (hierarchical; a task counts until it is
// reaped). Without either it lists the members of every hierarchy. A group
// that does not exist holds none.
func (g *Group) Populated() (bool, error) {
	var file, key string
	switch {
	case g.v2 != "":
		file, key = filepath.Join(g.v2, "cgroup.events"), "populated"
	case g.v1["pids"] != "":
		file = filepath.Join(g.v1["pids"], "pids.current")
	default:
		pids, err := g.Procs()
		return len(pids) > 0, err
	}
	var n int64
	var err error
	if key != "" {
		n, err = readKey(file, key)
	} else {
		n, err = readInt(file)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return n != 0, err
}

// Remove removes the group and every group under it (children the sandbox made),
// deepest first, in every hierarchy. A busy group is killed again and retried
// until ctx ends. A group already gone is not an error.
func (g *Group) Remove(ctx context.Context) error {
	var errs []error
	for _, d := range g.dirs() {
		if g.reusable(d) && g.keep(d) {
			continue
		}
		if err := g.removeTree(ctx, d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (g *Group) removeTree(ctx context.Context, dir string) error {
	delay := 100 * time.Microsecond
	for {
		err := g.layout.rmdirTree(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("removing cgroup %s: %w", dir, err)
		}
		g.Kill()
		select {
		case <-ctx.Done():
			return fmt.Errorf("removing cgroup %s: %w (%w)", dir, err, context.Cause(ctx))
		case <-time.After(delay):
		}
		delay = min(delay*2, 10*time.Millisecond)
	}
}

// rmdirTree removes dir and the directories under it, deepest first.
func (l *Layout) rmdirTree(dir string) error {
	if l.fake {
		if !exists(dir) {
			return fs.ErrNotExist
		}
		return os.RemoveAll(dir)
	}
	// Mostly the group has no children: one rmdir does it. With children it
	// fails with EBUSY and they go first, each the same way: only a group
	// that has children is listed (a group's directory lists its thirty-odd
	// control files too, and a leaf's never needs reading).
	switch err := syscall.Rmdir(dir); {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ENOENT):
		return fs.ErrNotExist
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := l.rmdirTree(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
		return &fs.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}

// Stats reads the group's resource use.
func (g *Group) Stats() (Stats, error) {
	var st Stats
	var errs []error
	num := func(path string) int64 {
		n, err := readInt(path)
		if err != nil {
			errs = append(errs, err)
		}
		return n
	}
	if g.layout.pureV2() { // the group's own files: its leaves' sum
		if g.layout.Has("memory") {
			st.MemoryBytes = num(filepath.Join(g.v2, "memory.current"))
			if p := filepath.Join(g.v2, "memory.peak"); exists(p) {
				st.MemoryPeakBytes = num(p)
			}
			st.OOMKills, _ = readKey(filepath.Join(g.v2, "memory.events"), "oom_kill")
		}
		if g.layout.Has("pids") {
			st.Pids = num(filepath.Join(g.v2, "pids.current"))
		}
	} else {
		if d := g.v1["memory"]; d != "" {
			st.MemoryBytes = num(filepath.Join(d, "memory.usage_in_bytes"))
			st.MemoryPeakBytes = num(filepath.Join(d, "memory.max_usage_in_bytes"))
			st.OOMKills, _ = readKey(filepath.Join(d, "memory.oom_control"), "oom_kill")
		}
		if d := g.v1["pids"]; d != "" {
			st.Pids = num(filepath.Join(d, "pids.current"))
		}
	}
	if d := g.Dir("cpuacct"); d != "" && exists(filepath.Join(d, "cpuacct.usage")) {
		st.CPUUsage = time.Duration(num(filepath.Join(d, "cpuacct.usage")))
	} else if g.v2 != "" {
		us, err := readKey(filepath.Join(g.v2, "cpu.stat"), "usage_usec")
		if err != nil {
			errs = append(errs, err)
		}
		st.CPUUsage = time.Duration(us) * time.Microsecond
	}
	return st, errors.Join(errs...)
}

// procsUnder lists the pids in dir's cgroup.procs and those of its descendants.
func procsUnder(dir string) ([]int, error) {
	var pids []int
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile, or never made
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		b, err := readFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids, err
}

func (l *Layout) mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	if l.fake {
		return populateFake(dir)
	}
	return nil
}

func (l *Layout) rmdir(dir string) {
	if l.fake {
		os.RemoveAll(dir)
		return
	}
	syscall.Rmdir(dir)
}

// WriteFileAt writes val to an existing kernel interface file, a cgroup's or
// a process's under /proc, name relative to dirfd (unix.AT_FDCWD for a path):
// the kernel reports a rejected value as the error of write, and a missing
// file must not be created. Interface files are read and written with plain
// system calls: os.File would also register each with the poller.
func WriteFileAt(dirfd int, name, val string) error {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	for {
		_, err = unix.Write(fd, []byte(val))
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return &fs.PathError{Op: "write", Path: name, Err: err}
	}
	return nil
}

// ReadFileAt reads a kernel interface file whole; see WriteFileAt.
func ReadFileAt(dirfd int, name string) ([]byte, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, len(buf))
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: name, Err: err}
		case n == 0:
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func writeFile(path, val string) error     { return WriteFileAt(unix.AT_FDCWD, path, val) }
func readFile(path string) ([]byte, error) { return ReadFileAt(unix.AT_FDCWD, path) }

func readFields(path string) ([]string, error) {
	b, err := readFile(path)
	return strings.Fields(string(b)), err
}

func readInt(path string) (int64, error) {
	b, err := readFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// readKey reads the value of key in a flat-keyed file ("oom_kill 3").
func readKey(path, key string) (int64, error) {
	b, err := readFile(path)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no key %q", path, key)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// delegated are the files of a group whose owner may place processes in it
// and make groups under it (cgroup v2's delegation files; v1's tasks and
// cgroup.procs).
var delegated = []string{".", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control", "tasks"}

// Delegate hands the group's v2 directory and its v1 freezer and pids
// directories to uid:gid, as systemd delegates a unit's group: their owner
// (the root of a sandbox's user namespace) may make groups under them and
// move its own processes there, and nothing else: the limits' files stay
// host root's. Where the group has leaves (Leaves), the owner may make
// groups under the work leaf (the directory and its cgroup.procs), and of
// the group's own files has only cgroup.procs: the kernel wants the common
// ancestor's writable to move a process between the leaves, which the
// agent's fork into the work leaf does. The group's cgroup.subtree_control
// stays host root's, so the pids controller that gives the work leaf its
// limit cannot be turned off from inside.
func (g *Group) Delegate(uid, gid int) error {
	type files struct {
		dir   string
		names []string
	}
	var all []files
	if g.Leaves() {
		all = append(all, files{g.v2, []string{"cgroup.procs"}}, files{filepath.Join(g.v2, WorkGroup), []string{".", "cgroup.procs"}})
	} else {
		all = append(all, files{g.v2, delegated})
	}
	all = append(all, files{g.v1["freezer"], delegated}, files{g.v1["pids"], delegated})
	for _, f := range all {
		if f.dir == "" {
			continue
		}
		for _, name := range f.names {
			err := os.Lchown(filepath.Join(f.dir, name), uid, gid)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("delegating cgroup %s: %w", f.dir, err)
			}
		}
	}
	return nil
}
