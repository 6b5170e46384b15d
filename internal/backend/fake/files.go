// This file implements the fake agent's files: regular files in memory, by
// absolute path (directories are implied by the paths beneath them), served
// through the agent's file calls, envd's /files routes and the archive routes.

package fake

import (
	"archive/tar"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	agentfiles "sbx.dev/sbx/api/agent/files"
	fspb "sbx.dev/sbx/api/agent/filesystem"
	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/tarsafe"
)

// MaxKept bounds the bytes of one file an agent keeps. A larger file is
// counted whole, so a big upload passes through, but reading past its first
// MaxKept bytes fails (a download or an archive of it breaks off there).
const MaxKept = 1 << 20

// workdir is where relative paths are resolved, as in the real agent.
const workdir = "/workspace"

// file is one regular file. A stored file is never changed, only replaced.
type file struct {
	mode uint32 // permission bits
	size int64
	data []byte // the first MaxKept bytes
}

// Write appends b to f, keeping what fits under MaxKept.
func (f *file) Write(b []byte) (int, error) {
	if keep := MaxKept - len(f.data); keep > 0 {
		f.data = append(f.data, b[:min(len(b), keep)]...)
	}
	f.size += int64(len(b))
	return len(b), nil
}

func (f *file) entry(p string) *fspb.EntryInfo {
	return &fspb.EntryInfo{Name: path.Base(p), Type: fspb.FileType_FILE_TYPE_FILE, Path: p, Size: f.size, Mode: f.mode}
}

func resolve(p string) string {
	if !path.IsAbs(p) {
		return path.Join(workdir, p)
	}
	return path.Clean(p)
}

func noFile(p string) error { return fmt.Errorf("'%s' does not exist", p) }

func notKept(p string) error {
	return fmt.Errorf("'%s': the fake agent keeps the first %d bytes of a file only", p, MaxKept)
}

func (g *agent) ReadFile(ctx context.Context, req *connect.Request[pb.ReadFileRequest]) (*connect.Response[pb.ReadFileResponse], error) {
	a := g.state(ctx, "ReadFile")
	p, offset, limit := resolve(req.Msg.GetPath()), req.Msg.GetOffset(), req.Msg.GetLimit()
	if limit <= 0 {
		limit = 1 << 20
	}
	g.d.mu.Lock()
	defer g.d.mu.Unlock()
	f := a.files[p]
	if f == nil {
		return nil, connect.NewError(connect.CodeNotFound, noFile(p))
	}
	end := min(f.size, offset+limit)
	offset = min(offset, end)
	if end > int64(len(f.data)) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, notKept(p))
	}
	return connect.NewResponse(&pb.ReadFileResponse{Path: p, Content: slices.Clone(f.data[offset:end]), Size: f.size, Eof: end == f.size}), nil
}

func (g *agent) WriteFile(ctx context.Context, req *connect.Request[pb.WriteFileRequest]) (*connect.Response[pb.WriteFileResponse], error) {
	a := g.state(ctx, "WriteFile")
	p, m := resolve(req.Msg.GetPath()), req.Msg
	f := &file{mode: m.GetMode() & 0o7777}
	if f.mode == 0 {
		f.mode = 0o644
	}
	g.d.mu.Lock()
	defer g.d.mu.Unlock()
	if old := a.files[p]; old != nil && m.GetAppend() {
		f.size, f.data = old.size, slices.Clone(old.data)
	}
	f.Write(m.GetContent())
	a.files[p] = f
	return connect.NewResponse(&pb.WriteFileResponse{Entry: f.entry(p)}), nil
}

func (g *agent) Stat(ctx context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	a := g.state(ctx, "Stat")
	p := resolve(req.Msg.GetPath())
	g.d.mu.Lock()
	defer g.d.mu.Unlock()
	f := a.files[p]
	if f == nil {
		return nil, connect.NewError(connect.CodeNotFound, noFile(p))
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: f.entry(p)}), nil
}

// httpError answers a /files route as the agent does: a status and a JSON message.
func httpError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Message string `json:"message"`
	}{err.Error()})
}

