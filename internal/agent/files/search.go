// This file implements Glob and Grep over the tree.

package files

import (
	"bufio"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Search bounds.
const (
	DefaultSearchLimit = 1000
	maxVisited         = 200000   // directory entries looked at per call
	grepMaxFile        = 16 << 20 // larger files are skipped
	// grepMaxTime bounds one grep, whose caller (the daemon, and the client
	// behind it) waits for the whole answer: a search of the whole root can
	// read gigabytes.
	grepMaxTime = 20 * time.Second
	grepMaxText = 1000 // bytes of a matching line returned
)

func sortEntries(ents []fs.DirEntry) {
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
}

// Glob returns the wire paths under dir matching pattern (*, ?, [...] within a
// name; ** for any number of directories), sorted, at most limit of them.
func (f *FS) Glob(pattern, dir string, limit int) ([]string, bool, error) {
	if limit <= 0 {
		limit = DefaultSearchLimit
	}
	if pattern == "" {
		return nil, false, errorf(Invalid, "pattern is empty")
	}
	if strings.IndexByte(pattern, 0) >= 0 || len(pattern) > MaxPath {
		return nil, false, errorf(Invalid, "pattern is not a valid glob")
	}
	base, err := f.Clean(dir)
	if err != nil {
		return nil, false, err
	}
	if strings.HasPrefix(pattern, "/") {
		base = "/"
	}
	segs := strings.Split(strings.Trim(path.Clean("/"+pattern), "/"), "/")
	for _, s := range segs {
		if _, err := path.Match(s, ""); err != nil {
			return nil, false, errorf(Invalid, "pattern %q: %v", pattern, err)
		}
	}
	g := globber{f: f, limit: limit}
	g.walk(base, segs)
	slices.Sort(g.out)
	g.out = slices.Compact(g.out)
	truncated := g.truncated
	if len(g.out) > limit {
		g.out, truncated = g.out[:limit], true
	}
	return g.out, truncated, nil
}

type globber struct {
	f         *FS
	limit     int
	visited   int
	out       []string
	truncated bool
}

func (g *globber) stop() bool { return len(g.out) > g.limit*2 || g.truncated }

func (g *globber) walk(dir string, segs []string) {
	if g.stop() {
		return
	}
	if len(segs) == 0 {
		g.out = append(g.out, dir)
		return
	}
	seg := segs[0]
	if seg == "**" {
		g.walk(dir, segs[1:])
		ents, err := g.f.readDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			if g.visit() && e.IsDir() {
				g.walk(path.Join(dir, e.Name()), segs)
			}
		}
		return
	}
	if !strings.ContainsAny(seg, "*?[\\") {
		next := path.Join(dir, seg)
		if _, err := g.f.lstat(next); err == nil {
			g.walk(next, segs[1:])
		}
		return
	}
	ents, err := g.f.readDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !g.visit() {
			return
		}
		if ok, _ := path.Match(seg, e.Name()); !ok {
			continue
		}
		next := path.Join(dir, e.Name())
		if len(segs) > 1 {
			if st, err := g.f.stat(next); err != nil || !st.IsDir() {
				continue
			}
		}
		g.walk(next, segs[1:])
	}
}

func (g *globber) visit() bool {
	g.visited++
	if g.visited > maxVisited {
		g.truncated = true
		return false
	}
	return true
}

// GrepRequest selects lines to find.
type GrepRequest struct {
	Pattern, Path, Include string
	IgnoreCase, Fixed      bool
	Limit                  int
}

// Match is one matching line.
type Match struct {
	Path string
	Line int64
	Text string
}

// Grep finds the lines matching req.Pattern in the regular files under
// req.Path, skipping binary files (a NUL in the first 8 KiB) and files over
// 16 MiB.
func (f *FS) Grep(req GrepRequest) ([]Match, bool, error) {
	if req.Limit <= 0 {
		req.Limit = DefaultSearchLimit
	}
	if req.Pattern == "" {
		return nil, false, errorf(Invalid, "pattern is empty")
	}
	expr := req.Pattern
	if req.Fixed {
		expr = regexp.QuoteMeta(expr)
	}
	if req.IgnoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, false, errorf(Invalid, "pattern: %v", err)
	}
	if req.Include != "" {
		if _, err := path.Match(req.Include, ""); err != nil {
			return nil, false, errorf(Invalid, "include %q: %v", req.Include, err)
		}
	}
	w, err := f.Clean(req.Path)
	if err != nil {
		return nil, false, err
	}
	st, err := f.stat(w)
	if err != nil {
		return nil, false, pathErr(w, err)
	}
	gr := grepper{f: f, re: re, req: req, deadline: time.Now().Add(grepMaxTime)}
	if st.IsDir() {
		gr.dir(w)
	} else {
		gr.file(w)
	}
	return gr.out, gr.truncated, nil
}

type grepper struct {
	f         *FS
	re        *regexp.Regexp
	req       GrepRequest
	visited   int
	out       []Match
	truncated bool
	buf       []byte
	deadline  time.Time // past it the search stops, truncated
}

func (g *grepper) dir(w string) {
	ents, err := g.f.readDir(w)
	if err != nil {
		return
	}
	for _, e := range ents {
		if g.truncated {
			return
		}
		g.visited++
		if g.visited > maxVisited || time.Now().After(g.deadline) {
			g.truncated = true
			return
		}
		next := path.Join(w, e.Name())
		switch {
		case e.IsDir():
			g.dir(next)
		case e.Type().IsRegular():
			if g.req.Include != "" {
				if ok, _ := path.Match(g.req.Include, e.Name()); !ok {
					continue
				}
			}
			g.file(next)
		}
	}
}

func (g *grepper) file(w string) {
	fl, err := g.f.OpenFile(w, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return
	}
	defer fl.Close()
	st, err := fl.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() > grepMaxFile {
		return
	}
	if g.buf == nil {
		g.buf = make([]byte, 8192)
	}
	n, _ := io.ReadFull(fl, g.buf)
	if bytes.IndexByte(g.buf[:n], 0) >= 0 {
		return
	}
	sc := bufio.NewScanner(io.MultiReader(bytes.NewReader(g.buf[:n]), fl))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var line int64
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if !g.re.Match(b) {
			continue
		}
		if len(g.out) >= g.req.Limit {
			g.truncated = true
			return
		}
		if len(b) > grepMaxText {
			b = b[:grepMaxText]
		}
		g.out = append(g.out, Match{Path: w, Line: line, Text: strings.ToValidUTF8(string(b), "\uFFFD")})
	}
}
