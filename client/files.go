// This file implements the file calls: the JSON tool plane and streaming
// upload and download.

package client

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/sandbox"
)

func filesPath(id, what string) string { return sandboxPath(id) + "/files" + what }

// ReadResult is one page of a file, as bytes.
type ReadResult struct {
	Path    string
	Content []byte
	Size    int64 // of the whole file
	Offset  int64
	EOF     bool
}

// ReadFile reads at most limit bytes (0: the daemon's default) from offset.
func (c *Client) ReadFile(ctx context.Context, id, path string, offset, limit int64) (*ReadResult, error) {
	q := url.Values{"path": {path}}
	if offset > 0 {
		q.Set("offset", strconv.FormatInt(offset, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.FormatInt(limit, 10))
	}
	var fc openapi.FileContent
	if err := c.call(ctx, request{op: "read_file", id: id, method: http.MethodGet, path: filesPath(id, "/read"), query: q}, &fc); err != nil {
		return nil, err
	}
	content := []byte(fc.Content)
	if fc.ContentBase64 != "" {
		b, err := base64.StdEncoding.DecodeString(fc.ContentBase64)
		if err != nil {
			return nil, &sandbox.Error{Op: "read_file", ID: sandbox.ID(id), Err: fmt.Errorf("%w: content_base64: %v", sandbox.ErrUnavailable, err)}
		}
		content = b
	}
	return &ReadResult{Path: fc.Path, Content: content, Size: fc.Size, Offset: fc.Offset, EOF: fc.EOF}, nil
}

// WriteOptions are WriteFile's optional settings.
type WriteOptions struct {
	Mode   uint32 // permission bits; 0 means the daemon's default
	Append bool
}

// WriteFile writes content to path (through the JSON body: for large files use
// Upload).
func (c *Client) WriteFile(ctx context.Context, id, path string, content []byte, o WriteOptions) (*openapi.FileInfo, error) {
	b64 := base64.StdEncoding.EncodeToString(content)
	req := openapi.WriteFileRequest{Path: path, ContentBase64: &b64, Append: o.Append}
	if o.Mode != 0 {
		req.Mode = []byte(strconv.Quote(fmt.Sprintf("%04o", o.Mode)))
	}
	var fi openapi.FileInfo
	return &fi, c.call(ctx, request{op: "write_file", id: id, method: http.MethodPut, path: filesPath(id, "/write"), body: req}, &fi)
}

// Stat describes path.
func (c *Client) Stat(ctx context.Context, id, path string) (*openapi.FileInfo, error) {
	var fi openapi.FileInfo
	return &fi, c.call(ctx, request{op: "stat", id: id, method: http.MethodGet, path: filesPath(id, "/stat"), query: url.Values{"path": {path}}}, &fi)
}

// ListDir lists dir, depth levels deep (0: 1).
func (c *Client) ListDir(ctx context.Context, id, dir string, depth int) ([]openapi.FileInfo, error) {
	q := url.Values{"path": {dir}}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var l openapi.FileList
	if err := c.call(ctx, request{op: "list_dir", id: id, method: http.MethodGet, path: filesPath(id, "/list"), query: q}, &l); err != nil {
		return nil, err
	}
	return l.Entries, nil
}

// MakeDir makes dir and its parents.
func (c *Client) MakeDir(ctx context.Context, id, dir string) (*openapi.FileInfo, error) {
	var fi openapi.FileInfo
	return &fi, c.call(ctx, request{op: "make_dir", id: id, method: http.MethodPost, path: filesPath(id, "/mkdir"), body: openapi.PathRequest{Path: dir}}, &fi)
}

// Move moves src to dst.
func (c *Client) Move(ctx context.Context, id, src, dst string) (*openapi.FileInfo, error) {
	var fi openapi.FileInfo
	return &fi, c.call(ctx, request{op: "move", id: id, method: http.MethodPost, path: filesPath(id, "/move"),
		body: openapi.MoveRequest{Source: src, Destination: dst}}, &fi)
}

// Remove removes path (a directory with its contents).
func (c *Client) Remove(ctx context.Context, id, path string) error {
	return c.call(ctx, request{op: "remove", id: id, method: http.MethodDelete, path: filesPath(id, ""), query: url.Values{"path": {path}}}, nil)
}

// Glob finds paths under dir matching pattern, at most limit (0: default).
func (c *Client) Glob(ctx context.Context, id, pattern, dir string, limit int) (*openapi.GlobResult, error) {
	q := url.Values{"pattern": {pattern}}
	if dir != "" {
		q.Set("path", dir)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var g openapi.GlobResult
	return &g, c.call(ctx, request{op: "glob", id: id, method: http.MethodGet, path: filesPath(id, "/glob"), query: q}, &g)
}

// GrepOptions select lines for Grep.
type GrepOptions struct {
	Path       string
	Include    string
	IgnoreCase bool
	Fixed      bool
	Limit      int
}

// Grep finds lines matching pattern.
func (c *Client) Grep(ctx context.Context, id, pattern string, o GrepOptions) (*openapi.GrepResult, error) {
	q := url.Values{"pattern": {pattern}}
	if o.Path != "" {
		q.Set("path", o.Path)
	}
	if o.Include != "" {
		q.Set("include", o.Include)
	}
	if o.IgnoreCase {
		q.Set("ignore_case", "true")
	}
	if o.Fixed {
		q.Set("fixed", "true")
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var g openapi.GrepResult
	return &g, c.call(ctx, request{op: "grep", id: id, method: http.MethodGet, path: filesPath(id, "/grep"), query: q}, &g)
}

// Upload streams r into path (replacing it, creating parents), with mode's
// permission bits (0: the daemon's default). The body is sent chunked as it is
// read: memory stays bounded whatever the size.
func (c *Client) Upload(ctx context.Context, id, path string, r io.Reader, mode uint32) (*openapi.FileInfo, error) {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", fmt.Sprintf("%04o", mode))
	}
	if r == nil {
		r = http.NoBody
	}
	var fi openapi.FileInfo
	return &fi, c.call(ctx, request{op: "upload", id: id, method: http.MethodPut, path: filesPath(id, "/upload"), query: q,
		raw: io.MultiReader(r)}, &fi) // MultiReader hides Len: always stream
}

// Download opens path for streaming; size is -1 when the daemon did not say.
// The caller closes the reader.
func (c *Client) Download(ctx context.Context, id, path string) (rc io.ReadCloser, size int64, err error) {
	resp, err := c.do(ctx, request{op: "download", id: id, method: http.MethodGet, path: filesPath(id, "/download"), query: url.Values{"path": {path}}})
	if err != nil {
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// DownloadTo streams path into w and returns the bytes copied. A body shorter
// than the announced size is an error.
func (c *Client) DownloadTo(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	rc, size, err := c.Download(ctx, id, path)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.Copy(w, rc)
	if err == nil && size >= 0 && n != size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return n, &sandbox.Error{Op: "download", ID: sandbox.ID(id), Err: fmt.Errorf("%w: after %d bytes: %v", sandbox.ErrUnavailable, n, err)}
	}
	return n, nil
}
