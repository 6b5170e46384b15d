// Package tarsafe holds the rules sbx applies to a tar archive that comes from
// the other side of a trust boundary, wherever it is extracted: by the agent
// into a sandbox, or by the client onto the caller's machine. It covers what
// does not depend on the filesystem: entry names, entry types, the caps, and
// reading the stream (gzip told by its magic bytes, the uncompressed size
// capped). Each extractor brings its own, confined, filesystem access.
package tarsafe

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The caps. Bytes and entries may be lowered per extraction; depth and name
// lengths are fixed.
const (
	// DefaultMaxBytes bounds the uncompressed size of an archive (its tar
	// stream, headers included) and the file bytes it writes.
	DefaultMaxBytes = 8 << 30
	// DefaultMaxEntries bounds the entries read from an archive plus the
	// parent directories extraction creates for them.
	DefaultMaxEntries = 100_000
	// MaxDepth bounds the components of an entry name.
	MaxDepth = 64
	// MaxName bounds an entry name and a symlink or hardlink target (PATH_MAX).
	MaxName = 4096
	// MaxComponent is NAME_MAX: the longest one component may be.
	MaxComponent = 255
	// MaxSkipReport bounds the skipped entries an extraction lists by name.
	MaxSkipReport = 100
)

// Error is an archive refused by a rule: TooLarge when a cap was hit, else a
// malformed archive or a name or entry the rules forbid. Msg is written for
// the caller.
type Error struct {
	TooLarge bool
	Msg      string
}

func (e *Error) Error() string { return e.Msg }

func invalid(format string, args ...any) error {
	return &Error{Msg: fmt.Sprintf(format, args...)}
}

func tooLarge(format string, args ...any) error {
	return &Error{TooLarge: true, Msg: fmt.Sprintf(format, args...)}
}

// Quote quotes an entry name for a message, shortened: names come from the
// archive and may hold anything but NUL.
func Quote(name string) string {
	if len(name) > 200 {
		name = name[:200] + "…"
	}
	return strconv.Quote(name)
}

// SizeText writes n bytes for a message: the exact count, and in MiB or GiB
// when it is a whole number of them ("8589934592 bytes (8 GiB)").
func SizeText(n int64) string {
	s := strconv.FormatInt(n, 10) + " bytes"
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		s += " (" + strconv.FormatInt(n>>30, 10) + " GiB)"
	case n >= 1<<20 && n%(1<<20) == 0:
		s += " (" + strconv.FormatInt(n>>20, 10) + " MiB)"
	}
	return s
}

// Components splits an entry name (what names it in messages: "entry", or a
// hardlink's target) into its components beneath the destination. Absolute
// names, ".." and a backslash (a separator elsewhere, which could hide "..")
// are refused; names past the depth or length caps are TooLarge. "."
// components and repeated slashes go; an empty result names the destination
// itself.
func Components(what, name string) ([]string, error) {
	switch {
	case name == "":
		return nil, invalid("%s has an empty name", what)
	case strings.IndexByte(name, 0) >= 0:
		return nil, invalid("%s %s: the name contains a NUL byte", what, Quote(name))
	case len(name) > MaxName:
		return nil, tooLarge("%s %s: the name is longer than %d bytes (max_name_bytes)", what, Quote(name), MaxName)
	case name[0] == '/':
		return nil, invalid("%s %s: absolute names are not extracted", what, Quote(name))
	}
	var comps []string
	for c := range strings.SplitSeq(name, "/") {
		switch {
		case c == "" || c == ".":
			continue
		case c == ".." || strings.ContainsRune(c, '\\'):
			return nil, invalid("%s %s: names with '..' or '\\' are not extracted", what, Quote(name))
		case len(c) > MaxComponent:
			return nil, tooLarge("%s %s: a name component is longer than %d bytes (max_name_bytes)", what, Quote(name), MaxComponent)
		}
		comps = append(comps, c)
	}
	if len(comps) > MaxDepth {
		return nil, tooLarge("%s %s is %d levels deep; the cap is %d (max_depth)", what, Quote(name), len(comps), MaxDepth)
	}
	return comps, nil
}

// SymlinkTarget checks the target of symlink entry hdr.
func SymlinkTarget(hdr *tar.Header) error {
	switch target := hdr.Linkname; {
	case target == "":
		return invalid("entry %s: the symlink has no target", Quote(hdr.Name))
	case strings.IndexByte(target, 0) >= 0:
		return invalid("entry %s: the symlink target contains a NUL byte", Quote(hdr.Name))
	case len(target) > MaxName:
		return tooLarge("entry %s: the symlink target is longer than %d bytes (max_name_bytes)", Quote(hdr.Name), MaxName)
	}
	return nil
}

// Skipped says whether an entry of hdr's type is left out, and how the
// extraction reports it: devices, FIFOs and every type but regular files,
// directories, symlinks and hardlinks.
func Skipped(hdr *tar.Header) (typ, reason string, skip bool) {
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
		return "", "", false
	case tar.TypeChar:
		return "char device", "device nodes are not extracted", true
	case tar.TypeBlock:
		return "block device", "device nodes are not extracted", true
	case tar.TypeFifo:
		return "fifo", "FIFOs are not extracted", true
	default:
		return fmt.Sprintf("type %q", hdr.Typeflag), "entries of this type are not extracted", true
	}
}

// Reader reads an archive's uncompressed tar stream, failing with a TooLarge
// Error once it passes its cap.
type Reader struct {
	r      io.Reader
	gz     *gzip.Reader
	n, max int64
	capTag string
}

// NewReader returns a Reader of the archive r, gzip-compressed when it starts
// with gzip's magic bytes (Content-Type is never trusted), capped at max bytes
// uncompressed; capTag names the cap in the error ("max_bytes").
func NewReader(r io.Reader, max int64, capTag string) (*Reader, error) {
	br := bufio.NewReaderSize(r, 32<<10)
	rd := &Reader{r: br, max: max, capTag: capTag}
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, ReadError(err)
		}
		rd.r, rd.gz = zr, zr
	}
	return rd, nil
}

func (c *Reader) Read(p []byte) (int, error) {
	if c.n > c.max {
		return 0, c.capErr()
	}
	if rem := c.max - c.n + 1; rem > 0 && int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return n, c.capErr()
	}
	return n, err
}

// Count is the uncompressed bytes read so far.
func (c *Reader) Count() int64 { return c.n }

// Close releases the decompressor, if any.
func (c *Reader) Close() error {
	if c.gz != nil {
		return c.gz.Close()
	}
	return nil
}

func (c *Reader) capErr() error {
	return tooLarge("the archive is larger than %s uncompressed (%s)", SizeText(c.max), c.capTag)
}

// Walk calls fn for each entry of the archive in, in order, until the end or
// fn's first error, which it returns as is; an error reading the next header
// is classified by ReadError.
func Walk(in *Reader, fn func(tr *tar.Reader, hdr *tar.Header) error) error {
	tr := tar.NewReader(in)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return ReadError(err)
		}
		if err := fn(tr, hdr); err != nil {
			return err
		}
	}
}

// TooManyEntries is the error of an archive past its entries cap, max.
func TooManyEntries(max int64) error {
	return tooLarge("the archive has more than %d entries, counting the directories created for them (max_entries)", max)
}

// ReadError classifies an error reading the archive: a rule's Error keeps its
// kind, anything else is a malformed or broken archive.
func ReadError(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return invalid("reading the archive: %v", err)
}
