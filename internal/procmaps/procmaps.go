// Package procmaps reads this process's memory mappings (/proc/self/maps)
// and gives the kernel advice (madvise) on those a caller picks.
package procmaps

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mapping is one line of /proc/<pid>/maps (or a mapping's first line in
// smaps): start-end perms offset dev inode [path].
type Mapping struct {
	Start, End uint64
	Perms      string // "r-xp"
	Inode      uint64
	Path       string // "" for an anonymous mapping; "[vdso]" and the like
}

// Parse reads a maps line; ok is false for any other line (smaps' counters).
func Parse(line string) (m Mapping, ok bool) {
	f := strings.Fields(line)
	if len(f) < 5 {
		return m, false
	}
	lo, hi, found := strings.Cut(f[0], "-")
	if !found {
		return m, false
	}
	var err1, err2, err3 error
	m.Start, err1 = strconv.ParseUint(lo, 16, 64)
	m.End, err2 = strconv.ParseUint(hi, 16, 64)
	m.Inode, err3 = strconv.ParseUint(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || m.End <= m.Start {
		return Mapping{}, false
	}
	m.Perms = f[1]
	if len(f) >= 6 {
		m.Path = f[5]
	}
	return m, true
}

// Advise calls madvise(advice) on each of this process's mappings that pick
// selects, and returns the first refusal.
func Advise(pick func(Mapping) bool, advice int) error {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m, ok := Parse(sc.Text())
		if !ok || !pick(m) {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.Start), uintptr(m.End-m.Start), uintptr(advice)); errno != 0 {
			return os.NewSyscallError("madvise", errno)
		}
	}
	return sc.Err()
}
