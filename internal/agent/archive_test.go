package agent_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

// ent is one entry of a test archive.
type ent struct {
	name string
	typ  byte // tar.Type*; 0 means a regular file
	body string
	mode int64
	link string
	size int64 // announced size when body is empty and size > 0 (the body is cut short)
}

func file(name, body string) ent { return ent{name: name, typ: tar.TypeReg, body: body, mode: 0o644} }
func dir(name string) ent        { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeSymlink, link: target, mode: 0o777}
}
func hardlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeLink, link: target, mode: 0o644}
}

func makeTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: e.mode, Linkname: e.link, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if typ == tar.TypeChar || typ == tar.TypeBlock {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("WriteHeader(%q): %v", e.name, err)
		}
		if typ == tar.TypeReg {
			io.WriteString(tw, e.body)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gzipped(b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

// snapshot lists every entry under dir on the host (type, mode, content or
// target), to compare before and after.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatalf("walking %s: %v", p, err)
		}
		fi, _ := d.Info()
		rel, _ := filepath.Rel(dir, p)
		desc := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			desc += " " + string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		}
		out[rel] = desc
		return nil
	})
	return out
}

func TestArchiveRoundTrip(t *testing.T) {
	testutil.CheckLeaks(t)
	a := startAgent(t, boot.AgentConfig{})
	ctx := t.Context()
	src := filepath.Join(a.root, "src")
	blob := make([]byte, 3<<20+17)
	rand.Read(blob)
	for _, d := range []string{"src/empty", "src/a/b/c", "src/private"} {
		os.MkdirAll(filepath.Join(a.root, d), 0o755)
	}
	os.Chmod(filepath.Join(src, "private"), 0o700)
	os.WriteFile(filepath.Join(src, "blob.bin"), blob, 0o644)
	os.WriteFile(filepath.Join(src, "a/b/c/run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.WriteFile(filepath.Join(src, "private/key"), []byte("secret"), 0o600)
	os.WriteFile(filepath.Join(src, "a/empty.txt"), nil, 0o640)
	os.Chmod(filepath.Join(src, "a/empty.txt"), 0o640)
	os.Symlink("../blob.bin", filepath.Join(src, "a/rel-link"))
	os.Symlink("/etc/passwd", filepath.Join(src, "abs-link"))
	os.Symlink("nowhere", filepath.Join(src, "dangling"))
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "outside.txt"), []byte("outside"), 0o644)
	os.Symlink(outside, filepath.Join(src, "out-link")) // must travel as a symlink, never followed
	if err := syscallMkfifo(filepath.Join(src, "fifo")); err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, src)
	delete(want, "fifo") // special files are left out

	for _, gz := range []bool{false, true} {
		rc, err := a.cl.DownloadArchive(ctx, "/src", gz)
		if err != nil {
			t.Fatalf("DownloadArchive(gzip %v) = %v", gz, err)
		}
		body, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if gz != (body[0] == 0x1f && body[1] == 0x8b) {
			t.Errorf("DownloadArchive(gzip %v) starts with % x", gz, body[:2])
		}
		dst := "/dst-plain"
		if gz {
			dst = "/dst-gzip"
		}
		res, err := a.cl.UploadArchive(ctx, dst, bytes.NewReader(body), sandbox.ArchiveLimits{})
		if err != nil {
			t.Fatalf("UploadArchive(%s) = %v", dst, err)
		}
		if res.Path != dst || res.Bytes != int64(len(blob))+6+18 || res.SkippedCount != 0 {
			t.Errorf("UploadArchive(%s) = %+v", dst, res)
		}
		got := snapshot(t, filepath.Join(a.root, dst))
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s%s: %q after the round trip, want %q", dst, k, got[k], v)
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				t.Errorf("%s: unexpected %s after the round trip", dst, k)
			}
		}
	}
	if _, err := a.cl.DownloadArchive(ctx, "/src/blob.bin", false); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("DownloadArchive(file) = %v, want invalid", err)
	}
	if _, err := a.cl.DownloadArchive(ctx, "/missing", false); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("DownloadArchive(missing) = %v, want not found", err)
	}
}

