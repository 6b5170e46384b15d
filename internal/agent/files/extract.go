// This file implements archive extraction: a tar or gzip-compressed tar stream
// unpacked beneath one directory. Every entry is resolved from the
// directory's fd one component at a time with O_NOFOLLOW, so neither a symlink
// already in the sandbox nor one the archive made earlier is ever followed.
// A failed extraction removes what it made and puts back what it replaced,
// from a journal kept in an unlinked file, so memory stays small whatever the
// archive holds.

package files

import (
	"archive/tar"
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/tarsafe"
)

// Skip is an archive entry extraction left out, and why.
type Skip struct {
	Name   string
	Type   string
	Reason string
}

// ExtractResult says what an extraction wrote.
type ExtractResult struct {
	Path    string // wire path of the destination directory
	Entries int64  // archive entries written (directories included)
	Bytes   int64  // file content written
	// Skipped lists the first entries left out; SkippedCount counts them all.
	Skipped      []Skip
	SkippedCount int64
}

// Extract unpacks the tar archive body (gzip-compressed when it starts with
// gzip's magic bytes) beneath directory p, creating p when missing.
//
// The rules: names that are absolute or hold ".." fail the extraction
// (Invalid), as does an entry whose path crosses a symlink, a hardlink whose
// target is not a regular file this archive extracted, and a non-directory
// where a directory is (Exists). Symlinks are created, never followed.
// Device nodes, FIFOs and other types are skipped and reported. Permission
// bits are kept without setuid, setgid and sticky, and directories always
// keep the owner's rwx; ownership is not applied. An existing file of the same
// name is replaced, as tar does; an existing directory is merged into.
//
// Caps: lim's bytes and entries, ArchiveMaxDepth components and
// ArchiveMaxName bytes per name; hitting one is TooLarge. On any error,
// everything the extraction created is removed and every file it replaced is
// put back.
func (f *FS) Extract(p string, body io.Reader, lim ArchiveLimits) (res ExtractResult, retErr error) {
	lim = lim.WithDefaults()
	w, err := f.Clean(p)
	if err != nil {
		return ExtractResult{}, err
	}
	top, err := f.makeDest(w)
	if err != nil {
		return ExtractResult{}, err
	}
	if top != "" {
		defer func() {
			if retErr != nil {
				if err := f.Remove(top); err != nil {
					retErr = rollbackFailed(retErr, err)
				}
			}
		}()
	}
	d, err := f.OpenFile(w, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return ExtractResult{}, err
	}
	defer d.Close()
	var tok [6]byte
	rand.Read(tok[:])
	x := &extraction{
		dest:     w,
		root:     int(d.Fd()),
		destOurs: top != "",
		lim:      lim,
		token:    hex.EncodeToString(tok[:]),
		ours:     map[fileID]struct{}{},
		cacheFD:  -1,
		res:      ExtractResult{Path: w},
	}
	if err := x.run(body); err != nil {
		if rerr := x.rollback(); rerr != nil {
			err = rollbackFailed(err, rerr)
		}
		return ExtractResult{}, err
	}
	x.commit()
	return x.res, nil
}

// rollbackFailed adds to err that undoing the extraction failed too.
func rollbackFailed(err, rerr error) error {
	var e *Error
	if errors.As(err, &e) {
		return &Error{Kind: e.Kind, Msg: e.Msg + "; removing what was extracted failed, some of it may remain", Err: errors.Join(e.Err, rerr)}
	}
	return errors.Join(err, rerr)
}

// makeDest makes sure directory w exists. When it creates it, it returns the
// topmost directory it created, which a failed extraction removes.
func (f *FS) makeDest(w string) (top string, err error) {
	st, err := f.stat(w)
	if err == nil {
		if !st.IsDir() {
			return "", errorf(Invalid, "path '%s' is not a directory", w)
		}
		return "", nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", pathErr(w, err)
	}
	if w == "/" {
		return "", pathErr(w, err)
	}
	top = w
	for a := w; a != "/"; a = path.Dir(a) {
		if _, err := f.stat(path.Dir(a)); err == nil {
			top = a
			break
		}
	}
	if err := f.mkdirAll(w, 0o755); err != nil {
		return "", pathErr(w, err)
	}
	return top, nil
}

// fileID names a file by device and inode.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), st.Ino} }

