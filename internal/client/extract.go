// This file implements extraction of an archive that came out of a sandbox,
// on the caller's machine: the sandbox is hostile, so the archive is too.
// Every entry is created through an os.Root at the destination, after checking
// that no component of its path is a symlink, so nothing lands outside the
// destination and no symlink is ever written through.

package client

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"sbx/api/openapi"
	"sbx/internal/sandbox"
)

// Extraction caps on this machine: the same as a sandbox's defaults.
const (
	DefaultExtractMaxBytes   = 8 << 30 // uncompressed archive bytes, and file bytes written
	DefaultExtractMaxEntries = 100_000 // entries plus the directories created for them
	ExtractMaxDepth          = 64      // components of an entry name
	extractMaxName           = 4096    // bytes of an entry name or link target
	extractMaxComponent      = 255     // bytes of one name component
	maxSkipReport            = 100
)

// ExtractLimits caps ExtractArchive; zero fields mean the defaults.
type ExtractLimits struct {
	MaxBytes   int64
	MaxEntries int64
}

// ExtractResult says what ExtractArchive wrote.
type ExtractResult struct {
	Path    string
	Entries int64 // archive entries written, directories included
	Bytes   int64 // file content written
	// Skipped lists the first entries left out; SkippedCount counts them all.
	Skipped      []openapi.ArchiveSkip
	SkippedCount int64
}

// ExtractArchive unpacks the tar archive r (gzip-compressed when it starts with
// gzip's magic bytes) into directory dst, which it creates; an existing dst
// must be an empty directory. The rules are the sandbox's: absolute names,
// "..", a path through a symlink and a hardlink to anything but a file this
// archive extracted fail the extraction; symlinks are created, never
// followed; device nodes, FIFOs and other types are skipped and reported;
// setuid, setgid and sticky bits are stripped; ownership is not applied. On
// any error, what was extracted is removed (dst too, when this call made it).
func ExtractArchive(r io.Reader, dst string, lim ExtractLimits) (res *ExtractResult, retErr error) {
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultExtractMaxBytes
	}
	if lim.MaxEntries <= 0 {
		lim.MaxEntries = DefaultExtractMaxEntries
	}
	created := false
	switch err := os.Mkdir(dst, 0o755); {
	case err == nil:
		created = true
	case errors.Is(err, fs.ErrExist):
		ents, err := os.ReadDir(dst)
		if err != nil {
			return nil, fmt.Errorf("%w: %s exists and is not a readable directory: %v", sandbox.ErrExists, dst, err)
		}
		if len(ents) > 0 {
			return nil, fmt.Errorf("%w: %s is not empty: an archive is extracted into a new or empty directory", sandbox.ErrExists, dst)
		}
	default:
		return nil, err
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	defer func() {
		if retErr == nil {
			return
		}
		if created {
			os.RemoveAll(dst)
			return
		}
		if d, err := root.Open("."); err == nil {
			names, _ := d.Readdirnames(-1)
			d.Close()
			for _, n := range names {
				root.RemoveAll(n)
			}
		}
	}()
	x := &extractor{root: root, lim: lim, res: &ExtractResult{Path: dst}}
	if err := x.run(r); err != nil {
		return nil, fmt.Errorf("extracting into %s: %w", dst, err)
	}
	return x.res, nil
}

type extractor struct {
	root    *os.Root
	lim     ExtractLimits
	res     *ExtractResult
	in      *countReader
	counted int64
	checked string // the last parent directory checked to be a real directory
	buf     []byte
}

func (x *extractor) run(r io.Reader) error {
	br := bufio.NewReaderSize(r, 32<<10)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%w: reading the archive: %v", sandbox.ErrInvalid, err)
		}
		defer zr.Close()
		in = zr
	}
	x.in = &countReader{r: in, max: x.lim.MaxBytes}
	x.buf = make([]byte, 32<<10)
	tr := tar.NewReader(x.in)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return readFailed(err)
		}
		if err := x.entry(tr, hdr); err != nil {
			return err
		}
	}
}

// readFailed classifies an error reading the archive: a cap keeps its class.
func readFailed(err error) error {
	if errors.Is(err, sandbox.ErrTooLarge) {
		return err
	}
	return fmt.Errorf("%w: reading the archive: %v", sandbox.ErrInvalid, err)
}

func quote(name string) string {
	if len(name) > 200 {
		name = name[:200] + "…"
	}
	return strconv.Quote(name)
}

