// This file implements the agent's tool calls that envd can do exactly:
// ReadLines over a streamed GET /files, read only as far as the page,
// Changed as GNU find run in the sandbox, and EditFile as the agent's own
// edit (package textedit) on the file read and written back over /files.
// Glob and Grep are answered unimplemented (agent.go): their matchers walk
// the tree, which envd cannot do as the agent does.

package e2b

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	fspb "sbx.dev/sbx/api/agent/filesystem"
	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/internal/textedit"
)

// Line page bounds, the agent's.
const (
	maxEditFile      = 64 << 20 // the agent's files.MaxEditFile
	defaultLineLimit = 2000
	maxLineLimit     = 100000
	defaultLineChars = 2000
	maxLineChars     = 1 << 20
	maxPageBytes     = 16 << 20
	binaryProbe      = 8192
)

// regularFile is the remote's entry of the regular file p, or the agent's
// error for what p is instead.
func (r *remote) regularFile(ctx context.Context, p string) (*fspb.EntryInfo, error) {
	e, err := r.stat(ctx, p)
	switch {
	case err != nil:
		return nil, err
	case e == nil:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("path '%s' does not exist", p))
	case e.GetType() == fspb.FileType_FILE_TYPE_DIRECTORY:
		return nil, invalid("path '%s' is a directory", e.GetPath())
	case e.GetType() != fspb.FileType_FILE_TYPE_FILE:
		return nil, invalid("path '%s' is not a regular file", e.GetPath())
	}
	return e, nil
}

// download opens the remote file at wire path p as a stream.
func (r *remote) download(ctx context.Context, p string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.envdURL("/files", url.Values{"path": {p}}), nil)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, r.remoteErr(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, r.filesErr(resp)
	}
	return resp.Body, nil
}

