// This file implements the agent's file calls over envd: ReadFile as a
// ranged GET /files, WriteFile as a POST /files (an append as `cat >>` run
// on the remote), the upload route with sbx's mode, and the archive routes,
// which envd has no equivalent of.

package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	fspb "sbx.dev/sbx/api/agent/filesystem"
	ppb "sbx.dev/sbx/api/agent/process"
	pb "sbx.dev/sbx/api/agent/sbxagent"
)

// Read bounds, the agent's.
const (
	defaultReadLimit = 1 << 20
	maxReadLimit     = 16 << 20
)

// commandTimeout bounds a helper command the adapter runs on the remote
// (chmod, an append).
const commandTimeout = 5 * time.Minute

// filesErr is the Connect error of an answer of envd's /files other than
// success, by envd's statuses.
func (r *remote) filesErr(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := errorMessage(resp, b)
	code := connect.CodeInternal
	switch resp.StatusCode {
	case http.StatusBadRequest:
		code = connect.CodeInvalidArgument
	case http.StatusNotFound:
		code = connect.CodeNotFound
	case http.StatusForbidden:
		code = connect.CodePermissionDenied
	case http.StatusConflict:
		code = connect.CodeAlreadyExists
	case http.StatusRequestEntityTooLarge:
		code = connect.CodeOutOfRange
	case http.StatusInsufficientStorage, http.StatusTooManyRequests:
		code = connect.CodeResourceExhausted
	case http.StatusUnauthorized:
		code, msg = connect.CodeUnavailable, "its remote envd refused the access token: "+msg
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		code, msg = connect.CodeUnavailable, fmt.Sprintf("its remote envd (e2b sandbox %s) answered %d: %s", r.rid, resp.StatusCode, msg)
	}
	return connect.NewError(code, fmt.Errorf("sandbox %s: %s", r.id, msg))
}

// stat is the remote's entry of p; a missing p is nil, no error.
func (r *remote) stat(ctx context.Context, p string) (*fspb.EntryInfo, error) {
	resp, err := r.fs.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: p}))
	if connect.CodeOf(err) == connect.CodeNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, r.remoteErr(err)
	}
	return resp.Msg.GetEntry(), nil
}

func (agentService) ReadFile(ctx context.Context, req *connect.Request[pb.ReadFileRequest]) (*connect.Response[pb.ReadFileResponse], error) {
	r, err := sandboxOf(ctx)
	if err != nil {
		return nil, err
	}
	offset, limit := req.Msg.GetOffset(), req.Msg.GetLimit()
	switch {
	case offset < 0:
		return nil, invalid("offset %d is negative", offset)
	case limit <= 0:
		limit = defaultReadLimit
	case limit > maxReadLimit:
		return nil, invalid("limit %d is above %d", limit, maxReadLimit)
	}
	e, err := r.stat(ctx, req.Msg.GetPath())
	switch {
	case err != nil:
		return nil, err
	case e == nil:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("path '%s' does not exist", req.Msg.GetPath()))
	case e.GetType() == fspb.FileType_FILE_TYPE_DIRECTORY:
		return nil, invalid("path '%s' is a directory", e.GetPath())
	case e.GetType() != fspb.FileType_FILE_TYPE_FILE:
		return nil, invalid("path '%s' is not a regular file", e.GetPath())
	}
	size := e.GetSize()
	n := max(0, min(limit, size-offset))
	out := &pb.ReadFileResponse{Path: e.GetPath(), Size: size, Eof: offset+n >= size}
	if n == 0 {
		return connect.NewResponse(out), nil
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, r.envdURL("/files", url.Values{"path": {e.GetPath()}}), nil)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	hreq.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", offset, offset+n-1))
	resp, err := r.hc.Do(hreq)
	if err != nil {
		return nil, r.remoteErr(err)
	}
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusOK: // the whole file: skip to offset
		if _, err := io.CopyN(io.Discard, body, offset); err != nil {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: reading '%s' from its remote envd: %v", r.id, e.GetPath(), err))
		}
	default:
		return nil, r.filesErr(resp)
	}
	buf := make([]byte, n)
	got, err := io.ReadFull(body, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: reading '%s' from its remote envd: %v", r.id, e.GetPath(), err))
	}
	out.Content, out.Eof = buf[:got], offset+int64(got) >= size
	return connect.NewResponse(out), nil
}

