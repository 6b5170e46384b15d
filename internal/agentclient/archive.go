// This file implements directory transfer as tar archives: the body streams
// between the caller and the agent's /files/archive routes untouched, never
// buffered or decompressed here.

package agentclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	agentfiles "sbx.dev/sbx/api/agent/files"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/tarsafe"
)

// UploadArchive streams the tar or gzip-compressed tar r to the agent, which
// extracts it beneath directory dir (see the agent's files.Extract for the
// rules). lim may lower the agent's caps; its QuotaBytes bounds what is
// written.
func (c *Client) UploadArchive(ctx context.Context, dir string, r io.Reader, lim sandbox.ArchiveLimits) (sandbox.ArchiveResult, error) {
	const op = "upload_archive"
	q := url.Values{"path": {dir}}
	if lim.MaxBytes > 0 {
		q.Set("max_bytes", strconv.FormatInt(lim.MaxBytes, 10))
	}
	if lim.MaxEntries > 0 {
		q.Set("max_entries", strconv.FormatInt(lim.MaxEntries, 10))
	}
	if lim.QuotaBytes > 0 {
		q.Set("quota_bytes", strconv.FormatInt(lim.QuotaBytes, 10))
	}
	resp, err := c.do(ctx, op, http.MethodPost, "/files/archive", q, r, "application/x-tar")
	if err != nil {
		return sandbox.ArchiveResult{}, err
	}
	defer resp.Body.Close()
	var out agentfiles.ArchiveResult
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&out); err != nil ||
		out.Entries < 0 || out.Bytes < 0 || out.SkippedCount < int64(len(out.Skipped)) {
		return sandbox.ArchiveResult{}, &sandbox.Error{Op: op, ID: c.id, Err: fmt.Errorf("%w: malformed archive answer", sandbox.ErrAgentLost)}
	}
	res := sandbox.ArchiveResult{Path: out.Path, Entries: out.Entries, Bytes: out.Bytes, SkippedCount: out.SkippedCount}
	for _, s := range out.Skipped[:min(len(out.Skipped), tarsafe.MaxSkipReport)] {
		res.Skipped = append(res.Skipped, sandbox.ArchiveSkip{Name: s.Name, Type: s.Type, Reason: s.Reason})
	}
	return res, nil
}

// DownloadArchive streams directory dir out of the sandbox as a tar archive
// (gzip-compressed by the agent when gzip is set); the caller closes it. An
// archive the agent could not finish ends in a read error, never in a clean
// EOF.
func (c *Client) DownloadArchive(ctx context.Context, dir string, gzip bool) (io.ReadCloser, error) {
	const op = "download_archive"
	q := url.Values{"path": {dir}}
	if gzip {
		q.Set("gzip", "true")
	}
	resp, err := c.do(ctx, op, http.MethodGet, "/files/archive", q, nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}