// components splits an entry name beneath the destination; see ExtractArchive.
func components(what, name string) ([]string, error) {
	switch {
	case name == "":
		return nil, fmt.Errorf("%w: %s has an empty name", sandbox.ErrInvalid, what)
	case strings.IndexByte(name, 0) >= 0:
		return nil, fmt.Errorf("%w: %s %s: the name contains a NUL byte", sandbox.ErrInvalid, what, quote(name))
	case len(name) > extractMaxName:
		return nil, fmt.Errorf("%w: %s %s: the name is longer than %d bytes (max_name_bytes)", sandbox.ErrTooLarge, what, quote(name), extractMaxName)
	case name[0] == '/':
		return nil, fmt.Errorf("%w: %s %s: absolute names are not extracted", sandbox.ErrInvalid, what, quote(name))
	}
	var comps []string
	for c := range strings.SplitSeq(name, "/") {
		switch {
		case c == "" || c == ".":
			continue
		case c == ".." || strings.ContainsRune(c, '\\'):
			// A backslash is a separator on some systems, which could hide "..".
			return nil, fmt.Errorf("%w: %s %s: names with '..' or '\\' are not extracted", sandbox.ErrInvalid, what, quote(name))
		case len(c) > extractMaxComponent:
			return nil, fmt.Errorf("%w: %s %s: a name component is longer than %d bytes (max_name_bytes)", sandbox.ErrTooLarge, what, quote(name), extractMaxComponent)
		}
		comps = append(comps, c)
	}
	if len(comps) > ExtractMaxDepth {
		return nil, fmt.Errorf("%w: %s %s is %d levels deep; the cap is %d (max_depth)", sandbox.ErrTooLarge, what, quote(name), len(comps), ExtractMaxDepth)
	}
	return comps, nil
}

func (x *extractor) count() error {
	x.counted++
	if x.counted > x.lim.MaxEntries {
		return fmt.Errorf("%w: the archive has more than %d entries, counting the directories created for them (max_entries)", sandbox.ErrTooLarge, x.lim.MaxEntries)
	}
	return nil
}

func (x *extractor) skip(hdr *tar.Header, typ, reason string) error {
	x.res.SkippedCount++
	if len(x.res.Skipped) < maxSkipReport {
		x.res.Skipped = append(x.res.Skipped, openapi.ArchiveSkip{Name: hdr.Name, Type: typ, Reason: reason})
	}
	return nil
}

func (x *extractor) entry(tr *tar.Reader, hdr *tar.Header) error {
	if err := x.count(); err != nil {
		return err
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	comps, err := components("entry", hdr.Name)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	case tar.TypeChar:
		return x.skip(hdr, "char device", "device nodes are not extracted")
	case tar.TypeBlock:
		return x.skip(hdr, "block device", "device nodes are not extracted")
	case tar.TypeFifo:
		return x.skip(hdr, "fifo", "FIFOs are not extracted")
	default:
		return x.skip(hdr, fmt.Sprintf("type %q", hdr.Typeflag), "entries of this type are not extracted")
	}
	if len(comps) == 0 {
		if hdr.Typeflag == tar.TypeDir {
			return nil
		}
		return fmt.Errorf("%w: entry %s names the destination directory itself", sandbox.ErrInvalid, quote(hdr.Name))
	}
	if err := x.parents(comps[:len(comps)-1], hdr.Name, true); err != nil {
		return err
	}
	rel := strings.Join(comps, "/")
	switch hdr.Typeflag {
	case tar.TypeDir:
		err = x.dir(rel, hdr)
	case tar.TypeSymlink:
		err = x.symlink(rel, hdr)
	case tar.TypeLink:
		err = x.link(rel, hdr)
	default:
		err = x.file(rel, hdr, tr)
	}
	if err == nil {
		x.res.Entries++
	}
	return err
}

// parents checks that each directory of comps is a real directory, not a
// symlink, creating the missing ones when create is set.
func (x *extractor) parents(comps []string, entry string, create bool) error {
	key := strings.Join(comps, "/")
	if len(comps) == 0 || key == x.checked || strings.HasPrefix(x.checked, key+"/") {
		return nil
	}
	for i := range comps {
		rel := strings.Join(comps[:i+1], "/")
		fi, err := x.root.Lstat(rel)
		switch {
		case errors.Is(err, fs.ErrNotExist) && create:
			if err := x.count(); err != nil {
				return err
			}
			if err := x.root.Mkdir(rel, 0o755); err != nil {
				return err
			}
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			return fmt.Errorf("%w: entry %s: %s is a symlink, and extraction never follows symlinks", sandbox.ErrInvalid, quote(entry), quote(rel))
		case !fi.IsDir():
			return fmt.Errorf("%w: entry %s: %s exists and is not a directory", sandbox.ErrExists, quote(entry), quote(rel))
		}
	}
	x.checked = key
	return nil
}

// clear makes way for a non-directory at rel: what is there (this archive
// made it) goes, unless it is a directory.
func (x *extractor) clear(rel, entry string) error {
	fi, err := x.root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%w: entry %s: a directory exists at %s", sandbox.ErrExists, quote(entry), quote(rel))
	}
	return x.root.Remove(rel)
}