func (agentService) WriteFile(ctx context.Context, req *connect.Request[pb.WriteFileRequest]) (*connect.Response[pb.WriteFileResponse], error) {
	r, err := sandboxOf(ctx)
	if err != nil {
		return nil, err
	}
	m := req.Msg
	mode := fs.FileMode(m.GetMode() & 0o7777)
	if mode == 0 {
		mode = 0o644
	}
	old, err := r.stat(ctx, m.GetPath())
	if err != nil {
		return nil, err
	}
	if old != nil && old.GetType() == fspb.FileType_FILE_TYPE_DIRECTORY {
		return nil, invalid("path '%s' is a directory", old.GetPath())
	}
	var wire string
	if m.GetAppend() && old != nil {
		// O_APPEND on the remote, as the agent does: a read-modify-write
		// here would lose what another writer appends meanwhile.
		if err := r.run(ctx, []string{"/bin/sh", "-c", `cat >> "$1"`, "sh", old.GetPath()}, m.GetContent()); err != nil {
			return nil, err
		}
		wire = old.GetPath()
	} else {
		wire, err = r.put(ctx, m.GetPath(), bytes.NewReader(m.GetContent()))
		if err != nil {
			return nil, err
		}
	}
	// A new file gets mode; an existing one keeps its own, as O_CREAT and
	// O_TRUNC leave it (an E2B server may replace the file whole).
	want := mode
	if old != nil {
		want = fs.FileMode(old.GetMode()).Perm()
	}
	e, err := r.chmodTo(ctx, wire, want)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.WriteFileResponse{Entry: e}), nil
}

// chmodTo gives the file at wire the permission bits want unless it has
// them, and returns its entry.
func (r *remote) chmodTo(ctx context.Context, wire string, want fs.FileMode) (*fspb.EntryInfo, error) {
	e, err := r.stat(ctx, wire)
	if err != nil {
		return nil, err
	}
	if e == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("path '%s' does not exist", wire))
	}
	if fs.FileMode(e.GetMode()).Perm() == want.Perm() && want&^fs.ModePerm == 0 {
		return e, nil
	}
	if err := r.run(ctx, []string{"chmod", strconv.FormatUint(uint64(want), 8), "--", e.GetPath()}, nil); err != nil {
		return nil, err
	}
	return r.stat(ctx, e.GetPath())
}