// TestArchiveRules checks extraction's rules (SECURITY FS-07): every unsafe
// archive fails, naming the entry, and leaves the destination exactly as it
// was, the files it had replaced put back; nothing outside changes.
func TestArchiveRules(t *testing.T) {
	testutil.CheckLeaks(t)
	a := startAgent(t, boot.AgentConfig{ArchiveMaxEntries: 50})
	ctx := t.Context()
	outside := t.TempDir()
	canary := filepath.Join(outside, "canary")
	os.WriteFile(canary, []byte("canary"), 0o644)
	dest := filepath.Join(a.root, "dest")
	os.MkdirAll(filepath.Join(dest, "old"), 0o755)
	os.WriteFile(filepath.Join(dest, "keep.txt"), []byte("old"), 0o644)
	os.WriteFile(filepath.Join(dest, "old/inner.txt"), []byte("old inner"), 0o600)
	os.WriteFile(filepath.Join(dest, "old/other.txt"), []byte("untouched"), 0o600)
	os.Symlink(outside, filepath.Join(dest, "planted"))  // a symlink the sandbox made
	os.Symlink("/", filepath.Join(dest, "planted-root")) // and one to its root
	before := snapshot(t, dest)
	outBefore := snapshot(t, outside)

	// Each archive first does harmless work (replacing a file that was there,
	// adding files and directories), then breaks a rule.
	prelude := []ent{file("keep.txt", "new"), dir("fresh/"), file("fresh/a.txt", "a"), file("old/new.txt", "n"), file("old/inner.txt", "overwritten")}
	deep := strings.Repeat("d/", 65) + "f"
	cases := []struct {
		name  string
		ents  []ent
		class error
		msg   string
	}{
		{"dot-dot", []ent{file("../escape.txt", "x")}, sandbox.ErrInvalid, `entry "../escape.txt": names with '..'`},
		{"dot-dot inside", []ent{file("old/../../escape.txt", "x")}, sandbox.ErrInvalid, `names with '..'`},
		{"absolute", []ent{file(canary, "pwned")}, sandbox.ErrInvalid, "absolute names are not extracted"},
		{"through an archive symlink", []ent{symlink("link", outside), file("link/canary", "pwned")}, sandbox.ErrInvalid, `entry "link/canary": '/dest/link' is a symlink`},
		{"through an archive symlink to /", []ent{symlink("r", "/"), dir("r/tmp/"), file("r"+canary, "pwned")}, sandbox.ErrInvalid, "is a symlink"},
		{"through a planted symlink", []ent{file("planted/canary", "pwned")}, sandbox.ErrInvalid, `'/dest/planted' is a symlink`},
		{"through a planted symlink to /", []ent{file("planted-root"+canary, "pwned")}, sandbox.ErrInvalid, "is a symlink"},
		{"hardlink outside", []ent{hardlink("h", "../keep.txt")}, sandbox.ErrInvalid, "hardlink target"},
		{"hardlink absolute", []ent{hardlink("h", canary)}, sandbox.ErrInvalid, "absolute names"},
		{"hardlink to a file already there", []ent{hardlink("h", "old/other.txt")}, sandbox.ErrInvalid, "is not a file this archive extracted"},
		{"hardlink through a symlink", []ent{symlink("l", outside), hardlink("h", "l/canary")}, sandbox.ErrInvalid, "is not a file this archive extracted"},
		{"hardlink through a planted symlink", []ent{hardlink("h", "planted/canary")}, sandbox.ErrInvalid, "is not a file this archive extracted"},
		{"hardlink to a symlink", []ent{symlink("l", canary), hardlink("h", "l")}, sandbox.ErrInvalid, "is not a file this archive extracted"},
		{"file over a directory", []ent{file("old", "x")}, sandbox.ErrExists, "a directory exists at '/dest/old'"},
		{"directory under a file", []ent{file("f", "x"), file("f/g", "y")}, sandbox.ErrExists, "exists and is not a directory"},
		{"too deep", []ent{file(deep, "x")}, sandbox.ErrTooLarge, "levels deep; the cap is 64 (max_depth)"},
		{"long component", []ent{file(strings.Repeat("n", 256), "x")}, sandbox.ErrTooLarge, "(max_name_bytes)"},
		{"long name", []ent{file(strings.Repeat("n/", 2100)+"f", "x")}, sandbox.ErrTooLarge, "(max_name_bytes)"},
		{"too many entries", manyFiles(60), sandbox.ErrTooLarge, "more than 50 entries"},
		{"too many directories", []ent{file("x/"+strings.Repeat("d/", 50)+"f", "x")}, sandbox.ErrTooLarge, "more than 50 entries"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, compress := range []bool{false, true} {
				body := makeTar(t, append(slices.Clone(prelude), tc.ents...)...)
				if compress {
					body = gzipped(body)
				}
				res, err := a.cl.UploadArchive(ctx, "/dest", bytes.NewReader(body), sandbox.ArchiveLimits{})
				if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "testsandbox") {
					t.Errorf("UploadArchive(gzip %v) = %+v, %v; want %v naming %q and the sandbox", compress, res, err, tc.class, tc.msg)
				}
				if got := snapshot(t, dest); !equalMaps(got, before) {
					t.Errorf("after the failed extraction (gzip %v) the destination is\n%v\nwant\n%v", compress, got, before)
				}
				if got := snapshot(t, outside); !equalMaps(got, outBefore) {
					t.Errorf("outside the root changed: %v", got)
				}
			}
		})
	}
	// A destination the extraction created goes too.
	if _, err := a.cl.UploadArchive(ctx, "/new/deeper", bytes.NewReader(makeTar(t, file("a", "a"), file("../b", "b"))), sandbox.ArchiveLimits{}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("UploadArchive(/new/deeper) = %v, want invalid", err)
	}
	if _, err := os.Lstat(filepath.Join(a.root, "new")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("/new after a failed extraction that created it: %v", err)
	}
	// Positive control: the prelude alone extracts, replacing keep.txt.
	res, err := a.cl.UploadArchive(ctx, "/dest", bytes.NewReader(makeTar(t, prelude...)), sandbox.ArchiveLimits{})
	if err != nil || res.Entries != int64(len(prelude)) {
		t.Fatalf("UploadArchive(prelude) = %+v, %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "keep.txt")); string(b) != "new" {
		t.Errorf("keep.txt = %q after extraction, want %q", b, "new")
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "old/inner.txt")); string(b) != "overwritten" {
		t.Errorf("old/inner.txt = %q after extraction, want %q", b, "overwritten")
	}
	if ents, _ := filepath.Glob(filepath.Join(dest, ".sbx-*")); len(ents) != 0 {
		t.Errorf("extraction left %v behind", ents)
	}
}

