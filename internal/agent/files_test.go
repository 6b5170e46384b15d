package agent_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/sandbox"
)

func TestFiles(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{})
	ctx := t.Context()
	fi, err := a.cl.WriteFile(ctx, "src/main.go", []byte("package main\nfunc main() {}\n// TODO fix\n"), 0o600, false)
	if err != nil || fi.Path != "/src/main.go" || fi.Type != "file" || fi.Mode != 0o600 || fi.Size != 40 {
		t.Fatalf("WriteFile = %+v, %v", fi, err)
	}
	if _, err := a.cl.WriteFile(ctx, "/src/main.go", []byte("// todo again\n"), 0, true); err != nil {
		t.Fatal(err)
	}
	a.cl.WriteFile(ctx, "/src/lib/util.go", []byte("package lib // TODO\n"), 0, false)
	a.cl.WriteFile(ctx, "/src/lib/blob.bin", []byte("TODO\x00binary"), 0, false)
	a.cl.WriteFile(ctx, "/README.md", []byte("todo: docs\n"), 0, false)

	r, err := a.cl.ReadFile(ctx, "/src/main.go", 8, 4)
	if err != nil || string(r.Content) != "main" || r.Size != 54 || r.EOF {
		t.Errorf("ReadFile(offset 8, limit 4) = %+v, %v", r, err)
	}
	r, err = a.cl.ReadFile(ctx, "/src/main.go", 40, 0)
	if err != nil || string(r.Content) != "// todo again\n" || !r.EOF {
		t.Errorf("ReadFile(offset 40) = %+v, %v", r, err)
	}
	if _, err := a.cl.ReadFile(ctx, "/src", 0, 0); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("ReadFile(dir) = %v, want invalid", err)
	}
	if _, err := a.cl.ReadFile(ctx, "/nope", 0, 0); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("ReadFile(missing) = %v, want not found", err)
	}
	if err := syscallMkfifo(filepath.Join(a.root, "fifo")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.cl.ReadFile(ctx, "/fifo", 0, 0); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("ReadFile(fifo) = %v, want invalid (and no hang)", err)
	}
	if _, err := a.cl.ReadFile(ctx, "/a\x00b", 0, 0); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("ReadFile(NUL) = %v, want invalid", err)
	}
	if _, err := a.cl.ReadFile(ctx, strings.Repeat("a/", 3000), 0, 0); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("ReadFile(long path) = %v, want invalid", err)
	}

	paths, truncated, err := a.cl.Glob(ctx, "**/*.go", "/", 0)
	if want := []string{"/src/lib/util.go", "/src/main.go"}; err != nil || truncated || !slices.Equal(paths, want) {
		t.Errorf("Glob(**/*.go) = %q, %v, %v; want %q", paths, truncated, err, want)
	}
	paths, truncated, err = a.cl.Glob(ctx, "*", "/src", 1)
	if err != nil || !truncated || len(paths) != 1 {
		t.Errorf("Glob(*, limit 1) = %q, %v, %v", paths, truncated, err)
	}
	ms, _, err := a.cl.Grep(ctx, agentclientGrep("todo", "/", "", true))
	if err != nil || len(ms) != 4 {
		t.Errorf("Grep(todo, ignore case) = %+v, %v; want 4 matches, the binary file skipped", ms, err)
	}
	ms, _, err = a.cl.Grep(ctx, agentclientGrep("TODO", "/src", "*.go", false))
	if err != nil || len(ms) != 2 || ms[0].Path != "/src/lib/util.go" || ms[1].Line != 3 {
		t.Errorf("Grep(TODO, *.go) = %+v, %v", ms, err)
	}

	// Streamed upload and download.
	big := bytes.Repeat([]byte("0123456789"), 500000)
	fi, err = a.cl.Upload(ctx, "/up/big.txt", bytes.NewReader(big), 0o640)
	if err != nil || fi.Size != int64(len(big)) || fi.Mode != 0o640 {
		t.Fatalf("Upload = %+v, %v", fi, err)
	}
	rc, fi, err := a.cl.Download(ctx, "/up/big.txt")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, big) || fi.Size != int64(len(big)) {
		t.Errorf("Download: %d bytes, info %+v", len(got), fi)
	}
	if _, _, err := a.cl.Download(ctx, "/up"); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("Download(dir) = %v, want invalid", err)
	}
	if _, err := a.cl.MakeDir(ctx, "/up"); !errors.Is(err, sandbox.ErrExists) {
		t.Errorf("MakeDir(existing) = %v, want exists", err)
	}
	ls, err := a.cl.List(ctx, "/up", 1)
	if err != nil || len(ls) != 1 || ls[0].Name != "big.txt" {
		t.Errorf("List = %+v, %v", ls, err)
	}
}

