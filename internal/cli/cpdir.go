// This file implements `sbx cp` of directories: a local directory goes up as
// a tar archive the sandbox's agent extracts; a sandbox directory comes down
// as one, extracted here by client.ExtractArchive, or written to stdout.

package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/client"
	"sbx.dev/sbx/internal/sandbox"
)

func localIsDir(p string) bool {
	if p == "-" {
		return false
	}
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// remoteIsDir reports whether loc names a directory (or a symlink to one) in
// its sandbox. Any error says no: the file copy then reports it as before.
func remoteIsDir(ctx context.Context, c *client.Client, loc location) bool {
	fi, err := c.Stat(ctx, loc.id, loc.path)
	if err == nil && fi.Type == "symlink" && fi.SymlinkTarget != "" {
		target := fi.SymlinkTarget
		if !path.IsAbs(target) && path.IsAbs(fi.Path) { // relative to the link's directory
			target = path.Join(path.Dir(fi.Path), target)
		}
		fi, err = c.Stat(ctx, loc.id, target)
	}
	return err == nil && fi.Type == "dir"
}

// contentsOf reports whether p ends in "/.": copy the directory's contents,
// not the directory.
func contentsOf(p string) bool { return p == "." || strings.HasSuffix(p, "/.") }

// remoteDirTarget is where directory name lands for remote DST p: inside p
// when p ends in / or is a directory (as cp -r does), else p itself.
func remoteDirTarget(ctx context.Context, c *client.Client, dst location, name string, contents bool) string {
	if contents {
		return dst.path
	}
	if strings.HasSuffix(dst.path, "/") || remoteIsDir(ctx, c, dst) {
		return path.Join(dst.path, name)
	}
	return dst.path
}

func uploadDir(ctx context.Context, e *env, c *client.Client, local string, dst location) (copied, error) {
	target := remoteDirTarget(ctx, c, dst, filepath.Base(filepath.Clean(local)), contentsOf(local))
	res, err := c.UploadDir(ctx, dst.id, local, target, client.UploadDirOptions{})
	if err != nil {
		return copied{}, err
	}
	if res.LocalSkipped > 0 {
		fmt.Fprintf(e.stderr, "cp: left out %d special files of %s (devices, FIFOs, sockets)\n", res.LocalSkipped, local)
	}
	warnSkipped(e, res.SkippedCount, res.Skipped)
	return copied{Path: dst.id + ":" + res.Path, Size: res.Bytes, Entries: res.Entries, Skipped: res.Skipped}, nil
}

// copyDirOut copies sandbox directory src to a local path, to stdout (as the
// tar archive), or into another sandbox.
func copyDirOut(ctx context.Context, e *env, c *client.Client, src, dst location) (copied, error) {
	name, contents := path.Base(path.Clean(src.path)), contentsOf(src.path)
	switch {
	case dst.id != "":
		rc, err := c.DownloadArchive(ctx, src.id, src.path, false)
		if err != nil {
			return copied{}, err
		}
		defer rc.Close()
		res, err := c.UploadArchive(ctx, dst.id, remoteDirTarget(ctx, c, dst, name, contents), rc, sandbox.ArchiveLimits{})
		if err != nil {
			return copied{}, err
		}
		warnSkipped(e, res.SkippedCount, res.Skipped)
		return copied{Path: dst.id + ":" + res.Path, Size: res.Bytes, Entries: res.Entries, Skipped: res.Skipped}, nil
	case dst.path == "-":
		rc, err := c.DownloadArchive(ctx, src.id, src.path, false)
		if err != nil {
			return copied{}, err
		}
		defer rc.Close()
		n, err := io.Copy(e.stdout, rc)
		if err != nil {
			return copied{}, &sandbox.Error{Op: "download_archive", ID: sandbox.ID(src.id), Err: fmt.Errorf("%w: after %d bytes: %v", sandbox.ErrUnavailable, n, err)}
		}
		return copied{Path: "-", Size: n}, nil
	}
	local := dst.path
	if fi, err := os.Stat(local); err == nil && fi.IsDir() && !contents {
		local = filepath.Join(local, name)
	}
	res, err := c.DownloadDir(ctx, src.id, src.path, local, client.ExtractLimits{})
	if err != nil {
		return copied{}, err
	}
	warnSkipped(e, res.SkippedCount, res.Skipped)
	return copied{Path: local, Size: res.Bytes, Entries: res.Entries, Skipped: res.Skipped}, nil
}

// warnSkipped tells stderr which entries an extraction left out.
func warnSkipped(e *env, n int64, skipped []openapi.ArchiveSkip) {
	for i, s := range skipped {
		if i == 10 {
			break
		}
		fmt.Fprintf(e.stderr, "cp: left out %q (%s): %s\n", s.Name, s.Type, s.Reason)
	}
	if n > 10 {
		fmt.Fprintf(e.stderr, "cp: left out %d entries in all\n", n)
	}
}
