// This file implements the archive routes: a directory goes into a sandbox as
// a tar (or gzip-compressed tar) body and comes out as one, streamed through
// the daemon as opaque bytes, never buffered or decompressed here.

package httpapi

import (
	"io"
	"mime"
	"net/http"
	"path"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// uploadArchive is PUT …/files/archive?path=DIR[&max_bytes=N][&max_entries=N].
// Whether the body is gzip-compressed the agent tells by its magic bytes.
func (s *server) uploadArchive(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	p := q.path("path", true)
	lim := sandbox.ArchiveLimits{
		MaxBytes:   q.int("max_bytes", 0, 1, 1<<62),
		MaxEntries: q.int("max_entries", 0, 1, 1<<31),
	}
	if q.err != nil {
		return q.err
	}
	// The manager bounds the archive by the sandbox's disk quota, on the wire
	// and extracted; the agent bounds what the bytes expand to.
	res, err := s.m.UploadArchive(r.Context(), sandboxID(r), p, r.Body, r.ContentLength, lim)
	if err != nil {
		return err
	}
	out := openapi.ArchiveResult{Path: res.Path, Entries: res.Entries, Bytes: res.Bytes,
		Skipped: make([]openapi.ArchiveSkip, 0, len(res.Skipped)), SkippedCount: res.SkippedCount}
	for _, sk := range res.Skipped {
		out.Skipped = append(out.Skipped, openapi.ArchiveSkip{Name: sk.Name, Type: sk.Type, Reason: sk.Reason})
	}
	return writeJSON(w, http.StatusOK, out)
}

// downloadArchive is GET …/files/archive?path=DIR[&gzip=true].
func (s *server) downloadArchive(w http.ResponseWriter, r *http.Request) error {
	q := newQuery(r)
	p := q.path("path", true)
	gz := q.bool("gzip")
	if q.err != nil {
		return q.err
	}
	rc, err := s.m.DownloadArchive(r.Context(), sandboxID(r), p, gz)
	if err != nil {
		return err
	}
	defer rc.Close()
	h := w.Header()
	ctype, ext := "application/x-tar", ".tar"
	if gz {
		ctype, ext = "application/gzip", ".tar.gz"
	}
	h.Set("Content-Type", ctype)
	if name := path.Base(p); name != "" && name != "/" && name != "." {
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name + ext}))
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, rc); err != nil {
		// The status is sent: break the response so the archive never reads
		// as complete. The cause stays in the log.
		s.log.WarnContext(r.Context(), "archive download ended early", logkey.SandboxID, truncate(r.PathValue("id"), 64), logkey.Err, err)
		panic(http.ErrAbortHandler)
	}
	return nil
}
