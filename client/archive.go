// This file implements directory transfer as tar archives: the raw archive
// calls, a local directory streamed up as a tar, and a sandbox directory
// streamed down and extracted here (extract.go).

package client

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/sandbox"
)

// UploadArchive streams the tar or gzip-compressed tar r into directory dir of
// sandbox id (created when missing), where the agent extracts it under the
// rules of PUT …/files/archive. lim may lower the sandbox's caps.
func (c *Client) UploadArchive(ctx context.Context, id, dir string, r io.Reader, lim sandbox.ArchiveLimits) (*openapi.ArchiveResult, error) {
	q := url.Values{"path": {dir}}
	if lim.MaxBytes > 0 {
		q.Set("max_bytes", strconv.FormatInt(lim.MaxBytes, 10))
	}
	if lim.MaxEntries > 0 {
		q.Set("max_entries", strconv.FormatInt(lim.MaxEntries, 10))
	}
	if r == nil {
		r = http.NoBody
	}
	var res openapi.ArchiveResult
	return &res, c.call(ctx, request{op: "upload_archive", id: id, method: http.MethodPut, path: filesPath(id, "/archive"), query: q,
		raw: io.MultiReader(r)}, &res) // MultiReader hides Len: always stream
}

// DownloadArchive opens directory dir of sandbox id as a tar stream,
// gzip-compressed by the sandbox when gzip is set. An archive the sandbox
// could not finish ends in a read error, never a clean EOF. The caller closes
// the reader.
func (c *Client) DownloadArchive(ctx context.Context, id, dir string, gzip bool) (io.ReadCloser, error) {
	q := url.Values{"path": {dir}}
	if gzip {
		q.Set("gzip", "true")
	}
	resp, err := c.do(ctx, request{op: "download_archive", id: id, method: http.MethodGet, path: filesPath(id, "/archive"), query: q})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// UploadDirOptions are UploadDir's optional settings.
type UploadDirOptions struct {
	Gzip   bool // compress on the wire (worth it over a network, not a local socket)
	Limits sandbox.ArchiveLimits
}

// UploadDirResult is what UploadDir did: the sandbox's answer, and the local
// files left out (device nodes, FIFOs, sockets).
type UploadDirResult struct {
	openapi.ArchiveResult
	LocalSkipped int
}

// errUploadEnded stops UploadDir's archive writer once the daemon answered.
var errUploadEnded = errors.New("upload ended")

// UploadDir streams local directory local into directory dir of sandbox id
// as a tar archive, never held whole: its contents land directly in dir.
func (c *Client) UploadDir(ctx context.Context, id, local, dir string, o UploadDirOptions) (*UploadDirResult, error) {
	if fi, err := os.Stat(local); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", sandbox.ErrInvalid, local)
	}
	pr, pw := io.Pipe()
	type written struct {
		skipped int
		err     error
	}
	done := make(chan written, 1)
	go func() {
		var w io.Writer = pw
		var zw *gzip.Writer
		if o.Gzip {
			zw = gzip.NewWriter(pw)
			w = zw
		}
		skipped, err := WriteArchive(w, local)
		if err == nil && zw != nil {
			err = zw.Close()
		}
		pw.CloseWithError(err)
		done <- written{skipped, err}
	}()
	res, err := c.UploadArchive(ctx, id, dir, pr, o.Limits)
	pr.CloseWithError(errUploadEnded) // stops the writer if the daemon answered early
	wr := <-done
	if wr.err != nil && !errors.Is(wr.err, errUploadEnded) && err != nil {
		return nil, wr.err // reading here failed first: that is the cause
	}
	if err != nil {
		return nil, err
	}
	return &UploadDirResult{ArchiveResult: *res, LocalSkipped: wr.skipped}, nil
}

// DownloadDir streams directory dir of sandbox id down and extracts it into
// local directory local, which must not exist or be empty, under
// ExtractArchive's rules and lim's caps.
func (c *Client) DownloadDir(ctx context.Context, id, dir, local string, lim ExtractLimits) (*ExtractResult, error) {
	rc, err := c.DownloadArchive(ctx, id, dir, false)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	res, err := ExtractArchive(rc, local, lim)
	if err != nil {
		return nil, &sandbox.Error{Op: "download_archive", ID: sandbox.ID(id), Err: err}
	}
	return res, nil
}

// WriteArchive writes the contents of local directory dir to w as a tar
// archive, names relative to dir: directories, regular files and symlinks
// (kept as symlinks, never followed). Other files are left out and counted.
func WriteArchive(w io.Writer, dir string) (skipped int, err error) {
	tw := tar.NewWriter(w)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime()}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			return tw.WriteHeader(hdr)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case fi.Mode().IsRegular():
			return writeFile(tw, hdr, p, fi.Size())
		}
		skipped++
		return nil
	})
	if err != nil {
		return skipped, err
	}
	return skipped, tw.Close()
}

// writeFile adds regular file p with size bytes: exactly that many, so a file
// changing meanwhile still leaves a well-formed archive.
func writeFile(tw *tar.Writer, hdr *tar.Header, p string, size int64) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr.Typeflag, hdr.Size = tar.TypeReg, size
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.CopyN(tw, f, size)
	if err != nil && err != io.EOF {
		return err
	}
	if n < size { // shrunk meanwhile: pad
		_, err = io.CopyN(tw, zeros{}, size-n)
	}
	return err
}