// extraction is one Extract call under way.
type extraction struct {
	dest     string // wire path of the destination
	root     int    // its fd
	destOurs bool   // the destination was created by this extraction
	lim      ArchiveLimits
	token    string // names this extraction's backups and journal
	seq      int
	in       *tarsafe.Reader
	buf      []byte
	counted  int64 // entries read plus directories created, against MaxEntries
	// ours holds every file this extraction created: only those may be
	// replaced without a backup, be hardlink targets, or be removed again.
	ours map[fileID]struct{}
	// The parent directory of the last entry, kept open: archives list the
	// entries of one directory together.
	cacheKey  string
	cacheFD   int
	cacheOurs bool
	// The journal lists what a rollback must undo: objects created in
	// directories that were already there ('C'), and files moved aside ('B').
	journal *os.File
	jw      *bufio.Writer
	res     ExtractResult
}

func (x *extraction) wire(rel string) string { return path.Join(x.dest, rel) }

func (x *extraction) isOurs(st *unix.Stat_t) bool {
	_, ok := x.ours[idOf(st)]
	return ok
}

func (x *extraction) run(body io.Reader) error {
	defer x.closeCache()
	in, err := tarsafe.NewReader(body, x.lim.MaxBytes, x.lim.BytesCap)
	if err != nil {
		return ruleErr(err)
	}
	defer in.Close()
	x.in = in
	x.buf = make([]byte, 32<<10)
	return ruleErr(tarsafe.Walk(in, x.entry))
}

// readErr classifies an error reading the archive: a cap keeps its kind,
// anything else is a malformed or broken archive.
func readErr(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return ruleErr(tarsafe.ReadError(err))
}

func (x *extraction) count() error {
	x.counted++
	if x.counted > x.lim.MaxEntries {
		return ruleErr(tarsafe.TooManyEntries(x.lim.MaxEntries))
	}
	return nil
}

func (x *extraction) skip(hdr *tar.Header, typ, reason string) error {
	x.res.SkippedCount++
	if len(x.res.Skipped) < tarsafe.MaxSkipReport {
		x.res.Skipped = append(x.res.Skipped, Skip{Name: hdr.Name, Type: typ, Reason: reason})
	}
	return nil
}

func (x *extraction) entry(tr *tar.Reader, hdr *tar.Header) error {
	if err := x.count(); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	comps, err := entryPath("entry", hdr.Name)
	if err != nil {
		return err
	}
	if typ, reason, skip := tarsafe.Skipped(hdr); skip {
		return x.skip(hdr, typ, reason)
	}
	if len(comps) == 0 {
		if hdr.Typeflag == tar.TypeDir {
			return nil // "./": the destination itself, which keeps its mode
		}
		return errorf(Invalid, "entry %s names the destination directory itself", tarsafe.Quote(hdr.Name))
	}
	parent, parentOurs, err := x.parent(comps[:len(comps)-1], hdr.Name)
	if err != nil {
		return err
	}
	name, rel := comps[len(comps)-1], strings.Join(comps, "/")
	switch hdr.Typeflag {
	case tar.TypeDir:
		err = x.dir(parent, parentOurs, name, rel, hdr)
	case tar.TypeSymlink:
		err = x.symlink(parent, parentOurs, name, rel, hdr)
	case tar.TypeLink:
		err = x.link(parent, parentOurs, name, rel, hdr)
	default:
		err = x.file(parent, parentOurs, name, rel, hdr, tr)
	}
	if err == nil {
		x.res.Entries++
	}
	return err
}

// parent returns an fd of the directory comps (beneath the destination),
// creating missing directories, and whether this extraction created it. The
// fd belongs to the extraction.
func (x *extraction) parent(comps []string, entry string) (int, bool, error) {
	if len(comps) == 0 {
		return x.root, x.destOurs, nil
	}
	key := strings.Join(comps, "/")
	if x.cacheFD >= 0 && x.cacheKey == key {
		return x.cacheFD, x.cacheOurs, nil
	}
	x.closeCache()
	cur, curOurs := x.root, x.destOurs
	release := func() {
		if cur != x.root {
			unix.Close(cur)
		}
	}
	for i, c := range comps {
		rel := strings.Join(comps[:i+1], "/")
		fd, err := openDirAt(cur, c)
		if errors.Is(err, unix.ENOENT) {
			if err = x.count(); err == nil {
				err = x.mkdir(cur, curOurs, c, rel, 0o755)
			}
			if err == nil {
				fd, err = openDirAt(cur, c)
			}
		}
		if err != nil {
			err = x.notDir(cur, c, rel, entry, err)
			release()
			return -1, false, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			release()
			return -1, false, pathErr(x.wire(rel), err)
		}
		release()
		cur, curOurs = fd, x.isOurs(&st)
	}
	x.cacheKey, x.cacheFD, x.cacheOurs = key, cur, curOurs
	return cur, curOurs, nil
}