func (x *extractor) dir(rel string, hdr *tar.Header) error {
	mode := fs.FileMode(hdr.Mode&0o777) | 0o700 // the owner can always fill and remove it
	fi, err := x.root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := x.root.Mkdir(rel, 0o700); err != nil {
			return err
		}
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%w: entry %s: %s exists and is not a directory", sandbox.ErrExists, quote(hdr.Name), quote(rel))
	}
	return x.root.Chmod(rel, mode)
}

func (x *extractor) file(rel string, hdr *tar.Header, r io.Reader) error {
	if hdr.Size < 0 {
		return fmt.Errorf("%w: entry %s has a negative size", sandbox.ErrInvalid, quote(hdr.Name))
	}
	if used := max(x.in.n, x.res.Bytes); hdr.Size > x.lim.MaxBytes-used {
		return fmt.Errorf("%w: entry %s (%d bytes) takes the archive past %d bytes uncompressed (max_bytes)", sandbox.ErrTooLarge, quote(hdr.Name), hdr.Size, x.lim.MaxBytes)
	}
	if err := x.clear(rel, hdr.Name); err != nil {
		return err
	}
	// O_EXCL: a symlink that appeared at rel is never opened through.
	f, err := x.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.CopyBuffer(&countWriter{w: f, x: x}, r, x.buf); err != nil {
		return readFailed(err)
	}
	if err := f.Chmod(fs.FileMode(hdr.Mode & 0o777)); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if !hdr.ModTime.IsZero() {
		x.root.Chtimes(rel, hdr.ModTime, hdr.ModTime)
	}
	return nil
}

func (x *extractor) symlink(rel string, hdr *tar.Header) error {
	switch target := hdr.Linkname; {
	case target == "":
		return fmt.Errorf("%w: entry %s: the symlink has no target", sandbox.ErrInvalid, quote(hdr.Name))
	case strings.IndexByte(target, 0) >= 0:
		return fmt.Errorf("%w: entry %s: the symlink target contains a NUL byte", sandbox.ErrInvalid, quote(hdr.Name))
	case len(target) > extractMaxName:
		return fmt.Errorf("%w: entry %s: the symlink target is longer than %d bytes (max_name_bytes)", sandbox.ErrTooLarge, quote(hdr.Name), extractMaxName)
	}
	if err := x.clear(rel, hdr.Name); err != nil {
		return err
	}
	return x.root.Symlink(hdr.Linkname, rel)
}

// link makes a hardlink. The destination started empty, so every regular file
// in it is one this archive extracted.
func (x *extractor) link(rel string, hdr *tar.Header) error {
	tcomps, err := components(fmt.Sprintf("entry %s: hardlink target", quote(hdr.Name)), hdr.Linkname)
	if err != nil {
		return err
	}
	notOurs := fmt.Errorf("%w: entry %s: hardlink target %s is not a file this archive extracted", sandbox.ErrInvalid, quote(hdr.Name), quote(hdr.Linkname))
	if len(tcomps) == 0 {
		return notOurs
	}
	target := strings.Join(tcomps, "/")
	if target == rel {
		return fmt.Errorf("%w: entry %s is a hardlink to itself", sandbox.ErrInvalid, quote(hdr.Name))
	}
	if err := x.parents(tcomps[:len(tcomps)-1], hdr.Name, false); err != nil {
		return notOurs
	}
	if fi, err := x.root.Lstat(target); err != nil || !fi.Mode().IsRegular() {
		return notOurs
	}
	if err := x.clear(rel, hdr.Name); err != nil {
		return err
	}
	return x.root.Link(target, rel)
}

// countReader counts the uncompressed archive and fails past max.
type countReader struct {
	r      io.Reader
	n, max int64
}

func (c *countReader) Read(p []byte) (int, error) {
	if c.n > c.max {
		return 0, c.err()
	}
	if rem := c.max - c.n + 1; rem > 0 && int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return n, c.err()
	}
	return n, err
}

func (c *countReader) err() error {
	return fmt.Errorf("%w: the archive is larger than %d bytes uncompressed (max_bytes)", sandbox.ErrTooLarge, c.max)
}

// countWriter counts file content against MaxBytes (a sparse entry expands).
type countWriter struct {
	w io.Writer
	x *extractor
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.x.res.Bytes+int64(len(p)) > c.x.lim.MaxBytes {
		return 0, fmt.Errorf("%w: the archive writes more than %d bytes (max_bytes)", sandbox.ErrTooLarge, c.x.lim.MaxBytes)
	}
	n, err := c.w.Write(p)
	c.x.res.Bytes += int64(n)
	return n, err
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