// put uploads body to path through envd's multipart POST /files, which
// every envd version takes, and returns the path the remote wrote.
func (r *remote) put(ctx context.Context, path string, body io.Reader) (string, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		h := textproto.MIMEHeader{}
		// The destination is the part's filename too, as E2B's SDK sends it.
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, path))
		h.Set("Content-Type", "application/octet-stream")
		part, err := mw.CreatePart(h)
		if err == nil {
			_, err = io.Copy(part, body)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, r.envdURL("/files", url.Values{"path": {path}}), pr)
	if err != nil {
		pr.CloseWithError(err)
		return "", connect.NewError(connect.CodeInternal, err)
	}
	hreq.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := r.hc.Do(hreq)
	pr.CloseWithError(errors.New("request ended"))
	if err != nil {
		return "", r.remoteErr(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", r.filesErr(resp)
	}
	var out []struct {
		Path string `json:"path"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil || len(out) == 0 || out[0].Path == "" {
		return "", connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: its remote envd's upload answer is malformed", r.id))
	}
	return out[0].Path, nil
}

// upload serves POST /files: the body (raw or multipart) goes to the
// remote's envd as multipart, and sbx's mode query (octal permission bits,
// which envd does not know) is applied afterwards.
func upload(w http.ResponseWriter, req *http.Request) {
	r := remoteOf(req.Context())
	if r == nil {
		writeHTTPError(w, http.StatusInternalServerError, "no sandbox")
		return
	}
	q := req.URL.Query()
	var mode fs.FileMode
	if s := q.Get("mode"); s != "" {
		v, err := strconv.ParseUint(s, 8, 32)
		if err != nil || v > 0o7777 {
			writeHTTPError(w, http.StatusBadRequest, "mode "+strconv.Quote(s)+" is not octal permission bits")
			return
		}
		mode = fs.FileMode(v)
	}
	if strings.HasPrefix(req.Header.Get("Content-Type"), "multipart/") {
		if mode != 0 {
			writeHTTPError(w, http.StatusBadRequest, "mode is taken with a raw upload only, not a multipart one")
			return
		}
		forward(w, req)
		return
	}
	path := q.Get("path")
	if path == "" {
		writeHTTPError(w, http.StatusBadRequest, "the path query is required")
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			writeHTTPError(w, http.StatusBadRequest, "gzip body: "+err.Error())
			return
		}
		defer zr.Close()
		body = zr
	}
	wire, err := r.put(req.Context(), path, body)
	if err == nil && mode != 0 {
		_, err = r.chmodTo(req.Context(), wire, mode)
	}
	if err != nil {
		writeHTTPError(w, httpStatus(err), err.Error())
		return
	}
	name := wire[strings.LastIndexByte(wire, '/')+1:]
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode([]map[string]string{{"path": wire, "name": name, "type": "file"}})
}

// httpStatus is the status of a file route for a Connect error.
func httpStatus(err error) int {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument:
		return http.StatusBadRequest
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeAlreadyExists:
		return http.StatusConflict
	case connect.CodeOutOfRange:
		return http.StatusRequestEntityTooLarge
	case connect.CodeResourceExhausted:
		return http.StatusInsufficientStorage
	case connect.CodeUnavailable:
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

// archive answers the archive routes, an sbx extension envd has no
// equivalent of.
func archive(w http.ResponseWriter, req *http.Request) {
	method := "DownloadArchive (GET /files/archive)"
	if req.Method == http.MethodPost {
		method = "UploadArchive (POST /files/archive)"
	}
	writeHTTPError(w, http.StatusNotImplemented, method+" is not implemented by the e2b backend: envd has no archive route; copy files one by one")
}

// run runs argv on the remote to its end, with stdin when not nil, and
// fails unless it exits 0, with what it wrote to stderr.
func (r *remote) run(ctx context.Context, argv []string, stdin []byte) error {
	out, err := r.command(ctx, argv, stdin, 0)
	if err == nil && !out.ok() {
		err = out.failure(r, argv[0])
	}
	return err
}

// commandOut is what a helper command left: its stdout (up to the cap
// asked for), the head of its stderr, and its end.
type commandOut struct {
	stdout, stderr []byte
	overflow       bool // stdout went past the cap
	end            *ppb.ProcessEvent_EndEvent
}

func (o commandOut) ok() bool { return o.exitCode() == 0 }

// exitCode is the command's exit status; -1 when a signal ended it.
func (o commandOut) exitCode() int32 {
	if strings.HasPrefix(o.end.GetStatus(), "signal: ") {
		return -1
	}
	return o.end.GetExitCode()
}

func (o commandOut) failure(r *remote, name string) error {
	return connect.NewError(connect.CodeInternal, fmt.Errorf("sandbox %s: %s on the remote: %s: %s", r.id, name, o.end.GetStatus(),
		strings.TrimSpace(truncate(string(o.stderr), 1000))))
}

// command runs argv on the remote to its end (commandTimeout at most),
// with stdin when not nil, keeping up to maxOut bytes of its stdout.
func (r *remote) command(ctx context.Context, argv []string, stdin []byte, maxOut int) (commandOut, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, commandTimeout)
		defer cancel()
	}
	withStdin := stdin != nil
	ctx = context.WithValue(ctx, timeoutKey{}, time.Until(deadlineOf(ctx)))
	st, err := r.proc.Start(ctx, connect.NewRequest(&ppb.StartRequest{
		Process: &ppb.ProcessConfig{Cmd: argv[0], Args: argv[1:]}, Stdin: &withStdin}))
	if err != nil {
		return commandOut{}, r.remoteErr(err)
	}
	ev := startEvents(st)
	defer ev.close()
	pid, err := awaitStart(ev)
	if err != nil {
		return commandOut{}, r.remoteErr(err)
	}
	if withStdin {
		p := &proc{pid: pid, stdin: true, done: make(chan struct{})}
		if err := r.writeStdin(ctx, p, stdin, true); err != nil {
			return commandOut{}, err
		}
	}
	var out commandOut
	for {
		e, ok := ev.next()
		if !ok {
			err := ev.err()
			if err == nil {
				err = errors.New("the stream ended without the command's end")
			}
			return commandOut{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: running %s on the remote: %v", r.id, argv[0], err))
		}
		if d := e.GetData(); d != nil {
			if len(out.stderr) < 4096 {
				out.stderr = append(out.stderr, d.GetStderr()...)
			}
			if b := d.GetStdout(); len(b) > 0 {
				if room := maxOut - len(out.stdout); room >= len(b) {
					out.stdout = append(out.stdout, b...)
				} else {
					out.stdout = append(out.stdout, b[:max(room, 0)]...)
					out.overflow = true
				}
			}
		}
		if end := e.GetEnd(); end != nil {
			out.end = end
			return out, nil
		}
	}
}

func deadlineOf(ctx context.Context) time.Time {
	dl, _ := ctx.Deadline()
	return dl
}
