// This file implements Glob and Grep over the tree: one walk in path order
// (walk.go), and for Grep a few workers reading and searching the files it
// finds while it goes on, their results taken in the walk's order.

package files

import (
	"bufio"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
// name; ** for any number of directories), sorted, at most limit of them. A
// ** enters directories only, not symlinks to them; a named segment follows
// a symlink.
func (f *FS) Glob(pattern, dir string, limit int) ([]string, bool, error) {
	if limit <= 0 {
		limit = DefaultSearchLimit
	}
	g, err := compilePathGlob(pattern)
	if err != nil {
		return nil, false, err
	}
	base, err := f.Clean(dir)
	if err != nil {
		return nil, false, err
	}
	if strings.HasPrefix(pattern, "/") {
		base = "/"
	}
	// Leading names without wildcards are looked up, not searched for.
	i := 0
	for ; i < len(g.segs) && g.lit[i]; i++ {
		base = join(base, g.segs[i])
	}
	g.segs, g.lit = g.segs[i:], g.lit[i:]
	if len(g.segs) == 0 {
		if _, err := f.lstat(base); err != nil {
			return nil, false, nil
		}
		return []string{base}, false, nil
	}
	d, err := f.openDir(base)
	if err != nil {
		return nil, false, nil // nothing there to match
	}
	defer d.release()
	var out []string
	if g.matches(g.start()) {
		out = append(out, base)
	}
	wk := walker[uint64]{
		f: f,
		visit: func(_ *dirHandle, dirW, name string, typ fs.FileMode, s uint64) (bool, descend, uint64) {
			next, advanced := g.step(s, name)
			switch {
			case typ.IsDir() && g.live(next):
				return g.matches(next), enter, next
			case typ&fs.ModeSymlink != 0 && g.live(advanced):
				if st, err := f.stat(join(dirW, name)); err == nil && st.IsDir() {
					return g.matches(next), follow, advanced
				}
			}
			return g.matches(next), skip, 0
		},
		emit: func(_ *dirHandle, dirW, name string, _ fs.FileMode) { out = append(out, join(dirW, name)) },
		stop: func() bool { return len(out) > limit },
	}
	wk.dir(d, base, 0, g.start())
	slices.Sort(out) // in order already, but for symlinks followed
	out = slices.Compact(out)
	truncated := wk.truncated
	if len(out) > limit {
		out, truncated = out[:limit], true
	}
	return out, truncated, nil
}

// Grep modes.
const (
	GrepContent = "content" // each matching line
	GrepFiles   = "files"   // the paths of the files with a match
	GrepCount   = "count"   // each file with a match and its number of matching lines
)

// GrepRequest selects lines to find.
type GrepRequest struct {
	Pattern, Path, Include string
	IgnoreCase, Fixed      bool
	// Limit bounds the matches: lines in content mode, files in the others.
	Limit int
	// Mode is GrepContent (when empty), GrepFiles or GrepCount.
	Mode string
	// Glob, when set, keeps the files whose path relative to Path matches
	// it (see Glob for the syntax). Include keeps the files whose base name
	// matches it. Neither applies when Path is a file.
	Glob string
}

// Match is one matching line (content mode), or one file with a match.
type Match struct {
	Path  string
	Line  int64 // content mode: 1-based
	Text  string
	Count int64 // count mode: the file's matching lines
}

// Grep finds the lines matching req.Pattern in the regular files under
// req.Path, skipping binary files (a NUL in the first 8 KiB), files over
// 16 MiB and symlinks. The walk stays in path order, so the matches come
// sorted by path, then line, and a limit stops it early.
func (f *FS) Grep(req GrepRequest) ([]Match, bool, error) {
	if req.Limit <= 0 {
		req.Limit = DefaultSearchLimit
	}
	if req.Pattern == "" {
		return nil, false, errorf(Invalid, "pattern is empty")
	}
	switch req.Mode {
	case "":
		req.Mode = GrepContent
	case GrepContent, GrepFiles, GrepCount:
	default:
		return nil, false, errorf(Invalid, "mode %q is not one of %s, %s, %s", req.Mode, GrepContent, GrepFiles, GrepCount)
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
	var glob *pathGlob
	if req.Glob != "" {
		if glob, err = compilePathGlob(req.Glob); err != nil {
			return nil, false, errorf(Invalid, "glob: %s", err.Error())
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
	s := newGrepSearch(re, req.Mode, req.Limit)
	if !st.IsDir() {
		out, truncated := s.single(f, w)
		return out, truncated, nil
	}
	d, err := f.openDir(w)
	if err != nil {
		return nil, false, err
	}
	out, truncated := s.tree(f, d, w, glob, req.Include)
	return out, truncated, nil
}

// grepSearch is one grep's pattern and mode, shared by its workers.
type grepSearch struct {
	re *regexp.Regexp
	// lit begins every match (the pattern's literal prefix): only lines
	// holding it are matched against re, and files without it not at all.
	lit   []byte
	mode  string
	limit int
}

func newGrepSearch(re *regexp.Regexp, mode string, limit int) *grepSearch {
	s := &grepSearch{re: re, mode: mode, limit: limit}
	if p, _ := re.LiteralPrefix(); p != "" {
		s.lit = []byte(p)
	}
	return s
}

// fileResult is what one file gave: its matching lines (content mode, the
// Path left empty), or their count.
type fileResult struct {
	matches []Match
	count   int64
}

// grepWorkers is how many files are searched at once: more than one a CPU,
// for a worker waits in open and read about as long as it searches.
func grepWorkers() int { return min(max(4, 2*runtime.GOMAXPROCS(0)), 16) }

// single searches the one file w.
func (s *grepSearch) single(f *FS, w string) ([]Match, bool) {
	fl, err := f.OpenFile(w, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, false
	}
	defer fl.Close()
	var r fileResult
	var buf []byte
	control(fl, func(fd int) { r = s.scan(fd, &buf) })
	out := s.collect(nil, w, r)
	if len(out) > s.limit {
		return out[:s.limit], true
	}
	return out, false
}

// control runs fn on f's descriptor without taking it out of the runtime's
// poller (f.Fd would make it blocking).
func control(f *os.File, fn func(fd int)) {
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { fn(int(fd)) })
	}
}

// collect appends what file w gave to out, as the mode reports it.
func (s *grepSearch) collect(out []Match, w string, r fileResult) []Match {
	switch {
	case s.mode == GrepContent:
		for _, m := range r.matches {
			m.Path = w
			out = append(out, m)
		}
	case r.count > 0 && s.mode == GrepCount:
		out = append(out, Match{Path: w, Count: r.count})
	case r.count > 0:
		out = append(out, Match{Path: w})
	}
	return out
}

// grepJob is a batch of files of one directory: the walk queues it twice,
// to the workers and, in path order, to the collector, which waits for its
// results. Batches, not files, keep the hand-offs between goroutines few.
type grepJob struct {
	d     *dirHandle // held until the files are open
	dirW  string
	names []string
	res   chan []fileResult // one result per name, buffered: a worker never waits
}

// grepBatch is the most files one grepJob holds.
const grepBatch = 64

// tree searches the files below directory d (wire path w; tree releases
// d): one walk queues them, grepWorkers search them, and the results are
// taken in the walk's order until limit is passed.
func (s *grepSearch) tree(f *FS, d *dirHandle, w string, glob *pathGlob, include string) ([]Match, bool) {
	n := grepWorkers()
	jobs := make(chan *grepJob, 2*n)
	order := make(chan *grepJob, 8*n) // bounds the batches searched ahead of the collector
	var stop atomic.Bool
	var walkTruncated bool
	go func() {
		defer close(order)
		defer close(jobs)
		var cur *grepJob
		flush := func() {
			if cur != nil {
				order <- cur
				jobs <- cur
				cur = nil
			}
		}
		wk := walker[uint64]{
			f:        f,
			deadline: time.Now().Add(grepMaxTime),
			stop:     stop.Load,
			visit: func(_ *dirHandle, _, name string, typ fs.FileMode, st uint64) (bool, descend, uint64) {
				next := st
				if glob != nil {
					next, _ = glob.step(st, name)
				}
				switch {
				case typ.IsDir():
					if glob == nil || glob.live(next) {
						return false, enter, next
					}
				case typ.IsRegular():
					return (include == "" || matchName(include, name)) && (glob == nil || glob.matches(next)), skip, 0
				}
				return false, skip, 0
			},
			emit: func(d *dirHandle, dirW, name string, _ fs.FileMode) {
				if cur != nil && (cur.d != d || len(cur.names) == grepBatch) {
					flush()
				}
				if cur == nil {
					d.acquire()
					cur = &grepJob{d: d, dirW: dirW, res: make(chan []fileResult, 1)}
				}
				cur.names = append(cur.names, name)
			},
		}
		var start uint64
		if glob != nil {
			start = glob.start()
		}
		wk.dir(d, w, 0, start)
		flush()
		d.release()
		walkTruncated = wk.truncated
	}()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			var buf []byte
			for j := range jobs {
				j.res <- s.job(j, &buf, &stop)
			}
		})
	}
	var out []Match
	truncated := false
	for j := range order {
		rs := <-j.res
		for i, r := range rs {
			if truncated {
				break // draining what the walk queued before it saw stop
			}
			out = s.collect(out, join(j.dirW, j.names[i]), r)
			if len(out) > s.limit {
				out, truncated = out[:s.limit], true
				stop.Store(true)
			}
		}
	}
	wg.Wait()
	return out, truncated || walkTruncated
}