// download is GET /files?path=P.
func (g *agent) download(w http.ResponseWriter, r *http.Request) {
	a := g.state(r.Context(), "Download")
	p := resolve(r.URL.Query().Get("path"))
	g.d.mu.Lock()
	f := a.files[p]
	g.d.mu.Unlock()
	if f == nil {
		httpError(w, http.StatusNotFound, noFile(p))
		return
	}
	w.Header().Set("X-Sbx-Path", p)
	w.Header().Set("Content-Length", strconv.FormatInt(f.size, 10))
	w.Write(f.data)
	if int64(len(f.data)) < f.size {
		panic(http.ErrAbortHandler) // the rest was not kept: the body breaks off short
	}
}

// upload is POST /files?path=P[&mode=OCTAL], the body raw.
func (g *agent) upload(w http.ResponseWriter, r *http.Request) {
	a := g.state(r.Context(), "Upload")
	q := r.URL.Query()
	p := resolve(q.Get("path"))
	f := &file{mode: 0o644}
	if m := q.Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil || v > 0o7777 {
			httpError(w, http.StatusBadRequest, fmt.Errorf("mode %q is not octal permission bits", m))
			return
		}
		f.mode = uint32(v)
	}
	if _, err := io.Copy(f, r.Body); err != nil {
		httpError(w, http.StatusBadRequest, fmt.Errorf("reading the upload: %w", err))
		return
	}
	g.d.mu.Lock()
	a.files[p] = f
	g.d.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode([]struct {
		Path string `json:"path"`
	}{{p}})
}

// Archive is an archive body an agent was sent, as it arrived, with the limits
// sent beside it (0 when not sent).
type Archive struct {
	Dir    string
	Size   int64
	SHA256 [sha256.Size]byte
	Limits sandbox.ArchiveLimits
}

// Archives returns the archive bodies sandbox id's agent was sent, oldest first.
func (d *Driver) Archives(id sandbox.ID) []Archive {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a := d.agents[id]; a != nil {
		return slices.Clone(a.archives)
	}
	return nil
}

