// This file implements the file calls, each delegated to the sandbox's agent.

package manager

import (
	"context"
	"io"

	"sbx/internal/agentclient"
	"sbx/internal/sandbox"
)

func (m *Manager) ReadFile(ctx context.Context, id sandbox.ID, path string, offset, limit int64) (sandbox.ReadResult, error) {
	const op = "read_file"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.ReadResult{}, err
	}
	r, err := c.ReadFile(ctx, path, offset, limit)
	return r, sandbox.Wrap(op, id, err)
}

func (m *Manager) WriteFile(ctx context.Context, id sandbox.ID, path string, content []byte, mode uint32, appendTo bool) (sandbox.FileInfo, error) {
	const op = "write_file"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	fi, err := c.WriteFile(ctx, path, content, mode, appendTo)
	return fi, sandbox.Wrap(op, id, err)
}

func (m *Manager) Stat(ctx context.Context, id sandbox.ID, path string) (sandbox.FileInfo, error) {
	const op = "stat"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	fi, err := c.Stat(ctx, path)
	return fi, sandbox.Wrap(op, id, err)
}

func (m *Manager) ListDir(ctx context.Context, id sandbox.ID, path string, depth int) ([]sandbox.FileInfo, error) {
	const op = "list_dir"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, err
	}
	fis, err := c.List(ctx, path, depth)
	return fis, sandbox.Wrap(op, id, err)
}

func (m *Manager) MakeDir(ctx context.Context, id sandbox.ID, path string) (sandbox.FileInfo, error) {
	const op = "make_dir"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	fi, err := c.MakeDir(ctx, path)
	return fi, sandbox.Wrap(op, id, err)
}

func (m *Manager) Move(ctx context.Context, id sandbox.ID, src, dst string) (sandbox.FileInfo, error) {
	const op = "move"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	fi, err := c.Move(ctx, src, dst)
	return fi, sandbox.Wrap(op, id, err)
}

func (m *Manager) Remove(ctx context.Context, id sandbox.ID, path string) error {
	const op = "remove"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return err
	}
	return sandbox.Wrap(op, id, c.Remove(ctx, path))
}

func (m *Manager) Glob(ctx context.Context, id sandbox.ID, pattern, dir string, limit int) ([]string, bool, error) {
	const op = "glob"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, false, err
	}
	out, truncated, err := c.Glob(ctx, pattern, dir, limit)
	return out, truncated, sandbox.Wrap(op, id, err)
}

// GrepRequest selects lines to find.
type GrepRequest struct {
	Pattern    string
	Path       string
	Include    string
	IgnoreCase bool
	Fixed      bool
	Limit      int
}

func (m *Manager) Grep(ctx context.Context, id sandbox.ID, req GrepRequest) ([]sandbox.GrepMatch, bool, error) {
	const op = "grep"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, false, err
	}
	out, truncated, err := c.Grep(ctx, agentclient.GrepRequest(req))
	return out, truncated, sandbox.Wrap(op, id, err)
}

func (m *Manager) Download(ctx context.Context, id sandbox.ID, path string) (io.ReadCloser, sandbox.FileInfo, error) {
	const op = "download"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, sandbox.FileInfo{}, err
	}
	rc, fi, err := c.Download(ctx, path)
	return rc, fi, sandbox.Wrap(op, id, err)
}

func (m *Manager) Upload(ctx context.Context, id sandbox.ID, path string, r io.Reader, mode uint32) (sandbox.FileInfo, error) {
	const op = "upload"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	fi, err := c.Upload(ctx, path, r, mode)
	return fi, sandbox.Wrap(op, id, err)
}