// job opens and searches the files of a batch, unless the search stopped.
func (s *grepSearch) job(j *grepJob, buf *[]byte, stop *atomic.Bool) []fileResult {
	defer j.d.release()
	rs := make([]fileResult, len(j.names))
	for i, name := range j.names {
		if stop.Load() {
			break
		}
		fd, err := openAt(j.d, name, os.O_RDONLY|unix.O_NONBLOCK)
		if err != nil {
			continue
		}
		rs[i] = s.scan(fd, buf)
		unix.Close(fd)
	}
	return rs
}

// scan searches the open file fd, if it is a regular text file of at most
// grepMaxFile bytes: read whole into *buf when it is small (most are), else
// as a stream. Lines end at \n, a \r before it dropped, as bufio.ScanLines
// has them.
func (s *grepSearch) scan(fd int, buf *[]byte) fileResult {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > grepMaxFile {
		return fileResult{}
	}
	if st.Size > grepWholeFile {
		return s.scanStream(fd)
	}
	data, ok := readFD(fd, st.Size, buf)
	if !ok || bytes.IndexByte(data[:min(len(data), binaryProbe)], 0) >= 0 {
		return fileResult{}
	}
	var r fileResult
	line := int64(1) // of data[pos]
	for pos := 0; pos < len(data); {
		if s.lit != nil { // on to the next line holding the literal
			k := bytes.Index(data[pos:], s.lit)
			if k < 0 {
				break
			}
			if nl := bytes.LastIndexByte(data[pos:pos+k], '\n'); nl >= 0 {
				line += int64(bytes.Count(data[pos:pos+nl+1], []byte{'\n'}))
				pos += nl + 1
			}
		}
		end := len(data)
		if k := bytes.IndexByte(data[pos:], '\n'); k >= 0 {
			end = pos + k
		}
		if s.match(&r, line, trimEOL(data[pos:end])) {
			return r
		}
		pos, line = end+1, line+1
	}
	return r
}

