// This file implements ReadLines: a page of a text file by line number, read
// as a stream, so a page near the start of a huge file costs only the page.

package files

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"unicode/utf8"
)

// Line page bounds.
const (
	DefaultLineLimit = 2000
	MaxLineLimit     = 100000
	DefaultLineChars = 2000
	MaxLineChars     = 1 << 20
	// maxPageBytes bounds the text of one page: a page of long lines stops
	// there, short of its limit, and the caller reads on from where it ended.
	maxPageBytes = 16 << 20
	// binaryProbe is how much of a file is looked at for a NUL byte, which
	// makes it binary (as grep and git decide).
	binaryProbe = 8192
)

// Lines is a page of a text file.
type Lines struct {
	Lines []string
	// FirstLine is the 1-based number of Lines[0]: the offset asked for, plus 1.
	FirstLine int64
	// EOF: no line follows the last one returned.
	EOF bool
	// CutLines is how many of Lines were cut to the character limit.
	CutLines int64
	// TotalLines is the file's number of lines once EOF is reached; else -1.
	TotalLines int64
}

// ReadLines returns up to limit lines (0: DefaultLineLimit) of file p from
// the 0-based line offset on, each without its line end (\n, or \r\n) and
// cut to maxChars characters (0: DefaultLineChars) at a rune boundary;
// invalid UTF-8 becomes U+FFFD. A last line without a \n counts. It reads
// the file as a stream and stops after the page. A file with a NUL byte in
// its first 8 KiB is binary, a Precondition error.
func (f *FS) ReadLines(p string, offset, limit int64, maxChars int) (Lines, error) {
	switch {
	case offset < 0:
		return Lines{}, errorf(Invalid, "offset %d is negative", offset)
	case limit < 0:
		return Lines{}, errorf(Invalid, "limit %d is negative", limit)
	case limit > MaxLineLimit:
		return Lines{}, errorf(Invalid, "limit %d is above %d lines", limit, MaxLineLimit)
	case maxChars < 0:
		return Lines{}, errorf(Invalid, "max_line_chars %d is negative", maxChars)
	case maxChars > MaxLineChars:
		return Lines{}, errorf(Invalid, "max_line_chars %d is above %d", maxChars, MaxLineChars)
	}
	if limit == 0 {
		limit = DefaultLineLimit
	}
	if maxChars == 0 {
		maxChars = DefaultLineChars
	}
	fl, w, _, err := f.OpenRegular(p)
	if err != nil {
		return Lines{}, err
	}
	defer fl.Close()
	br := bufio.NewReaderSize(fl, 64<<10)
	head, err := br.Peek(binaryProbe)
	if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
		return Lines{}, pathErr(w, err)
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return Lines{}, errorf(Precondition, "path '%s' is a binary file", w)
	}
	out := Lines{FirstLine: offset + 1, TotalLines: -1}
	lr := lineReader{r: br, keep: 4*maxChars + 4}
	page := 0
	for n := int64(0); ; n++ {
		if n == offset+limit || page > maxPageBytes {
			if _, err := br.Peek(1); err == io.EOF {
				out.EOF, out.TotalLines = true, n
			} else if err != nil {
				return Lines{}, pathErr(w, err)
			}
			return out, nil
		}
		line, long, err := lr.next(n >= offset)
		if err == io.EOF {
			out.EOF, out.TotalLines = true, n
			return out, nil
		}
		if err != nil {
			return Lines{}, pathErr(w, err)
		}
		if n < offset {
			continue
		}
		s, cut := cutRunes(line, maxChars)
		if cut || long {
			out.CutLines++
		}
		out.Lines = append(out.Lines, strings.ToValidUTF8(s, "\uFFFD"))
		page += len(s)
	}
}

// lineReader reads lines, keeping at most keep bytes of each.
type lineReader struct {
	r    *bufio.Reader
	keep int
	buf  []byte
}

// next reads the next line, without its line end; with want unset it only
// skips it. long reports that bytes past keep were dropped. io.EOF: no line
// is left.
func (lr *lineReader) next(want bool) (line []byte, long bool, err error) {
	lr.buf = lr.buf[:0]
	read := false
	for {
		chunk, err := lr.r.ReadSlice('\n')
		read = read || len(chunk) > 0
		if want {
			if room := lr.keep - len(lr.buf); room >= len(chunk) {
				lr.buf = append(lr.buf, chunk...)
			} else {
				lr.buf = append(lr.buf, chunk[:max(room, 0)]...)
				long = true
			}
		}
		switch {
		case err == nil:
			return trimEOL(lr.buf), long, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && read:
			return trimEOL(lr.buf), long, nil // a last line without \n
		default:
			return nil, false, err
		}
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte{'\n'})
	return bytes.TrimSuffix(b, []byte{'\r'})
}

// cutRunes returns b's first max runes (an invalid byte counting as one),
// and whether it cut anything.
func cutRunes(b []byte, max int) (string, bool) {
	if len(b) <= max {
		return string(b), false
	}
	i, n := 0, 0
	for i < len(b) && n < max {
		_, size := utf8.DecodeRune(b[i:])
		i += size
		n++
	}
	return string(b[:i]), i < len(b)
}
