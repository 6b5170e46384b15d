// This file implements the file calls, each delegated to the sandbox's agent
// and audited with its path, never its contents.

package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/sandbox"
)

func (m *Manager) ReadFile(ctx context.Context, id sandbox.ID, path string, offset, limit int64) (_ sandbox.ReadResult, retErr error) {
	const op = "read_file"
	defer func() { m.audit(ctx, id, op, path, fmt.Sprintf("offset=%d limit=%d", offset, limit), retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.ReadResult{}, err
	}
	r, err := c.ReadFile(ctx, path, offset, limit)
	return r, m.callErr(op, id, err)
}

func (m *Manager) WriteFile(ctx context.Context, id sandbox.ID, path string, content []byte, mode uint32, appendTo bool) (_ sandbox.FileInfo, retErr error) {
	const op = "write_file"
	defer func() {
		m.audit(ctx, id, op, path, fmt.Sprintf("bytes=%d mode=%#o append=%t", len(content), mode, appendTo), retErr)
	}()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	fi, err := c.WriteFile(ctx, path, content, mode, appendTo)
	return fi, m.callErr(op, id, err)
}

func (m *Manager) Stat(ctx context.Context, id sandbox.ID, path string) (_ sandbox.FileInfo, retErr error) {
	const op = "stat"
	defer func() { m.audit(ctx, id, op, path, "", retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	fi, err := c.Stat(ctx, path)
	return fi, m.callErr(op, id, err)
}

func (m *Manager) ListDir(ctx context.Context, id sandbox.ID, path string, depth int) (_ []sandbox.FileInfo, retErr error) {
	const op = "list_dir"
	defer func() { m.audit(ctx, id, op, path, fmt.Sprintf("depth=%d", depth), retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, err
	}
	fis, err := c.List(ctx, path, depth)
	return fis, m.callErr(op, id, err)
}

func (m *Manager) MakeDir(ctx context.Context, id sandbox.ID, path string) (_ sandbox.FileInfo, retErr error) {
	const op = "make_dir"
	defer func() { m.audit(ctx, id, op, path, "", retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	fi, err := c.MakeDir(ctx, path)
	return fi, m.callErr(op, id, err)
}

func (m *Manager) Move(ctx context.Context, id sandbox.ID, src, dst string) (_ sandbox.FileInfo, retErr error) {
	const op = "move"
	defer func() { m.audit(ctx, id, op, src, "to "+clip(dst, maxAuditDetail-3), retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	fi, err := c.Move(ctx, src, dst)
	return fi, m.callErr(op, id, err)
}

func (m *Manager) Remove(ctx context.Context, id sandbox.ID, path string) (retErr error) {
	const op = "remove"
	defer func() { m.audit(ctx, id, op, path, "", retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return err
	}
	return m.callErr(op, id, c.Remove(ctx, path))
}

func (m *Manager) Glob(ctx context.Context, id sandbox.ID, pattern, dir string, limit int) (_ []string, _ bool, retErr error) {
	const op = "glob"
	defer func() { m.audit(ctx, id, op, dir, "pattern "+clip(pattern, maxAuditDetail-8), retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, false, err
	}
	out, truncated, err := c.Glob(ctx, pattern, dir, limit)
	return out, truncated, m.callErr(op, id, err)
}

// GrepRequest selects lines to find.
type GrepRequest = agentclient.GrepRequest

// Grep's audit record names the path searched, not the pattern: a pattern may be
// a secret looked for.
func (m *Manager) Grep(ctx context.Context, id sandbox.ID, req GrepRequest) (_ []sandbox.GrepMatch, _ bool, retErr error) {
	const op = "grep"
	defer func() { m.audit(ctx, id, op, req.Path, "", retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, false, err
	}
	out, truncated, err := c.Grep(ctx, req)
	return out, truncated, m.callErr(op, id, err)
}

// Download's audit record says whether the transfer began; the caller reads on.
func (m *Manager) Download(ctx context.Context, id sandbox.ID, path string) (_ io.ReadCloser, fi sandbox.FileInfo, retErr error) {
	const op = "download"
	defer func() { m.audit(ctx, id, op, path, fmt.Sprintf("bytes=%d", fi.Size), retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, sandbox.FileInfo{}, err
	}
	rc, fi, err := c.Download(ctx, path)
	return rc, fi, m.callErr(op, id, err)
}

// Upload streams r into path of sandbox id, replacing the file. size is r's
// length when the caller knows it, else -1. One upload may not exceed the
// sandbox's disk quota: a size above it fails with ErrTooLarge before a byte
// is sent, and a stream that passes it is cut there, which makes the agent
// remove the partial file.
func (m *Manager) Upload(ctx context.Context, id sandbox.ID, path string, r io.Reader, size int64, mode uint32) (fi sandbox.FileInfo, retErr error) {
	const op = "upload"
	defer func() { m.audit(ctx, id, op, path, fmt.Sprintf("bytes=%d mode=%#o", fi.Size, mode), retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	body, err := m.uploadBody(ctx, op, id, r, size)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	fi, err = c.Upload(ctx, path, body, mode)
	if err != nil {
		return sandbox.FileInfo{}, body.failed(ctx, m.callErr(op, id, err))
	}
	return fi, nil
}

// uploadBody bounds upload r into sandbox id by its disk quota; see Upload.
func (m *Manager) uploadBody(ctx context.Context, op string, id sandbox.ID, r io.Reader, size int64) (*cappedBody, error) {
	sb, err := m.store.GetSandbox(ctx, id)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, notFound(op, id)
	}
	if err != nil {
		return nil, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	limit := sb.Spec.DiskBytes
	if limit <= 0 { // a record from before disk_mb was kept
		limit = m.policy.DefaultDiskBytes
	}
	b := &cappedBody{r: r, max: limit, op: op, id: id}
	if size > limit {
		b.size = size
		return nil, b.tooLarge()
	}
	return b, nil
}

// cappedBody passes an upload through until it passes max bytes, then fails
// every read; hit says it did. Reads come from the transport's goroutine.
type cappedBody struct {
	r    io.Reader
	n    int64
	max  int64
	size int64 // the announced length, when it alone was too large
	hit  atomic.Bool
	op   string
	id   sandbox.ID

	mu  sync.Mutex
	src error // guarded by mu: the caller's stream failed (not EOF)
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.hit.Load() {
		return 0, b.tooLarge()
	}
	if rem := b.max - b.n + 1; int64(len(p)) > rem {
		p = p[:rem] // one byte past the cap tells a stream that ends there from a longer one
	}
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		b.src = err
		b.mu.Unlock()
	}
	b.n += int64(n)
	if b.n > b.max {
		b.hit.Store(true)
		return n - int(b.n-b.max), b.tooLarge()
	}
	return n, err
}

// failed is the error of an upload the agent did not finish (err): past the
// cap it is too large; when the caller's own stream broke off (too slow, or
// the connection gone) it says so, rather than blaming the agent whose
// stream was cut for it.
func (b *cappedBody) failed(ctx context.Context, err error) error {
	if b.hit.Load() {
		return b.tooLarge()
	}
	b.mu.Lock()
	src := b.src
	b.mu.Unlock()
	switch {
	case src == nil:
		return err
	case ctx.Err() != nil:
		return &sandbox.Error{Op: b.op, ID: b.id, Err: fmt.Errorf("reading the upload: the caller went away: %w", context.Cause(ctx))}
	default:
		return &sandbox.Error{Op: b.op, ID: b.id, Err: fmt.Errorf("reading the upload: %w", src)}
	}
}

// tooLarge is the error of an upload past the cap, naming it and the sandbox.
func (b *cappedBody) tooLarge() error {
	what := "the upload is larger than"
	if b.size > 0 {
		what = fmt.Sprintf("the upload's %d bytes are more than", b.size)
	}
	return &sandbox.Error{Op: b.op, ID: b.id, Err: fmt.Errorf("%w: %s the sandbox's disk quota (disk_mb %d, %d bytes): one upload may not exceed it",
		sandbox.ErrTooLarge, what, b.max/sandbox.MiB, b.max)}
}