func (agentService) ReadLines(ctx context.Context, req *connect.Request[pb.ReadLinesRequest]) (*connect.Response[pb.ReadLinesResponse], error) {
	r, err := sandboxOf(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	offset, limit, maxChars := m.GetOffset(), m.GetLimit(), int(m.GetMaxLineChars())
	switch {
	case offset < 0:
		return nil, invalid("offset %d is negative", offset)
	case limit < 0:
		return nil, invalid("limit %d is negative", limit)
	case limit > maxLineLimit:
		return nil, invalid("limit %d is above %d lines", limit, maxLineLimit)
	case maxChars < 0:
		return nil, invalid("max_line_chars %d is negative", maxChars)
	case maxChars > maxLineChars:
		return nil, invalid("max_line_chars %d is above %d", maxChars, maxLineChars)
	}
	if limit == 0 {
		limit = defaultLineLimit
	}
	if maxChars == 0 {
		maxChars = defaultLineChars
	}
	e, err := r.regularFile(ctx, m.GetPath())
	if err != nil {
		return nil, err
	}
	body, err := r.download(ctx, e.GetPath())
	if err != nil {
		return nil, err
	}
	defer body.Close() // a page near the start of a huge file reads no further
	out, err := readLines(bufio.NewReaderSize(body, 64<<10), offset, limit, maxChars)
	if errors.Is(err, errBinary) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("path '%s' is a binary file", e.GetPath()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: reading '%s' from its remote envd: %v", r.id, e.GetPath(), err))
	}
	return connect.NewResponse(out), nil
}

// errBinary is a file with a NUL byte in its first binaryProbe bytes.
var errBinary = errors.New("binary file")

// readLines is a page of the text br holds, as the agent cuts it: lines
// without their ends (\n or \r\n), each cut to maxChars runes (an invalid
// byte counting as one), invalid UTF-8 as U+FFFD, a page stopping past
// maxPageBytes; a last line without \n counts.
func readLines(br *bufio.Reader, offset, limit int64, maxChars int) (*pb.ReadLinesResponse, error) {
	head, err := br.Peek(binaryProbe)
	if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, err
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return nil, errBinary
	}
	out := &pb.ReadLinesResponse{FirstLine: offset + 1, TotalLines: -1}
	keep := 4*maxChars + 4
	var buf []byte
	page := 0
	for n := int64(0); ; n++ {
		if n == offset+limit || page > maxPageBytes {
			if _, err := br.Peek(1); err == io.EOF {
				out.Eof, out.TotalLines = true, n
			} else if err != nil {
				return nil, err
			}
			return out, nil
		}
		want := n >= offset
		buf = buf[:0]
		long, read := false, false
		var lineErr error
		for {
			chunk, err := br.ReadSlice('\n')
			read = read || len(chunk) > 0
			if want {
				if room := keep - len(buf); room >= len(chunk) {
					buf = append(buf, chunk...)
				} else {
					buf = append(buf, chunk[:max(room, 0)]...)
					long = true
				}
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if err == io.EOF && read {
				err = nil // a last line without \n
			}
			lineErr = err
			break
		}
		if lineErr == io.EOF {
			out.Eof, out.TotalLines = true, n
			return out, nil
		}
		if lineErr != nil {
			return nil, lineErr
		}
		if !want {
			continue
		}
		line := bytes.TrimSuffix(bytes.TrimSuffix(buf, []byte{'\n'}), []byte{'\r'})
		s, cut := cutRunes(line, maxChars)
		if cut || long {
			out.CutLines++
		}
		out.Lines = append(out.Lines, strings.ToValidUTF8(s, "\uFFFD"))
		page += len(s)
	}
}

// cutRunes returns b's first n runes (an invalid byte counting as one), and
// whether it cut anything.
func cutRunes(b []byte, n int) (string, bool) {
	if len(b) <= n {
		return string(b), false
	}
	i, k := 0, 0
	for i < len(b) && k < n {
		_, size := utf8.DecodeRune(b[i:])
		i += size
		k++
	}
	return string(b[:i]), i < len(b)
}

// Changed bounds: the agent's default list, and how much of find's output
// is read (past it the list is incomplete).
const (
	defaultChangedLimit = 1000
	maxFindOutput       = 16 << 20
)

func (agentService) Changed(ctx context.Context, req *connect.Request[pb.ChangedRequest]) (*connect.Response[pb.ChangedResponse], error) {
	r, err := sandboxOf(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	if m.GetSince() == nil {
		return nil, invalid("since is required")
	}
	if err := m.GetSince().CheckValid(); err != nil {
		return nil, invalid("since: %v", err)
	}
	limit := int(m.GetLimit())
	if limit <= 0 {
		limit = defaultChangedLimit
	}
	e, err := r.stat(ctx, m.GetRoot())
	switch {
	case err != nil:
		return nil, err
	case e == nil:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("path '%s' does not exist", m.GetRoot()))
	case e.GetType() != fspb.FileType_FILE_TYPE_DIRECTORY:
		return nil, invalid("path '%s' is not a directory", e.GetPath())
	}
	if err := r.gnuFind(ctx); err != nil {
		return nil, err
	}
	paths, truncated, err := r.changed(ctx, e.GetPath(), m.GetSince().AsTime(), limit)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.ChangedResponse{Paths: paths, Truncated: truncated}), nil
}

// changed lists the regular files under root whose mtime or ctime is at or
// after since, with GNU find: the same files the agent's walk finds (it
// stays on root's filesystem and follows no symlink), sorted, at most
// limit; truncated when limit cut the list, find could not read a
// directory, or its output passed maxFindOutput. Unlike the agent's walk it
// looks at every entry (the agent stops after 200 000).
func (r *remote) changed(ctx context.Context, root string, since time.Time, limit int) ([]string, bool, error) {
	// find's -newer… is "strictly after": a nanosecond earlier is "at or after".
	ref := since.Add(-time.Nanosecond)
	at := fmt.Sprintf("@%d.%09d", ref.Unix(), ref.Nanosecond())
	argv := []string{"find", root, "-xdev", "-type", "f", "(", "-newermt", at, "-o", "-newerct", at, ")", "-print0"}
	out, err := r.command(ctx, argv, nil, maxFindOutput)
	if err != nil {
		return nil, false, err
	}
	incomplete := out.overflow
	switch out.exitCode() {
	case 0:
	case 1: // some directory could not be read: what it found stands
		incomplete = true
	default:
		return nil, false, out.failure(r, "find")
	}
	var paths []string
	for p := range bytes.SplitSeq(out.stdout, []byte{0}) {
		if len(p) > 0 {
			paths = append(paths, strings.ToValidUTF8(string(p), "\uFFFD"))
		}
	}
	if out.overflow && len(paths) > 0 {
		paths = paths[:len(paths)-1] // cut short by the cap
	}
	slices.Sort(paths)
	if len(paths) > limit {
		paths, incomplete = paths[:limit], true
	}
	return paths, incomplete, nil
}

