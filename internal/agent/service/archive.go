// This file implements the agent's archive routes, an sbx extension beside
// envd's /files: POST /files/archive extracts a tar (or tar.gz) body beneath a
// directory, GET /files/archive streams a directory out as a tar (or tar.gz).

package service

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	agentfiles "sbx.dev/sbx/api/agent/files"
)

// lowerCap reads query parameter name, which may lower the agent's cap but not
// raise it.
func lowerCap(q map[string][]string, name string, limit int64) (int64, error) {
	v := ""
	if vs := q[name]; len(vs) > 0 {
		v = vs[0]
	}
	if v == "" {
		return limit, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil || n < 1:
		return 0, &httpStatusError{http.StatusBadRequest, name + " " + strconv.Quote(v) + " is not a positive integer"}
	case n > limit:
		return 0, &httpStatusError{http.StatusBadRequest, name + " " + v + " is above this sandbox's cap of " + strconv.FormatInt(limit, 10)}
	}
	return n, nil
}

func (s *Server) extractArchive(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	dest := q.Get("path")
	if dest == "" {
		s.httpError(w, &httpStatusError{http.StatusBadRequest, "the path query is required"})
		return
	}
	lim := s.cfg.Archive
	var err error
	if lim.MaxBytes, err = lowerCap(q, "max_bytes", lim.MaxBytes); err != nil {
		s.httpError(w, err)
		return
	}
	if lim.MaxEntries, err = lowerCap(q, "max_entries", lim.MaxEntries); err != nil {
		s.httpError(w, err)
		return
	}
	// The daemon sends the sandbox's disk quota: one upload may not write
	// more, whatever the caps above allow.
	if v := q.Get("quota_bytes"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			s.httpError(w, &httpStatusError{http.StatusBadRequest, "quota_bytes " + strconv.Quote(v) + " is not a positive integer"})
			return
		}
		if n < lim.MaxBytes {
			lim.MaxBytes, lim.BytesCap = n, "disk_mb: one upload may not exceed the sandbox's disk quota"
		}
	}
	res, err := s.fs.Extract(dest, r.Body, lim)
	if err != nil {
		s.httpError(w, err)
		return
	}
	out := agentfiles.ArchiveResult{Path: validUTF8(res.Path), Entries: res.Entries, Bytes: res.Bytes,
		Skipped: make([]agentfiles.ArchiveSkip, 0, len(res.Skipped)), SkippedCount: res.SkippedCount}
	for _, sk := range res.Skipped {
		out.Skipped = append(out.Skipped, agentfiles.ArchiveSkip{Name: validUTF8(sk.Name), Type: sk.Type, Reason: sk.Reason})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

func (s *Server) downloadArchive(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	compress := false
	if v := q.Get("gzip"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			s.httpError(w, &httpStatusError{http.StatusBadRequest, "gzip " + strconv.Quote(v) + " is not true or false"})
			return
		}
		compress = b
	}
	src, err := s.fs.OpenArchive(q.Get("path"))
	if err != nil {
		s.httpError(w, err)
		return
	}
	defer src.Close()
	h := w.Header()
	h.Set("X-Sbx-Path", validUTF8(src.Path))
	h.Set("Content-Type", "application/x-tar")
	var out io.Writer = w
	var zw *gzip.Writer
	if compress {
		h.Set("Content-Type", "application/gzip")
		zw, _ = gzip.NewWriterLevel(w, gzip.BestSpeed) // the sandbox's CPU pays: keep it cheap
		out = zw
	}
	w.WriteHeader(http.StatusOK)
	err = src.Write(out)
	if err == nil && zw != nil {
		err = zw.Close()
	}
	if err != nil {
		// The status is gone: break the stream so it never reads as complete.
		s.log.Warn("archive download ended early", "path", src.Path, "err", err)
		panic(http.ErrAbortHandler)
	}
	if src.Skipped > 0 {
		s.log.Debug("archive download left out special files", "path", src.Path, "skipped", src.Skipped)
	}
}