// notDir explains why component name of rel in dir could not be opened as a
// directory.
func (x *extraction) notDir(dir int, name, rel, entry string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		var st unix.Stat_t
		if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && isLink(st.Mode) {
			return errorf(Invalid, "entry %s: '%s' is a symlink, and extraction never follows symlinks", tarsafe.Quote(entry), x.wire(rel))
		}
		return errorf(Exists, "entry %s: '%s' exists and is not a directory", tarsafe.Quote(entry), x.wire(rel))
	}
	return pathErr(x.wire(rel), err)
}

// lookup opens directory comps without creating anything; the caller closes
// the fd unless it is the root.
func (x *extraction) lookup(comps []string) (int, error) {
	cur := x.root
	for _, c := range comps {
		fd, err := openDirAt(cur, c)
		if cur != x.root {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

func (x *extraction) closeCache() {
	if x.cacheFD >= 0 {
		unix.Close(x.cacheFD)
		x.cacheFD, x.cacheKey = -1, ""
	}
}

// mkdir makes directory name in dir (rel beneath the destination) with mode.
func (x *extraction) mkdir(dir int, dirOurs bool, name, rel string, mode uint32) error {
	if err := unix.Mkdirat(dir, name, 0o700); err != nil {
		return pathErr(x.wire(rel), err)
	}
	fd, err := openDirAt(dir, name)
	if err != nil {
		return pathErr(x.wire(rel), err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return pathErr(x.wire(rel), err)
	}
	x.ours[idOf(&st)] = struct{}{}
	if !dirOurs {
		if err := x.record('C', rel, ""); err != nil {
			return err
		}
	}
	return pathErr(x.wire(rel), unix.Fchmod(fd, mode))
}

// dirMode is the mode a directory entry gets: its permission bits, and
// always the owner's rwx, so what an archive makes can be filled and removed.
func dirMode(hdr *tar.Header) uint32 { return uint32(hdr.Mode&0o777) | 0o700 }

func (x *extraction) dir(parent int, parentOurs bool, name, rel string, hdr *tar.Header) error {
	var st unix.Stat_t
	err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return x.mkdir(parent, parentOurs, name, rel, dirMode(hdr))
	case err != nil:
		return pathErr(x.wire(rel), err)
	case !isDir(st.Mode):
		return errorf(Exists, "entry %s: '%s' exists and is not a directory", tarsafe.Quote(hdr.Name), x.wire(rel))
	case !x.isOurs(&st):
		return nil // a directory that was there keeps its mode
	}
	fd, err := openDirAt(parent, name)
	if err != nil {
		return x.notDir(parent, name, rel, hdr.Name, err)
	}
	defer unix.Close(fd)
	return pathErr(x.wire(rel), unix.Fchmod(fd, dirMode(hdr)))
}

// prepare clears the way for a non-directory at name in parent: a free name
// is fine; what this extraction made is replaced; a file that was there
// before is moved aside, to be put back if the extraction fails; a directory
// is a conflict.
func (x *extraction) prepare(parent int, parentOurs bool, name, rel, entry string) error {
	var st unix.Stat_t
	err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case err != nil:
		return pathErr(x.wire(rel), err)
	case isDir(st.Mode):
		return errorf(Exists, "entry %s: a directory exists at '%s'", tarsafe.Quote(entry), x.wire(rel))
	case parentOurs || x.isOurs(&st):
		if err := unix.Unlinkat(parent, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return pathErr(x.wire(rel), err)
		}
		return nil
	}
	backup := fmt.Sprintf(".sbx-backup-%s-%d", x.token, x.seq)
	x.seq++
	if err := x.record('B', rel, backup); err != nil {
		return err
	}
	return pathErr(x.wire(rel), unix.Renameat(parent, name, parent, backup))
}

// created notes a non-directory this extraction made at name in parent.
func (x *extraction) created(parent int, parentOurs bool, name, rel string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathErr(x.wire(rel), err)
	}
	return x.own(&st, parentOurs, rel)
}

// own notes the file st, which this extraction made at rel: it may be
// replaced, linked to and removed again.
func (x *extraction) own(st *unix.Stat_t, parentOurs bool, rel string) error {
	x.ours[idOf(st)] = struct{}{}
	if parentOurs {
		return nil
	}
	return x.record('C', rel, "")
}

func (x *extraction) file(parent int, parentOurs bool, name, rel string, hdr *tar.Header, r io.Reader) error {
	if hdr.Size < 0 {
		return errorf(Invalid, "entry %s has a negative size", tarsafe.Quote(hdr.Name))
	}
	if used := max(x.in.Count(), x.res.Bytes); hdr.Size > x.lim.MaxBytes-used {
		return errorf(TooLarge, "entry %s (%d bytes) takes the archive past %s uncompressed (%s)", tarsafe.Quote(hdr.Name), hdr.Size, tarsafe.SizeText(x.lim.MaxBytes), x.lim.BytesCap)
	}
	if err := x.prepare(parent, parentOurs, name, rel, hdr.Name); err != nil {
		return err
	}
	fd, err := unix.Openat(parent, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return pathErr(x.wire(rel), err)
	}
	fl := os.NewFile(uintptr(fd), name)
	defer fl.Close()
	// The file is known by its fd, not its name, which the sandbox may swap.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return pathErr(x.wire(rel), err)
	}
	if err := x.own(&st, parentOurs, rel); err != nil {
		return err
	}
	if _, err := io.CopyBuffer(&capWriter{w: fl, x: x, wire: x.wire(rel)}, r, x.buf); err != nil {
		return readErr(err)
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode&0o777)); err != nil {
		return pathErr(x.wire(rel), err)
	}
	if mt := hdr.ModTime; !mt.IsZero() {
		tv := unix.Timeval{Sec: mt.Unix(), Usec: int64(mt.Nanosecond() / 1000)}
		unix.Futimes(fd, []unix.Timeval{tv, tv})
	}
	return pathErr(x.wire(rel), fl.Close())
}