// TestPathEscape plants escapes in the root and checks that no call reads or
// writes outside it (SECURITY FS-01, FS-02, FS-03, FS-05).
func TestPathEscape(t *testing.T) {
	outside := t.TempDir()
	canary := filepath.Join(outside, "canary")
	os.WriteFile(canary, []byte("canary"), 0o644)
	a := startAgent(t, boot.AgentConfig{})
	os.Symlink("/etc", filepath.Join(a.root, "etc-link"))           // absolute symlink to a host dir
	os.Symlink(canary, filepath.Join(a.root, "canary-link"))        // final component to a host file
	os.Symlink("/", filepath.Join(a.root, "r"))                     // intermediate symlink to /
	os.Symlink(outside, filepath.Join(a.root, "out"))               // parent leading out of the root
	os.Symlink("../../../../../..", filepath.Join(a.root, "updir")) // relative climb
	ctx := t.Context()

	for _, p := range []string{"../../etc/passwd", "/../../../etc/passwd", "/etc-link/passwd", "/canary-link", "/r" + canary, "/out/canary", "/updir" + canary} {
		r, err := a.cl.ReadFile(ctx, p, 0, 0)
		if err == nil {
			t.Errorf("ReadFile(%q) = %q, want an error", p, r.Content)
			continue
		}
		if !errors.Is(err, sandbox.ErrDenied) && !errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("ReadFile(%q) = %v, want denied, not found or invalid", p, err)
		}
		if strings.Contains(err.Error(), a.root) {
			t.Errorf("ReadFile(%q) error names the host path: %v", p, err)
		}
	}
	for _, p := range []string{"/canary-link", "/r" + canary, "/out/canary", "/out/new", "/r/tmp/x", "/updir" + outside + "/new"} {
		if _, err := a.cl.WriteFile(ctx, p, []byte("pwned"), 0, false); err == nil {
			t.Errorf("WriteFile(%q) succeeded", p)
		}
		// An upload replaces the entry itself (a link inside the root is
		// replaced by a file), never what it points to.
		if _, err := a.cl.Upload(ctx, p, strings.NewReader("pwned"), 0); err == nil && p != "/canary-link" {
			t.Errorf("Upload(%q) succeeded", p)
		}
		if _, err := a.cl.MakeDir(ctx, p+"d"); err == nil && p != "/canary-link" {
			t.Errorf("MakeDir(%q) succeeded", p+"d")
		}
		if _, err := a.cl.Move(ctx, "/canary-link", p+"m"); err == nil && !strings.HasPrefix(p, "/canary-link") {
			t.Errorf("Move(to %q) succeeded", p+"m")
		}
		a.cl.Remove(ctx, p)
	}
	if _, err := a.cl.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}, Cwd: "/out"}, false, nil); err == nil {
		t.Errorf("Exec(cwd /out) succeeded")
	}
	if b, err := os.ReadFile(canary); err != nil || string(b) != "canary" {
		t.Errorf("canary = %q, %v; want it untouched", b, err)
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 {
		t.Errorf("outside the root: %d entries, want only the canary", len(ents))
	}
	if _, err := os.Stat("/tmp/x"); err == nil {
		t.Errorf("/tmp/x was created on the host")
	}
	// "..' resolves inside: /../../f is /f of the root.
	if fi, err := a.cl.WriteFile(ctx, "/../../inside", []byte("ok"), 0, false); err != nil || fi.Path != "/inside" {
		t.Errorf("WriteFile(/../../inside) = %+v, %v", fi, err)
	}
}

// TestRootSlash checks plain-path mode (Root "/", as in the native jail) with
// read-only calls on the host's files.
func TestRootSlash(t *testing.T) {
	a := startAgent(t, boot.AgentConfig{Root: "/", Workdir: "/etc", OutputDir: t.TempDir()})
	want, err := os.ReadFile("/etc/hostname")
	if err != nil {
		t.Skip("requires /etc/hostname")
	}
	r, err := a.cl.ReadFile(t.Context(), "hostname", 0, 0)
	if err != nil || !bytes.Equal(r.Content, want) || r.Path != "/etc/hostname" {
		t.Errorf("ReadFile(hostname) = %+v, %v", r, err)
	}
	fi, err := a.cl.Stat(t.Context(), "/etc/hostname")
	if err != nil || fi.Type != "file" {
		t.Errorf("Stat = %+v, %v", fi, err)
	}
	res, err := a.cl.Exec(t.Context(), sandbox.ExecRequest{Argv: []string{"pwd"}}, false, nil)
	if err != nil || string(res.Stdout) != "/etc\n" {
		t.Errorf("Exec(pwd) = %+v, %v", res, err)
	}
}
