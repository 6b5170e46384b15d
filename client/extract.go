// This file implements extraction of an archive that came out of a sandbox,
// on the caller's machine: the sandbox is hostile, so the archive is too.
// Every entry is created through an os.Root at the destination, after checking
// that no component of its path is a symlink, so nothing lands outside the
// destination and no symlink is ever written through.

package client

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/tarsafe"
)

// Extraction caps on this machine: the same as a sandbox's defaults.
const (
	DefaultExtractMaxBytes   = tarsafe.DefaultMaxBytes   // uncompressed archive bytes, and file bytes written
	DefaultExtractMaxEntries = tarsafe.DefaultMaxEntries // entries plus the directories created for them
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
	in      *tarsafe.Reader
	counted int64
	checked string // the last parent directory checked to be a real directory
	buf     []byte
}

func (x *extractor) run(r io.Reader) error {
	in, err := tarsafe.NewReader(r, x.lim.MaxBytes, "max_bytes")
	if err != nil {
		return ruleErr(err)
	}
	defer in.Close()
	x.in = in
	x.buf = make([]byte, 32<<10)
	return ruleErr(tarsafe.Walk(in, x.entry))
}

// readFailed classifies an error reading the archive: a cap keeps its class.
func readFailed(err error) error {
	if errors.Is(err, sandbox.ErrTooLarge) || errors.Is(err, sandbox.ErrInvalid) {
		return err
	}
	return ruleErr(tarsafe.ReadError(err))
}

// ruleErr gives an archive rule's error (tarsafe.Error) its error class.
func ruleErr(err error) error {
	var te *tarsafe.Error
	if !errors.As(err, &te) {
		return err
	}
	if te.TooLarge {
		return fmt.Errorf("%w: %s", sandbox.ErrTooLarge, te.Msg)
	}
	return fmt.Errorf("%w: %s", sandbox.ErrInvalid, te.Msg)
}

// components splits an entry name beneath the destination; see ExtractArchive.
func components(what, name string) ([]string, error) {
	comps, err := tarsafe.Components(what, name)
	return comps, ruleErr(err)
}

func (x *extractor) count() error {
	x.counted++
	if x.counted > x.lim.MaxEntries {
		return ruleErr(tarsafe.TooManyEntries(x.lim.MaxEntries))
	}
	return nil
}

func (x *extractor) skip(hdr *tar.Header, typ, reason string) error {
	x.res.SkippedCount++
	if len(x.res.Skipped) < tarsafe.MaxSkipReport {
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
	if typ, reason, skip := tarsafe.Skipped(hdr); skip {
		return x.skip(hdr, typ, reason)
	}
	if len(comps) == 0 {
		if hdr.Typeflag == tar.TypeDir {
			return nil
		}
		return fmt.Errorf("%w: entry %s names the destination directory itself", sandbox.ErrInvalid, tarsafe.Quote(hdr.Name))
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
			return fmt.Errorf("%w: entry %s: %s is a symlink, and extraction never follows symlinks", sandbox.ErrInvalid, tarsafe.Quote(entry), tarsafe.Quote(rel))
		case !fi.IsDir():
			return fmt.Errorf("%w: entry %s: %s exists and is not a directory", sandbox.ErrExists, tarsafe.Quote(entry), tarsafe.Quote(rel))
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
		return fmt.Errorf("%w: entry %s: a directory exists at %s", sandbox.ErrExists, tarsafe.Quote(entry), tarsafe.Quote(rel))
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
		return fmt.Errorf("%w: entry %s: %s exists and is not a directory", sandbox.ErrExists, tarsafe.Quote(hdr.Name), tarsafe.Quote(rel))
	}
	return x.root.Chmod(rel, mode)
}

func (x *extractor) file(rel string, hdr *tar.Header, r io.Reader) error {
	if hdr.Size < 0 {
		return fmt.Errorf("%w: entry %s has a negative size", sandbox.ErrInvalid, tarsafe.Quote(hdr.Name))
	}
	if used := max(x.in.Count(), x.res.Bytes); hdr.Size > x.lim.MaxBytes-used {
		return fmt.Errorf("%w: entry %s (%d bytes) takes the archive past %d bytes uncompressed (max_bytes)", sandbox.ErrTooLarge, tarsafe.Quote(hdr.Name), hdr.Size, x.lim.MaxBytes)
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
	if err := tarsafe.SymlinkTarget(hdr); err != nil {
		return ruleErr(err)
	}
	if err := x.clear(rel, hdr.Name); err != nil {
		return err
	}
	return x.root.Symlink(hdr.Linkname, rel)
}

// link makes a hardlink. The destination started empty, so every regular file
// in it is one this archive extracted.
func (x *extractor) link(rel string, hdr *tar.Header) error {
	tcomps, err := components(fmt.Sprintf("entry %s: hardlink target", tarsafe.Quote(hdr.Name)), hdr.Linkname)
	if err != nil {
		return err
	}
	notOurs := fmt.Errorf("%w: entry %s: hardlink target %s is not a file this archive extracted", sandbox.ErrInvalid, tarsafe.Quote(hdr.Name), tarsafe.Quote(hdr.Linkname))
	if len(tcomps) == 0 {
		return notOurs
	}
	target := strings.Join(tcomps, "/")
	if target == rel {
		return fmt.Errorf("%w: entry %s is a hardlink to itself", sandbox.ErrInvalid, tarsafe.Quote(hdr.Name))
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
