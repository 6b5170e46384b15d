// This file implements directory transfer as tar archives, delegated to the
// sandbox's agent: the archive streams through untouched, never buffered or
// decompressed in the daemon, and is audited with its path, never its
// contents.

package manager

import (
	"context"
	"fmt"
	"io"

	"sbx.dev/sbx/internal/sandbox"
)

// UploadArchive streams the tar or gzip-compressed tar r to sandbox id's agent,
// which extracts it beneath directory dir; lim may lower the agent's caps.
// size is r's length when the caller knows it, else -1. Like Upload, one
// archive may not exceed the sandbox's disk quota, on the wire or written
// out: the agent gets the quota as a cap of its own. Its audit record gives
// what was written.
func (m *Manager) UploadArchive(ctx context.Context, id sandbox.ID, dir string, r io.Reader, size int64, lim sandbox.ArchiveLimits) (res sandbox.ArchiveResult, retErr error) {
	const op = "upload_archive"
	defer func() {
		m.audit(ctx, id, op, dir, fmt.Sprintf("entries=%d bytes=%d skipped=%d", res.Entries, res.Bytes, res.SkippedCount), retErr)
	}()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.ArchiveResult{}, err
	}
	body, err := m.uploadBody(ctx, op, id, r, size)
	if err != nil {
		return sandbox.ArchiveResult{}, err
	}
	lim.QuotaBytes = body.max
	res, err = c.UploadArchive(ctx, dir, body, lim)
	if err != nil {
		return sandbox.ArchiveResult{}, body.failed(ctx, m.callErr(op, id, err))
	}
	return res, nil
}

// DownloadArchive opens directory dir of sandbox id as a tar stream (gzip-
// compressed by the agent when gzip is set); the caller reads and closes it.
// Its audit record says whether the transfer began.
func (m *Manager) DownloadArchive(ctx context.Context, id sandbox.ID, dir string, gzip bool) (_ io.ReadCloser, retErr error) {
	const op = "download_archive"
	defer func() { m.audit(ctx, id, op, dir, fmt.Sprintf("gzip=%t", gzip), retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, err
	}
	rc, err := c.DownloadArchive(ctx, dir, gzip)
	return rc, m.callErr(op, id, err)
}