func (x *extraction) symlink(parent int, parentOurs bool, name, rel string, hdr *tar.Header) error {
	target := hdr.Linkname
	if err := tarsafe.SymlinkTarget(hdr); err != nil {
		return ruleErr(err)
	}
	if err := x.prepare(parent, parentOurs, name, rel, hdr.Name); err != nil {
		return err
	}
	if err := unix.Symlinkat(target, parent, name); err != nil {
		return pathErr(x.wire(rel), err)
	}
	return x.created(parent, parentOurs, name, rel)
}

func (x *extraction) link(parent int, parentOurs bool, name, rel string, hdr *tar.Header) error {
	tcomps, err := entryPath(fmt.Sprintf("entry %s: hardlink target", tarsafe.Quote(hdr.Name)), hdr.Linkname)
	if err != nil {
		return err
	}
	notOurs := errorf(Invalid, "entry %s: hardlink target %s is not a file this archive extracted", tarsafe.Quote(hdr.Name), tarsafe.Quote(hdr.Linkname))
	if len(tcomps) == 0 {
		return notOurs
	}
	if strings.Join(tcomps, "/") == rel {
		return errorf(Invalid, "entry %s is a hardlink to itself", tarsafe.Quote(hdr.Name))
	}
	tdir, err := x.lookup(tcomps[:len(tcomps)-1])
	if err != nil {
		return notOurs // missing, or through a symlink: not extracted here
	}
	if tdir != x.root {
		defer unix.Close(tdir)
	}
	// The target is opened, checked and linked by its fd, so the file linked
	// is the one checked, whatever the sandbox renames meanwhile.
	tfd, err := unix.Openat(tdir, tcomps[len(tcomps)-1], unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return notOurs
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if err := unix.Fstat(tfd, &st); err != nil || !isReg(st.Mode) || !x.isOurs(&st) {
		return notOurs
	}
	if err := x.prepare(parent, parentOurs, name, rel, hdr.Name); err != nil {
		return err
	}
	if err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(tfd), parent, name, unix.AT_SYMLINK_FOLLOW); err != nil {
		return pathErr(x.wire(rel), err)
	}
	return x.own(&st, parentOurs, rel)
}

// record appends to the journal, which is made on first use: an unlinked
// file in the destination, so it needs no memory and leaves nothing behind.
func (x *extraction) record(kind byte, rel, backup string) error {
	if x.journal == nil {
		name := ".sbx-journal-" + x.token
		fd, err := unix.Openat(x.root, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return pathErr(x.wire(name), err)
		}
		unix.Unlinkat(x.root, name, 0)
		x.journal = os.NewFile(uintptr(fd), name)
		x.jw = bufio.NewWriterSize(x.journal, 16<<10)
	}
	x.jw.WriteByte(kind)
	x.jw.WriteString(rel)
	x.jw.WriteByte(0)
	if kind == 'B' {
		x.jw.WriteString(backup)
		x.jw.WriteByte(0)
	}
	if _, err := x.jw.Write(nil); err != nil { // bufio keeps the first error
		return pathErr(x.dest, err)
	}
	return nil
}