// extractArchive is POST /files/archive?path=DIR[&max_bytes=N][&max_entries=N]
// [&quota_bytes=N]: it extracts the files of a tar or tar.gz body beneath DIR
// under the archive rules (package tarsafe), all or nothing. Directories are
// counted, devices and FIFOs skipped, links refused.
func (g *agent) extractArchive(w http.ResponseWriter, r *http.Request) {
	a := g.state(r.Context(), "UploadArchive")
	q := r.URL.Query()
	rec := Archive{Dir: resolve(q.Get("path"))}
	var errs [3]error
	rec.Limits.MaxBytes, errs[0] = positive(q, "max_bytes")
	rec.Limits.MaxEntries, errs[1] = positive(q, "max_entries")
	rec.Limits.QuotaBytes, errs[2] = positive(q, "quota_bytes")
	if err := errors.Join(errs[:]...); err != nil {
		httpError(w, http.StatusBadRequest, err)
		return
	}
	maxBytes, capTag := cmp.Or(rec.Limits.MaxBytes, tarsafe.DefaultMaxBytes), "max_bytes"
	if quota := rec.Limits.QuotaBytes; quota > 0 && quota < maxBytes {
		maxBytes, capTag = quota, "disk_mb: one upload may not exceed the sandbox's disk quota"
	}
	maxEntries := cmp.Or(rec.Limits.MaxEntries, tarsafe.DefaultMaxEntries)

	sum, size := sha256.New(), new(counter)
	body := io.TeeReader(r.Body, io.MultiWriter(sum, size))
	res := agentfiles.ArchiveResult{Path: rec.Dir, Skipped: []agentfiles.ArchiveSkip{}}
	out := map[string]*file{}
	in, err := tarsafe.NewReader(body, maxBytes, capTag)
	if err == nil {
		defer in.Close()
		var n int64
		err = tarsafe.Walk(in, func(tr *tar.Reader, hdr *tar.Header) error {
			n++
			if n > maxEntries {
				return tarsafe.TooManyEntries(maxEntries)
			}
			if typ, reason, skip := tarsafe.Skipped(hdr); skip {
				res.SkippedCount++
				res.Skipped = append(res.Skipped, agentfiles.ArchiveSkip{Name: hdr.Name, Type: typ, Reason: reason})
				return nil
			}
			comps, err := tarsafe.Components("entry", hdr.Name)
			if err != nil {
				return err
			}
			switch hdr.Typeflag {
			case tar.TypeDir:
			case tar.TypeReg:
				f := &file{mode: uint32(hdr.Mode) & 0o7777}
				if _, err := io.Copy(f, tr); err != nil {
					return tarsafe.ReadError(err)
				}
				out[path.Join(rec.Dir, strings.Join(comps, "/"))] = f
				res.Bytes += f.size
			default:
				return fmt.Errorf("entry %s: the fake agent extracts files and directories only", tarsafe.Quote(hdr.Name))
			}
			res.Entries++
			return nil
		})
	}
	io.Copy(io.Discard, body) // the rest, so the record is the whole body as sent
	rec.Size = int64(*size)
	copy(rec.SHA256[:], sum.Sum(nil))
	g.d.mu.Lock()
	a.archives = append(a.archives, rec)
	if err == nil {
		for p, f := range out {
			a.files[p] = f
		}
	}
	g.d.mu.Unlock()
	if err != nil {
		status := http.StatusBadRequest
		var te *tarsafe.Error
		if errors.As(err, &te) && te.TooLarge {
			status = http.StatusRequestEntityTooLarge
		}
		httpError(w, status, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

// counter counts the bytes written to it.
type counter int64

func (c *counter) Write(b []byte) (int, error) {
	*c += counter(len(b))
	return len(b), nil
}

// positive reads the optional positive integer query parameter name; 0 when absent.
func positive(q url.Values, name string) (int64, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s %q is not a positive integer", name, v)
	}
	return n, nil
}

// downloadArchive is GET /files/archive?path=DIR[&gzip=BOOL]: the files
// beneath DIR as a tar, gzip-compressed when asked. A file not kept whole
// breaks the stream off, as the agent does with an archive it cannot finish.
func (g *agent) downloadArchive(w http.ResponseWriter, r *http.Request) {
	a := g.state(r.Context(), "DownloadArchive")
	q := r.URL.Query()
	dir := resolve(q.Get("path"))
	compress := false
	if v := q.Get("gzip"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			httpError(w, http.StatusBadRequest, fmt.Errorf("gzip %q is not true or false", v))
			return
		}
		compress = b
	}
	g.d.mu.Lock()
	var names []string
	files := map[string]*file{}
	for p, f := range a.files {
		if rel, ok := strings.CutPrefix(p, dir+"/"); ok {
			names = append(names, rel)
			files[rel] = f
		}
	}
	g.d.mu.Unlock()
	if len(names) == 0 {
		httpError(w, http.StatusNotFound, fmt.Errorf("'%s' is not a directory", dir))
		return
	}
	slices.Sort(names)
	w.Header().Set("X-Sbx-Path", dir)
	w.Header().Set("Content-Type", "application/x-tar")
	var out io.Writer = w
	var zw *gzip.Writer
	if compress {
		w.Header().Set("Content-Type", "application/gzip")
		zw = gzip.NewWriter(w)
		out = zw
	}
	w.WriteHeader(http.StatusOK)
	tw := tar.NewWriter(out)
	for _, name := range names {
		f := files[name]
		err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(f.mode), Size: f.size})
		if err == nil {
			_, err = tw.Write(f.data)
		}
		if err != nil || int64(len(f.data)) < f.size {
			panic(http.ErrAbortHandler) // never a complete-looking archive
		}
	}
	if err := errors.Join(tw.Close(), closeGzip(zw)); err != nil {
		panic(http.ErrAbortHandler)
	}
}

func closeGzip(zw *gzip.Writer) error {
	if zw == nil {
		return nil
	}
	return zw.Close()
}
