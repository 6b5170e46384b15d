// This file implements host detection: which hierarchies are mounted, and where.

package cgroup

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Controllers a Group is created in on v1 hosts. cpuacct only matters for stats
// and is used only when mounted apart from cpu.
var v1Controllers = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// v2Controllers are enabled down the tree on a pure v2 host.
var v2Controllers = []string{"memory", "pids", "cpu"}

// Layout is where the cgroup hierarchies of a host are mounted.
type Layout struct {
	// V1 maps a v1 controller name to its hierarchy's mount point. Co-mounted
	// controllers ("cpu,cpuacct") map to the same directory.
	V1 map[string]string
	// V2 is the mount point of the unified hierarchy, or "".
	V2 string
	// V2Controllers are the controllers available at the v2 root.
	V2Controllers []string
	// NoFreezer: the unified hierarchy kills (cgroup.kill) and freezes
	// (cgroup.freeze) a group, so new groups are not made in the v1 freezer
	// hierarchy, which would add nothing; one an older sbx made there is
	// still found, killed and removed (Group). See SkipV1WhereV2Serves.
	NoFreezer bool
	// NoCPUAcct: the unified hierarchy counts a group's CPU time (cpu.stat's
	// usage_usec, which every v2 group has), so new groups are not made in
	// a v1 cpuacct hierarchy of its own either: one directory fewer to make,
	// join and remove per sandbox. One made earlier is still found.
	NoCPUAcct bool
	// fake makes directories plain ones with regular files (NewFakeV2).
	fake bool
	// spares are the groups Remove keeps for Create (KeepSpares), or nil.
	spares *spares
}

// Mode names the layout: "v1", "v2", "hybrid" or "none".
func (l *Layout) Mode() string {
	switch {
	case len(l.V1) > 0 && l.V2 != "":
		return "hybrid"
	case len(l.V1) > 0:
		return "v1"
	case l.V2 != "":
		return "v2"
	}
	return "none"
}

// Has reports whether controller ctrl is available, in v1 or (on a pure v2 host) v2.
func (l *Layout) Has(ctrl string) bool {
	if _, ok := l.V1[ctrl]; ok {
		return true
	}
	return len(l.V1) == 0 && l.V2 != "" && slices.Contains(l.V2Controllers, ctrl)
}

// pureV2 reports whether resource control goes through the v2 hierarchy.
func (l *Layout) pureV2() bool { return len(l.V1) == 0 && l.V2 != "" }

// Detect reads /proc/self/mountinfo and the v2 root's cgroup.controllers.
func Detect() (*Layout, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("detecting cgroups: %w", err)
	}
	defer f.Close()
	l, err := ParseMountinfo(f)
	if err != nil {
		return nil, err
	}
	if l.V2 != "" {
		b, err := readFile(filepath.Join(l.V2, "cgroup.controllers"))
		if err != nil {
			return nil, fmt.Errorf("detecting cgroups: %w", err)
		}
		l.V2Controllers = strings.Fields(string(b))
	}
	return l, nil
}

// ParseMountinfo finds the cgroup hierarchies in a mountinfo listing. Of several
// v2 mounts it prefers /sys/fs/cgroup, then /sys/fs/cgroup/unified. Only mounts of
// a hierarchy's root ("/") count: a bind of a subtree is not a hierarchy.
func ParseMountinfo(r io.Reader) (*Layout, error) {
	l := &Layout{V1: map[string]string{}}
	var v2 []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 || pf[3] != "/" {
			continue
		}
		mnt := unescapeMount(pf[4])
		switch qf[0] {
		case "cgroup2":
			v2 = append(v2, mnt)
		case "cgroup":
			for _, opt := range strings.Split(qf[2], ",") {
				if slices.Contains(v1Controllers, opt) {
					if _, dup := l.V1[opt]; !dup {
						l.V1[opt] = mnt
					}
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	for _, want := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if slices.Contains(v2, want) {
			l.V2 = want
			break
		}
	}
	return l, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// SkipV1WhereV2Serves makes the unified hierarchy's group at rel (sbx's
// parent of its groups) with its missing ancestors, and sets what a group
// there does so a v1 group would add nothing: NoFreezer when it has
// cgroup.kill and cgroup.freeze (Linux 5.14 and 5.2), NoCPUAcct when it
// has cpu.stat and cpuacct is mounted apart from cpu (co-mounted, it costs
// no directory of its own).
func (l *Layout) SkipV1WhereV2Serves(rel string) error {
	if l.V2 == "" || len(l.V1) == 0 || l.fake {
		return nil
	}
	dir := filepath.Join(l.V2, rel)
	if err := l.mkdirParents(dir); err != nil {
		return err
	}
	if l.V1["freezer"] != "" {
		l.NoFreezer = exists(filepath.Join(dir, "cgroup.kill")) && exists(filepath.Join(dir, "cgroup.freeze"))
	}
	if acct := l.V1["cpuacct"]; acct != "" && acct != l.V1["cpu"] {
		l.NoCPUAcct = exists(filepath.Join(dir, "cpu.stat"))
	}
	return nil
}