// Sizes for reading files: one of at most grepWholeFile bytes is read whole
// into its worker's buffer; a larger one goes through a reader, each line
// matched on its first grepMaxLine bytes. A worker holds little either way.
const (
	grepWholeFile = 256 << 10
	grepMaxLine   = 1 << 20
)

// scanStream is scan for a large file, read line by line.
func (s *grepSearch) scanStream(fd int) fileResult {
	br := bufio.NewReaderSize(fdReader(fd), 64<<10)
	if head, _ := br.Peek(binaryProbe); bytes.IndexByte(head, 0) >= 0 {
		return fileResult{}
	}
	lr := lineReader{r: br, keep: grepMaxLine}
	var r fileResult
	for line := int64(1); ; line++ {
		ln, _, err := lr.next(true)
		if err != nil || s.match(&r, line, ln) {
			return r
		}
	}
}

// fdReader reads a descriptor the caller owns.
type fdReader int

func (fd fdReader) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(int(fd), p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// match records line ln (number line) in r when it matches; it reports
// whether the file needs no more looking at: its first match in files
// mode, one past limit in content mode.
func (s *grepSearch) match(r *fileResult, line int64, ln []byte) bool {
	if !s.re.Match(ln) {
		return false
	}
	r.count++
	switch s.mode {
	case GrepFiles:
		return true
	case GrepContent:
		text := ln[:min(len(ln), grepMaxText)]
		r.matches = append(r.matches, Match{Line: line, Text: strings.ToValidUTF8(string(text), "\uFFFD")})
		return len(r.matches) > s.limit
	}
	return false
}

// readFD reads the file fd (size bytes by its fstat) whole into *buf, which
// it grows; false when it could not, or the file grew past grepMaxFile. The
// read that returns size bytes ends it (a read of size+1 is asked for, so a
// file that grew is read on to its end): no read returning 0 is needed, a
// system call saved per file.
func readFD(fd int, size int64, buf *[]byte) ([]byte, bool) {
	if int64(cap(*buf)) < size+1 {
		*buf = make([]byte, size+1) // one more: a file that grew shows it
	}
	b := (*buf)[:cap(*buf)]
	n := 0
	for {
		if n == len(b) {
			if len(b) > grepMaxFile {
				return nil, false
			}
			nb := make([]byte, min(2*len(b), grepMaxFile+1))
			copy(nb, b)
			*buf, b = nb, nb
		}
		k, err := unix.Read(fd, b[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, false
		}
		if k == 0 {
			return b[:n], true
		}
		if n += k; int64(n) == size {
			return b[:n], true
		}
	}
}
