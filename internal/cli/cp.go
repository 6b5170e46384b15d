// This file implements `sbx cp`: files stream into and out of sandboxes, byte
// for byte, never held whole in memory; directories travel as tar archives,
// extracted on the far side under the archive rules (client.ExtractArchive
// here, the agent's in a sandbox).

package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/client"
)

// remoteArg is "ID:/path": an id of the sandbox shape, a colon, a path.
var remoteArg = regexp.MustCompile(`^([a-z2-7]{26}):(.*)$`)

// location is one side of a copy: a sandbox path, a local path, or "-".
type location struct {
	id, path string // id empty: local
}

func parseLocation(s string) location {
	if m := remoteArg.FindStringSubmatch(s); m != nil {
		return location{id: m[1], path: m[2]}
	}
	return location{path: s}
}

func runCp(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("cp", "[--json] SRC DST\n\nSRC and DST are local paths, - (stdin or stdout), or ID:/path in a sandbox.\nA remote DST ending in / or a local DST that is a directory receives SRC's name.\nA directory SRC is copied whole, as cp -r does (SRC/. copies its contents): as a tar\narchive, extracted on the far side without following symlinks; special files are\nleft out. A local directory DST must not exist or be empty; ID:/dir to - writes the tar.")
	jsonOut := fs.Bool("json", false, `print {"path","size"} of the copy as JSON (directories add "entries" and "skipped")`)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	if len(pos) != 2 {
		return e.misuse(fs, exitMisuse, "want SRC and DST, got %d arguments", len(pos))
	}
	src, dst := parseLocation(pos[0]), parseLocation(pos[1])
	if src.id == "" && dst.id == "" {
		return e.misuse(fs, exitMisuse, "neither SRC nor DST is in a sandbox (ID:/path)")
	}
	if (src.id != "" && src.path == "") || (dst.id != "" && dst.path == "") {
		return e.misuse(fs, exitMisuse, "a sandbox side needs a path after ID:")
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("cp", *jsonOut, exitError, err)
	}
	defer c.Close()
	var out copied
	switch {
	case src.id == "" && localIsDir(src.path):
		out, err = uploadDir(ctx, e, c, src.path, dst)
	case src.id == "":
		out, err = upload(ctx, e, c, src.path, dst)
	case remoteIsDir(ctx, c, src):
		out, err = copyDirOut(ctx, e, c, src, dst)
	case dst.id == "":
		out, err = download(ctx, e, c, src, dst.path)
	default:
		out, err = between(ctx, c, src, dst)
	}
	if err != nil {
		return e.fail("cp", *jsonOut, exitError, err)
	}
	if *jsonOut {
		e.printJSON(out)
	}
	return exitOK
}

// copied is cp's --json output. Size is the bytes of file content copied.
type copied struct {
	Path    string                `json:"path"`
	Size    int64                 `json:"size"`
	Entries int64                 `json:"entries,omitempty"` // directories only
	Skipped []openapi.ArchiveSkip `json:"skipped,omitempty"`
}

// remoteTarget puts name under dir when the remote destination ends in /.
func remoteTarget(p, name string) string {
	if strings.HasSuffix(p, "/") && name != "" && name != "-" {
		return p + name
	}
	return p
}

func upload(ctx context.Context, e *env, c *client.Client, local string, dst location) (copied, error) {
	var r io.Reader = e.stdin
	var mode uint32
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return copied{}, err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return copied{}, err
		}
		if fi.IsDir() {
			return copied{}, fmt.Errorf("%s is a directory; copy files one at a time", local)
		}
		r, mode = f, uint32(fi.Mode().Perm())
	}
	target := remoteTarget(dst.path, filepath.Base(local))
	fi, err := c.Upload(ctx, dst.id, target, r, mode)
	if err != nil {
		return copied{}, err
	}
	return copied{Path: dst.id + ":" + fi.Path, Size: fi.Size}, nil
}

func download(ctx context.Context, e *env, c *client.Client, src location, local string) (copied, error) {
	if local == "-" {
		n, err := c.DownloadTo(ctx, src.id, src.path, e.stdout)
		return copied{Path: "-", Size: n}, err
	}
	if fi, err := os.Stat(local); err == nil && fi.IsDir() {
		local = filepath.Join(local, path.Base(src.path))
	}
	// Write beside the target, then rename: a failed copy leaves no half file.
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".sbx-*")
	if err != nil {
		return copied{}, err
	}
	n, err := c.DownloadTo(ctx, src.id, src.path, tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), local)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return copied{}, err
	}
	return copied{Path: local, Size: n}, nil
}

// between copies from one sandbox to another (or the same), streaming.
func between(ctx context.Context, c *client.Client, src, dst location) (copied, error) {
	rc, _, err := c.Download(ctx, src.id, src.path)
	if err != nil {
		return copied{}, err
	}
	defer rc.Close()
	fi, err := c.Upload(ctx, dst.id, remoteTarget(dst.path, path.Base(src.path)), rc, 0)
	if err != nil {
		return copied{}, err
	}
	return copied{Path: dst.id + ":" + fi.Path, Size: fi.Size}, nil
}