// gnuFind checks, once per sandbox, that its find is GNU find, whose
// -newermt and -newerct Changed relies on; with another, Changed is
// unimplemented. A look that fails is tried again at the next call.
func (r *remote) gnuFind(ctx context.Context) error {
	r.findMu.Lock()
	defer r.findMu.Unlock()
	if r.findKnown {
		return r.findErr
	}
	out, err := r.command(ctx, []string{"find", "--version"}, nil, 4096)
	if err != nil {
		return err
	}
	if !out.ok() || !bytes.Contains(out.stdout, []byte("GNU findutils")) {
		r.findErr = connect.NewError(connect.CodeUnimplemented,
			errors.New("Changed is not implemented by the e2b backend on this sandbox: it needs GNU find (findutils) in the sandbox's template"))
	}
	r.findKnown = true
	return r.findErr
}

// EditFile edits as the agent does, on the remote file: read whole (at most
// maxEditFile), edited here, written back with its mode. Unlike the
// agent's, the read and the write are two requests: a writer in between
// loses its write.
func (agentService) EditFile(ctx context.Context, req *connect.Request[pb.EditFileRequest]) (*connect.Response[pb.EditFileResponse], error) {
	r, err := sandboxOf(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	switch {
	case m.GetOldString() == "":
		return nil, invalid("old_string is empty")
	case m.GetOldString() == m.GetNewString():
		return nil, invalid("old_string and new_string are the same")
	}
	e, err := r.regularFile(ctx, m.GetPath())
	if err != nil {
		return nil, err
	}
	path := e.GetPath()
	if t := e.GetSymlinkTarget(); t != "" {
		path = t // the agent edits what a link points to
	}
	if e.GetSize() > maxEditFile {
		return nil, connect.NewError(connect.CodeOutOfRange, fmt.Errorf("path '%s' is %d bytes; files over %d MiB are not edited", path, e.GetSize(), maxEditFile>>20))
	}
	rc, err := r.download(ctx, path)
	if err != nil {
		return nil, err
	}
	content, err := io.ReadAll(io.LimitReader(rc, maxEditFile+1))
	rc.Close()
	if err != nil {
		return nil, r.remoteErr(err)
	}
	if len(content) > maxEditFile {
		return nil, connect.NewError(connect.CodeOutOfRange, fmt.Errorf("path '%s' grew past %d MiB while being read; files over it are not edited", path, maxEditFile>>20))
	}
	if bytes.IndexByte(content[:min(len(content), binaryProbe)], 0) >= 0 {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("path '%s' is a binary file", path))
	}
	out, res, err := textedit.Apply(path, string(content), m.GetOldString(), m.GetNewString(), m.GetReplaceAll())
	if err != nil {
		return nil, invalid("%s", err)
	}
	wire, err := r.put(ctx, path, strings.NewReader(out))
	if err != nil {
		return nil, err
	}
	if _, err := r.chmodTo(ctx, wire, fs.FileMode(e.GetMode()).Perm()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.EditFileResponse{Replacements: int32(res.Replacements), Exact: res.Exact, Score: res.Score,
		StartLine: res.StartLine, EndLine: res.EndLine, Strategy: res.Strategy}), nil
}
