// This file implements the file routes: the tool plane (read, write, stat,
// list, mkdir, move, remove, glob, grep) in JSON, and the bulk plane (download,
// upload) as raw bytes streamed both ways, never buffered whole.

package httpapi

import (
	"errors"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/manager"
)

// maxReadLimit bounds one page of GET …/files/read.
const maxReadLimit = 8 << 20

func (s *server) readFile(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	p := q.path("path", true)
	offset := q.int("offset", 0, 0, 1<<62)
	limit := q.int("limit", 1<<20, 1, maxReadLimit)
	if q.err != nil {
		return q.err
	}
	res, err := s.m.ReadFile(r.Context(), sandboxID(r), p, offset, limit)
	if err != nil {
		return err
	}
	out := openapi.FileContent{Path: res.Path, Size: res.Size, Offset: res.Offset, Length: int64(len(res.Content)), EOF: res.EOF}
	out.Content, out.ContentBase64 = openapi.Text(res.Content)
	return writeJSON(w, http.StatusOK, out)
}

func (s *server) writeFile(w http.ResponseWriter, r *http.Request) error {
	var in openapi.WriteFileRequest
	if err := s.decodeJSON(w, r, &in); err != nil {
		return err
	}
	if err := checkPath("path", in.Path, true); err != nil {
		return err
	}
	content, err := textOrBase64("content", in.Content, in.ContentBase64)
	if err != nil {
		return err
	}
	mode, err := parseMode("mode", in.Mode)
	if err != nil {
		return err
	}
	fi, err := s.m.WriteFile(r.Context(), sandboxID(r), in.Path, content, mode, in.Append)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wireFileInfo(fi))
}

func (s *server) stat(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	p := q.path("path", true)
	if q.err != nil {
		return q.err
	}
	fi, err := s.m.Stat(r.Context(), sandboxID(r), p)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wireFileInfo(fi))
}

func (s *server) listDir(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	p := q.path("path", false)
	depth := q.int("depth", 1, 1, 16)
	if q.err != nil {
		return q.err
	}
	if p == "" {
		p = "."
	}
	fis, err := s.m.ListDir(r.Context(), sandboxID(r), p, int(depth))
	if err != nil {
		return err
	}
	out := openapi.FileList{Entries: make([]openapi.FileInfo, 0, len(fis))}
	for _, fi := range fis {
		out.Entries = append(out.Entries, wireFileInfo(fi))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *server) makeDir(w http.ResponseWriter, r *http.Request) error {
	var in openapi.PathRequest
	if err := s.decodeJSON(w, r, &in); err != nil {
		return err
	}
	if err := checkPath("path", in.Path, true); err != nil {
		return err
	}
	fi, err := s.m.MakeDir(r.Context(), sandboxID(r), in.Path)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wireFileInfo(fi))
}

func (s *server) move(w http.ResponseWriter, r *http.Request) error {
	var in openapi.MoveRequest
	if err := s.decodeJSON(w, r, &in); err != nil {
		return err
	}
	if err := errors.Join(checkPath("source", in.Source, true), checkPath("destination", in.Destination, true)); err != nil {
		return err
	}
	fi, err := s.m.Move(r.Context(), sandboxID(r), in.Source, in.Destination)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wireFileInfo(fi))
}

func (s *server) remove(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	p := q.path("path", true)
	if q.err != nil {
		return q.err
	}
	if err := s.m.Remove(r.Context(), sandboxID(r), p); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *server) glob(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	pattern := q.str("pattern", true)
	dir := q.path("path", false)
	limit := q.int("limit", 1000, 1, 100000)
	if q.err != nil {
		return q.err
	}
	paths, truncated, err := s.m.Glob(r.Context(), sandboxID(r), pattern, dir, int(limit))
	if err != nil {
		return err
	}
	if paths == nil {
		paths = []string{}
	}
	return writeJSON(w, http.StatusOK, openapi.GlobResult{Paths: paths, Truncated: truncated})
}

func (s *server) grep(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	req := manager.GrepRequest{
		Pattern:    q.str("pattern", true),
		Path:       q.path("path", false),
		Include:    q.str("include", false),
		IgnoreCase: q.bool("ignore_case"),
		Fixed:      q.bool("fixed"),
		Limit:      int(q.int("limit", 1000, 1, 100000)),
	}
	if q.err != nil {
		return q.err
	}
	ms, truncated, err := s.m.Grep(r.Context(), sandboxID(r), req)
	if err != nil {
		return err
	}
	out := openapi.GrepResult{Matches: make([]openapi.GrepMatch, 0, len(ms)), Truncated: truncated}
	for _, m := range ms {
		out.Matches = append(out.Matches, openapi.GrepMatch{Path: m.Path, Line: m.Line, Text: m.Text})
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *server) download(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	p := q.path("path", true)
	if q.err != nil {
		return q.err
	}
	rc, fi, err := s.m.Download(r.Context(), sandboxID(r), p)
	if err != nil {
		return err
	}
	defer rc.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	if fi.Type == "file" && fi.Size >= 0 {
		h.Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	}
	if name := path.Base(fi.Path); name != "" && name != "/" && name != "." {
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		// The status is sent; the short body tells the client. The cause is logged.
		s.log.DebugContext(r.Context(), "download ended early", logkey.Err, err)
	}
	return nil
}

func (s *server) upload(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	p := q.path("path", true)
	modeStr := q.str("mode", false)
	if q.err != nil {
		return q.err
	}
	mode, err := parseOctalMode("mode", modeStr)
	if err != nil {
		return err
	}
	// The manager bounds the upload by the sandbox's disk quota: a length
	// over it fails before a byte is read.
	fi, err := s.m.Upload(r.Context(), sandboxID(r), p, r.Body, r.ContentLength, mode)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, wireFileInfo(fi))
}