func manyFiles(n int) []ent {
	var out []ent
	for i := range n {
		out = append(out, file("many/f"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26)), "x"))
	}
	return out
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestArchiveConfines checks what a valid but hostile archive becomes: the
// symlink is replaced, not written through; special bits and devices go.
func TestArchiveConfines(t *testing.T) {
	testutil.CheckLeaks(t)
	a := startAgent(t, boot.AgentConfig{})
	ctx := t.Context()
	outside := t.TempDir()
	canary := filepath.Join(outside, "canary")
	os.WriteFile(canary, []byte("canary"), 0o644)
	body := makeTar(t,
		symlink("c", canary), file("c", "replaced"), // a file after a symlink of the same name
		symlink("keep-link", canary),
		ent{name: "suid", typ: tar.TypeReg, body: "x", mode: 0o4755},
		ent{name: "sgid", typ: tar.TypeReg, body: "x", mode: 0o2750},
		ent{name: "sticky/", typ: tar.TypeDir, mode: 0o1777},
		ent{name: "locked/", typ: tar.TypeDir, mode: 0o000},
		file("locked/inside", "reachable"),
		ent{name: "null2", typ: tar.TypeChar, mode: 0o666},
		ent{name: "sda", typ: tar.TypeBlock, mode: 0o660},
		ent{name: "pipe", typ: tar.TypeFifo, mode: 0o644},
		ent{name: "vol", typ: 'V'},
		file("orig", "linked"), hardlink("alias", "orig"),
	)
	res, err := a.cl.UploadArchive(ctx, "/x", bytes.NewReader(body), sandbox.ArchiveLimits{})
	if err != nil {
		t.Fatalf("UploadArchive = %v", err)
	}
	if res.SkippedCount != 4 || len(res.Skipped) != 4 || res.Skipped[0].Name != "null2" || res.Skipped[0].Type != "char device" ||
		res.Skipped[2].Reason != "FIFOs are not extracted" {
		t.Errorf("skipped = %d %+v, want the char and block devices, the FIFO and the volume header", res.SkippedCount, res.Skipped)
	}
	if b, _ := os.ReadFile(canary); string(b) != "canary" {
		t.Errorf("the canary outside the root = %q", b)
	}
	x := filepath.Join(a.root, "x")
	if fi, err := os.Lstat(filepath.Join(x, "c")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("c = %v, %v; want the regular file that replaced the symlink", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(x, "keep-link")); err != nil || l != canary {
		t.Errorf("keep-link = %q, %v; want a symlink kept as given", l, err)
	}
	for name, want := range map[string]fs.FileMode{"suid": 0o755, "sgid": 0o750, "sticky": fs.ModeDir | 0o777, "locked": fs.ModeDir | 0o700} {
		if fi, err := os.Lstat(filepath.Join(x, name)); err != nil || fi.Mode() != want {
			t.Errorf("mode of %s = %v, %v; want %v", name, fi.Mode(), err, want)
		}
	}
	for _, name := range []string{"null2", "sda", "pipe", "vol"} {
		if _, err := os.Lstat(filepath.Join(x, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists after extraction: %v", name, err)
		}
	}
	o, _ := os.Stat(filepath.Join(x, "orig"))
	l, _ := os.Stat(filepath.Join(x, "alias"))
	if o == nil || l == nil || !os.SameFile(o, l) {
		t.Errorf("alias is not a hardlink of orig")
	}
	if st, ok := o.Sys().(*syscall.Stat_t); !ok || st.Uid != uint32(os.Getuid()) {
		t.Errorf("orig is not owned by the agent's user")
	}

	// Caps: a request may lower them but not raise them.
	if _, err := a.cl.UploadArchive(ctx, "/y", bytes.NewReader(makeTar(t, file("f", strings.Repeat("z", 4096)))), sandbox.ArchiveLimits{MaxBytes: 2048}); !errors.Is(err, sandbox.ErrTooLarge) || !strings.Contains(err.Error(), "max_bytes") {
		t.Errorf("UploadArchive(4 KiB, max_bytes 2048) = %v, want too large naming max_bytes", err)
	}
	// The sandbox's disk quota bounds it too, and is named when it is the
	// lower bound.
	four := bytes.NewReader(makeTar(t, file("f", strings.Repeat("z", 4096))))
	if _, err := a.cl.UploadArchive(ctx, "/y", four, sandbox.ArchiveLimits{QuotaBytes: 2048}); !errors.Is(err, sandbox.ErrTooLarge) || !strings.Contains(err.Error(), "past 2048 bytes uncompressed (disk_mb") {
		t.Errorf("UploadArchive(4 KiB, quota 2048) = %v, want too large naming disk_mb", err)
	}
	four.Seek(0, io.SeekStart)
	if _, err := a.cl.UploadArchive(ctx, "/y", four, sandbox.ArchiveLimits{MaxBytes: 2048, QuotaBytes: 1 << 20}); !errors.Is(err, sandbox.ErrTooLarge) || !strings.Contains(err.Error(), "(max_bytes)") {
		t.Errorf("UploadArchive(4 KiB, max_bytes 2048, quota 1 MiB) = %v, want too large naming max_bytes", err)
	}
	four.Seek(0, io.SeekStart)
	if _, err := a.cl.UploadArchive(ctx, "/y", four, sandbox.ArchiveLimits{QuotaBytes: 1 << 20}); err != nil {
		t.Errorf("UploadArchive(4 KiB, quota 1 MiB) = %v", err)
	}
	if err := os.RemoveAll(filepath.Join(a.root, "y")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.cl.UploadArchive(ctx, "/y", bytes.NewReader(makeTar(t, file("f", "x"))), sandbox.ArchiveLimits{MaxBytes: 16 << 30}); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "above this sandbox's cap") {
		t.Errorf("UploadArchive(max_bytes 16 GiB) = %v, want invalid naming the cap", err)
	}
	if _, err := a.cl.UploadArchive(ctx, "/y", strings.NewReader("this is not a tar archive, not at all, and it goes on for a while: "+strings.Repeat("x", 600)), sandbox.ArchiveLimits{}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("UploadArchive(garbage) = %v, want invalid", err)
	}
	if _, err := a.cl.UploadArchive(ctx, "/x/orig", bytes.NewReader(makeTar(t, file("f", "x"))), sandbox.ArchiveLimits{}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("UploadArchive(into a file) = %v, want invalid", err)
	}
	if _, err := os.Lstat(filepath.Join(a.root, "y")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("/y remains after failed extractions: %v", err)
	}
}

// TestArchiveBomb streams a gzip bomb: the cap stops it, nothing remains, and
// the agent keeps serving.
func TestArchiveBomb(t *testing.T) {
	testutil.CheckLeaks(t)
	a := startAgent(t, boot.AgentConfig{ArchiveMaxBytes: 64 << 20})
	ctx := t.Context()
	pr, pw := io.Pipe()
	go func() {
		zw := gzip.NewWriter(pw)
		tw := tar.NewWriter(zw)
		zero := make([]byte, 1<<20)
		var err error
		for i := 0; err == nil && i < 1024; i++ { // 1 GiB of zeros, in 16 MiB files
			if err = tw.WriteHeader(&tar.Header{Name: "bomb/" + strings.Repeat("z", i%50+1), Typeflag: tar.TypeReg, Size: 16 << 20, Mode: 0o644}); err != nil {
				break
			}
			for range 16 {
				if _, err = tw.Write(zero); err != nil {
					break
				}
			}
		}
		pw.CloseWithError(err)
	}()
	_, err := a.cl.UploadArchive(ctx, "/b", pr, sandbox.ArchiveLimits{})
	pr.CloseWithError(errors.New("done"))
	if !errors.Is(err, sandbox.ErrTooLarge) || !strings.Contains(err.Error(), "67108864 bytes (64 MiB)") {
		t.Errorf("UploadArchive(bomb) = %v, want too large at 64 MiB", err)
	}
	if _, err := os.Lstat(filepath.Join(a.root, "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("/b remains after the bomb: %v", err)
	}
	if _, err := a.cl.UploadArchive(ctx, "/ok", bytes.NewReader(makeTar(t, file("f", "fine"))), sandbox.ArchiveLimits{}); err != nil {
		t.Errorf("UploadArchive after the bomb = %v", err)
	}
}