// replay calls fn for each journal record, oldest first.
func (x *extraction) replay(fn func(kind byte, rel, backup string)) error {
	if x.journal == nil {
		return nil
	}
	if err := x.jw.Flush(); err != nil {
		return err
	}
	if _, err := x.journal.Seek(0, io.SeekStart); err != nil {
		return err
	}
	br := bufio.NewReader(x.journal)
	for {
		kind, err := br.ReadByte()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		rel, err := br.ReadString(0)
		if err != nil {
			return err
		}
		backup := ""
		if kind == 'B' {
			if backup, err = br.ReadString(0); err != nil {
				return err
			}
			backup = backup[:len(backup)-1]
		}
		fn(kind, rel[:len(rel)-1], backup)
	}
}

func (x *extraction) closeJournal() {
	if x.journal != nil {
		x.journal.Close()
		x.journal, x.jw = nil, nil
	}
}

// at runs fn on the parent directory of rel and rel's last component; a
// parent that is gone or no longer a directory is skipped.
func (x *extraction) at(rel string, fn func(dir int, name string) error) error {
	comps := strings.Split(rel, "/")
	dir, err := x.lookup(comps[:len(comps)-1])
	if err != nil {
		if gone(err) {
			return nil
		}
		return err
	}
	if dir != x.root {
		defer unix.Close(dir)
	}
	return fn(dir, comps[len(comps)-1])
}

// rollback removes what the extraction created where something was already,
// then puts back the files it moved aside.
func (x *extraction) rollback() error {
	x.closeCache()
	defer x.closeJournal()
	var errs []error
	errs = append(errs, x.replay(func(kind byte, rel, _ string) {
		if kind != 'C' {
			return
		}
		errs = append(errs, x.at(rel, func(dir int, name string) error {
			var st unix.Stat_t
			if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || !x.isOurs(&st) {
				return nil // gone, or no longer what this extraction made
			}
			return removeTree(dir, name, 0)
		}))
	}))
	errs = append(errs, x.replay(func(kind byte, rel, backup string) {
		if kind != 'B' {
			return
		}
		errs = append(errs, x.at(rel, func(dir int, name string) error {
			err := unix.Renameat(dir, backup, dir, name)
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}))
	}))
	return errors.Join(errs...)
}

// commit drops the files the extraction replaced. It is best effort: the
// extraction is done whatever happens here.
func (x *extraction) commit() {
	x.closeCache()
	defer x.closeJournal()
	x.replay(func(kind byte, rel, backup string) {
		if kind == 'B' {
			x.at(rel, func(dir int, _ string) error { return unix.Unlinkat(dir, backup, 0) })
		}
	})
}

// removeTree removes name in dir and, for a directory, everything below it,
// never following a symlink.
func removeTree(dir int, name string, depth int) error {
	err := unix.Unlinkat(dir, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	if depth > 4*ArchiveMaxDepth {
		return fmt.Errorf("removing '%s': nested too deep", name)
	}
	for range 3 { // entries added meanwhile leave it not empty: go again
		fd, err := openDirAt(dir, name)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		d := os.NewFile(uintptr(fd), name)
		for {
			names, rerr := d.Readdirnames(256)
			for _, n := range names {
				if err := removeTree(fd, n, depth+1); err != nil {
					d.Close()
					return err
				}
			}
			if rerr != nil || len(names) == 0 {
				break
			}
		}
		d.Close()
		err = unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.ENOTEMPTY) {
			return err
		}
	}
	return err
}

// capWriter writes one file's content, counting it against MaxBytes: a
// sparse entry can expand past what the archive's size shows.
type capWriter struct {
	w    io.Writer
	x    *extraction
	wire string
}

func (c *capWriter) Write(p []byte) (int, error) {
	if c.x.res.Bytes+int64(len(p)) > c.x.lim.MaxBytes {
		return 0, errorf(TooLarge, "the archive writes more than %s (%s)", tarsafe.SizeText(c.x.lim.MaxBytes), c.x.lim.BytesCap)
	}
	n, err := c.w.Write(p)
	c.x.res.Bytes += int64(n)
	return n, pathErr(c.wire, err)
}
