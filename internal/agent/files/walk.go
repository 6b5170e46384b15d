// This file implements the tree walk shared by Glob, Grep and Changed: each
// directory is opened once, relative to its parent's descriptor and never
// through a symlink, read with getdents in one pass, and its entries taken in
// path order, so the first results a bounded search finds are the first of
// the sorted list.

package files

import (
	"encoding/binary"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// maxWalkDepth bounds how deep a walk goes: it holds one descriptor per level.
const maxWalkDepth = 256

// dirHandle is an open directory that a walk, and the searches of its files,
// open entries relative to. It is closed when its last user releases it.
type dirHandle struct {
	f    *os.File // the directory a walk started at, opened through the FS; else nil
	fd   int
	refs atomic.Int32
}

func newDirHandle(fd int, f *os.File) *dirHandle {
	d := &dirHandle{fd: fd, f: f}
	d.refs.Store(1)
	return d
}

func (d *dirHandle) acquire() { d.refs.Add(1) }

func (d *dirHandle) release() {
	if d.refs.Add(-1) != 0 {
		return
	}
	if d.f != nil {
		d.f.Close()
	} else {
		unix.Close(d.fd)
	}
}

// openDir opens wire directory w through the FS (following symlinks, inside
// the root) as the start of a walk.
func (f *FS) openDir(w string) (*dirHandle, error) {
	fl, err := f.OpenFile(w, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	return newDirHandle(int(fl.Fd()), fl), nil
}

// openAt opens name in directory d without following it if it is a symlink:
// a name from d's own entries cannot lead out of the tree, whatever
// replaces it meanwhile.
func openAt(d *dirHandle, name string, flag int) (int, error) {
	for {
		fd, err := unix.Openat(d.fd, name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// lstatAt is lstat of name in directory d.
func lstatAt(d *dirHandle, name string, st *unix.Stat_t) error {
	for {
		err := unix.Fstatat(d.fd, name, st, unix.AT_SYMLINK_NOFOLLOW)
		if err != unix.EINTR {
			return err
		}
	}
}

// join is path.Join for a clean directory and an entry name.
func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// descend says whether and how a walk enters an entry.
type descend int

const (
	skip   descend = iota
	enter          // a directory: opened relative to its parent, never through a symlink
	follow         // a symlink to a directory: opened by its wire path, inside the root
)

// walker walks a tree depth first, in path order. S is the state a visit
// hands down to the entries of a directory it enters (a glob's position).
type walker[S any] struct {
	f *FS
	// visit decides, for the entry name of directory dirW (held open as d)
	// of type typ, whether it is emitted, whether the walk enters it, and
	// with what state.
	visit func(d *dirHandle, dirW, name string, typ fs.FileMode, st S) (emit bool, in descend, child S)
	// emit receives the emitted entries, in path order.
	emit func(d *dirHandle, dirW, name string, typ fs.FileMode)
	// stop, when set, reports that the caller has what it needs.
	stop func() bool
	// unreadable, when set, hears of a directory the walk could not open or
	// read.
	unreadable func(w string, err error)
	deadline   time.Time // zero: none

	visited   int
	truncated bool // the entry bound, the depth bound or the deadline stopped the walk
	buf       []byte
}

// walkItem is one step of a directory's walk: emitting an entry, or entering it.
type walkItem[S any] struct {
	name  string
	typ   fs.FileMode
	in    descend
	child S
}

// pathOrder orders walk items as their paths sort: a directory's entries
// ("a/x") come where "a/" does, after "a" itself and after a sibling
// "a-b" ('-' is below '/').
func pathOrder[S any](a, b walkItem[S]) int {
	n := min(len(a.name), len(b.name))
	if c := strings.Compare(a.name[:n], b.name[:n]); c != 0 {
		return c
	}
	return next(a, n) - next(b, n)
}

func next[S any](it walkItem[S], n int) int {
	switch {
	case n < len(it.name):
		return int(it.name[n])
	case it.in != skip:
		return '/'
	}
	return -1
}

func (wk *walker[S]) stopped() bool {
	if wk.truncated || (wk.stop != nil && wk.stop()) {
		return true
	}
	if !wk.deadline.IsZero() && wk.visited&255 == 0 && time.Now().After(wk.deadline) {
		wk.truncated = true
	}
	return wk.truncated
}

// dir walks directory d (wire path w, depth levels below the start).
func (wk *walker[S]) dir(d *dirHandle, w string, depth int, st S) {
	var items []walkItem[S]
	err := wk.readDir(d, func(name string, typ fs.FileMode) bool {
		if wk.stopped() {
			return false
		}
		if wk.visited++; wk.visited > maxVisited {
			wk.truncated = true
			return false
		}
		if typ == fs.ModeIrregular { // the file system gave no type
			var sb unix.Stat_t
			if err := lstatAt(d, name, &sb); err != nil {
				return true
			}
			typ = modeOf(sb.Mode)
		}
		emit, in, child := wk.visit(d, w, name, typ, st)
		if emit {
			items = append(items, walkItem[S]{name: name, typ: typ})
		}
		if in != skip {
			items = append(items, walkItem[S]{name: name, typ: typ, in: in, child: child})
		}
		return true
	})
	if err != nil && wk.unreadable != nil {
		wk.unreadable(w, err)
	}
	slices.SortFunc(items, pathOrder[S])
	for _, it := range items {
		if wk.stopped() {
			return
		}
		if it.in == skip {
			wk.emit(d, w, it.name, it.typ)
			continue
		}
		if depth+1 >= maxWalkDepth {
			wk.truncated = true
			continue
		}
		cw := join(w, it.name)
		var sub *dirHandle
		if it.in == follow {
			sub, err = wk.f.openDir(cw)
		} else {
			var fd int
			if fd, err = openAt(d, it.name, os.O_RDONLY|unix.O_DIRECTORY); err == nil {
				sub = newDirHandle(fd, nil)
			} else {
				err = &fs.PathError{Op: "open", Path: cw, Err: err}
			}
		}
		if err != nil {
			if wk.unreadable != nil {
				wk.unreadable(cw, err)
			}
			continue
		}
		wk.dir(sub, cw, depth+1, it.child)
		sub.release()
	}
}

// readDir calls fn with each entry of d but "." and "..", in the order the
// file system keeps them, until fn returns false; an entry's type is
// fs.ModeIrregular when the file system does not say.
func (wk *walker[S]) readDir(d *dirHandle, fn func(name string, typ fs.FileMode) bool) error {
	if wk.buf == nil {
		wk.buf = make([]byte, 32<<10)
	}
	for {
		n, err := unix.Getdents(d.fd, wk.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := wk.buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return unix.EIO
			}
			typ, name := b[18], b[19:reclen]
			b = b[reclen:]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			if s := string(name); s != "." && s != ".." && !fn(s, direntMode(typ)) {
				return nil
			}
		}
	}
}

// direntMode is the file type of a dirent's d_type.
func direntMode(t byte) fs.FileMode {
	switch t {
	case unix.DT_REG:
		return 0
	case unix.DT_DIR:
		return fs.ModeDir
	case unix.DT_LNK:
		return fs.ModeSymlink
	case unix.DT_FIFO:
		return fs.ModeNamedPipe
	case unix.DT_SOCK:
		return fs.ModeSocket
	case unix.DT_CHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.DT_BLK:
		return fs.ModeDevice
	}
	return fs.ModeIrregular
}

// modeOf is the file type of a stat's st_mode.
func modeOf(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return 0
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return fs.ModeIrregular | fs.ModeDevice // unknown, and not "no type"
}

// pathGlob matches slash-separated paths, relative to a directory, against
// a pattern of segments: *, ?, [...] within a name (path.Match), and ** for
// any number of names, none included. It runs as a set of positions in the
// pattern, one bit each, advanced one name at a time, so a walk knows at
// each directory whether anything below it can match.
type pathGlob struct {
	segs []string
	lit  []bool // the segment has no wildcard: compared as is
}

// maxGlobSegs bounds a pattern's segments (one bit each).
const maxGlobSegs = 63

// compilePathGlob compiles pattern, cleaned as a path: "." and ".." resolved,
// a leading or repeated slash dropped.
func compilePathGlob(pattern string) (*pathGlob, error) {
	if pattern == "" {
		return nil, errorf(Invalid, "pattern is empty")
	}
	if strings.IndexByte(pattern, 0) >= 0 || len(pattern) > MaxPath {
		return nil, errorf(Invalid, "pattern %.100q is not a valid glob", pattern)
	}
	var g pathGlob
	for _, s := range strings.Split(strings.Trim(path.Clean("/"+pattern), "/"), "/") {
		if s == "" || (s == "**" && len(g.segs) > 0 && g.segs[len(g.segs)-1] == "**") {
			continue
		}
		if _, err := path.Match(s, ""); err != nil {
			return nil, errorf(Invalid, "pattern %q: %v", pattern, err)
		}
		g.segs = append(g.segs, s)
		g.lit = append(g.lit, s != "**" && !strings.ContainsAny(s, "*?[\\"))
	}
	if len(g.segs) > maxGlobSegs {
		return nil, errorf(Invalid, "pattern %.100q has more than %d path segments", pattern, maxGlobSegs)
	}
	return &g, nil
}

// start is the set of positions before any name.
func (g *pathGlob) start() uint64 { return g.closure(1) }

// closure adds the positions a ** can skip to (it matches no name too).
func (g *pathGlob) closure(s uint64) uint64 {
	for i, seg := range g.segs {
		if s&(1<<i) != 0 && seg == "**" {
			s |= 1 << (i + 1)
		}
	}
	return s
}

// step advances the positions s over name. next is every position
// reached; advanced leaves out the ones a ** reached by matching name
// itself, which is all a walk takes into a symlinked directory (a ** does
// not follow symlinks; a named segment does).
func (g *pathGlob) step(s uint64, name string) (next, advanced uint64) {
	for i, seg := range g.segs {
		if s&(1<<i) == 0 {
			continue
		}
		switch {
		case seg == "**":
			next |= 1 << i
		case g.lit[i] && seg == name, !g.lit[i] && matchName(seg, name):
			advanced |= 1 << (i + 1)
		}
	}
	advanced = g.closure(advanced)
	return g.closure(next) | advanced, advanced
}

func matchName(pattern, name string) bool {
	ok, _ := path.Match(pattern, name)
	return ok
}

// matches reports whether the positions s have matched the whole pattern.
func (g *pathGlob) matches(s uint64) bool { return s&(1<<len(g.segs)) != 0 }

// live reports whether a name below can still match.
func (g *pathGlob) live(s uint64) bool { return s&(1<<len(g.segs)-1) != 0 }
