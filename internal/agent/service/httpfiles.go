// This file implements envd's HTTP file routes: GET /files streams a file out,
// POST /files streams one in (raw or multipart), never holding it whole.

package service

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"

	"sbx.dev/sbx/internal/agent/files"
)

// httpError is the only place a /files error becomes a response.
func (s *Server) httpError(w http.ResponseWriter, err error) {
	status, msg := http.StatusInternalServerError, err.Error()
	var fe *files.Error
	var he *httpStatusError
	switch {
	case errors.As(err, &he):
		status = he.status
	case errors.As(err, &fe):
		switch fe.Kind {
		case files.Invalid:
			status = http.StatusBadRequest
		case files.NotFound:
			status = http.StatusNotFound
		case files.Exists:
			status = http.StatusConflict
		case files.Denied:
			status = http.StatusForbidden
		case files.NoSpace:
			status = http.StatusInsufficientStorage
		case files.TooLarge:
			status = http.StatusRequestEntityTooLarge
		case files.Precondition:
			status = http.StatusConflict
		}
	}
	if status == http.StatusInternalServerError {
		s.log.Error("file request failed", "err", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}

type httpStatusError struct {
	status int
	msg    string
}

func (e *httpStatusError) Error() string { return e.msg }

func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	f, wire, st, err := s.fs.OpenRegular(p)
	if err != nil {
		s.httpError(w, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": path.Base(wire)}))
	w.Header().Set("X-Sbx-Path", validUTF8(wire))
	// The size is the one stat gave: a file that grows meanwhile is served as
	// it was, and one that cannot seek to its end (/proc/self/mem) as empty.
	http.ServeContent(w, r, path.Base(wire), st.ModTime(), io.NewSectionReader(f, 0, st.Size()))
}

// uploaded is one entry of POST /files' answer.
type uploaded struct {
	Path     string            `json:"path"`
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// metadataOf collects a request's X-Metadata-<key> headers (E2B's file
// metadata), keys lowercased, checked before anything is written.
func metadataOf(h http.Header) (map[string]string, error) {
	var md map[string]string
	for name, vs := range h {
		key, ok := strings.CutPrefix(strings.ToLower(name), "x-metadata-")
		if !ok {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = vs[0] // a repeated header: its first value, as envd
	}
	return md, files.CheckMetadata(md)
}

func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var mode uint64
	if m := q.Get("mode"); m != "" { // an sbx extension: octal permission bits
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o7777 {
			s.httpError(w, &httpStatusError{http.StatusBadRequest, "mode " + strconv.Quote(m) + " is not octal permission bits"})
			return
		}
		mode = v
	}
	md, err := metadataOf(r.Header)
	if err != nil {
		s.httpError(w, err)
		return
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []uploaded
	switch ct {
	case "multipart/form-data":
		mr, err := r.MultipartReader()
		if err != nil {
			s.httpError(w, &httpStatusError{http.StatusBadRequest, "reading multipart body: " + err.Error()})
			return
		}
		seen := map[string]bool{}
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				s.httpError(w, &httpStatusError{http.StatusBadRequest, "reading multipart body: " + err.Error()})
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			dest := q.Get("path")
			if dest == "" {
				// The part's full filename: Part.FileName() keeps the base name only.
				_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
				dest = params["filename"]
			}
			if dest == "" {
				s.httpError(w, &httpStatusError{http.StatusBadRequest, "no path: give the path query or a filename"})
				return
			}
			if wire, err := s.fs.Clean(dest); err == nil {
				if seen[wire] {
					s.httpError(w, &httpStatusError{http.StatusBadRequest, "path '" + wire + "' is the target of two parts"})
					return
				}
				seen[wire] = true
			}
			u, err := s.store(dest, part, uint32(mode), md)
			part.Close()
			if err != nil {
				s.httpError(w, err)
				return
			}
			out = append(out, u)
		}
		if len(out) == 0 {
			s.httpError(w, &httpStatusError{http.StatusBadRequest, "no file part in the multipart body"})
			return
		}
	default:
		dest := q.Get("path")
		if dest == "" {
			s.httpError(w, &httpStatusError{http.StatusBadRequest, "the path query is required"})
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				s.httpError(w, &httpStatusError{http.StatusBadRequest, "gzip body: " + err.Error()})
				return
			}
			defer zr.Close()
			body = zr
		}
		u, err := s.store(dest, body, uint32(mode), md)
		if err != nil {
			s.httpError(w, err)
			return
		}
		out = append(out, u)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// store streams body into dest, then gives it md.
func (s *Server) store(dest string, body io.Reader, mode uint32, md map[string]string) (uploaded, error) {
	up, err := s.fs.Create(dest, modeBits(mode))
	if err != nil {
		return uploaded{}, err
	}
	if _, err := io.Copy(up, body); err != nil {
		up.Abort()
		var fe *files.Error
		if errors.As(err, &fe) {
			return uploaded{}, err
		}
		return uploaded{}, &httpStatusError{http.StatusBadRequest, "reading the upload: " + err.Error()}
	}
	in, err := up.Commit()
	if err != nil {
		return uploaded{}, err
	}
	if err := s.fs.SetMetadata(in.Path, md); err != nil {
		return uploaded{}, err
	}
	return uploaded{Path: validUTF8(in.Path), Name: validUTF8(in.Name), Type: "file", Metadata: md}, nil
}
