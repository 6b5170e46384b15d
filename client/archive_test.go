package client

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

type tarEnt struct {
	name string
	typ  byte
	body string
	mode int64
	link string
}

func tarOf(t *testing.T, ents ...tarEnt) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, e.body)
	}
	tw.Close()
	return b.Bytes()
}

func reg(name, body string) tarEnt {
	return tarEnt{name: name, typ: tar.TypeReg, body: body, mode: 0o644}
}

// tree describes every entry under dir: mode, and content or link target.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		rel, _ := filepath.Rel(dir, p)
		desc := fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			desc += " " + string(b)
		} else if fi.Mode()&fs.ModeSymlink != 0 {
			l, _ := os.Readlink(p)
			desc += " -> " + l
		}
		out[rel] = desc
		return nil
	})
	return out
}

func TestWriteAndExtractArchive(t *testing.T) {
	src := t.TempDir()
	blob := make([]byte, 1<<20+3)
	rand.Read(blob)
	os.MkdirAll(filepath.Join(src, "a/b"), 0o755)
	os.MkdirAll(filepath.Join(src, "empty"), 0o750)
	os.Chmod(filepath.Join(src, "empty"), 0o750)
	os.WriteFile(filepath.Join(src, "blob"), blob, 0o600)
	os.WriteFile(filepath.Join(src, "a/b/run.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.Symlink("../../blob", filepath.Join(src, "a/b/link"))
	os.Symlink("/etc/passwd", filepath.Join(src, "abs"))
	syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644)
	want := tree(t, src)
	delete(want, "fifo")

	for _, gz := range []bool{false, true} {
		var b bytes.Buffer
		var w io.Writer = &b
		var zw *gzip.Writer
		if gz {
			zw = gzip.NewWriter(&b)
			w = zw
		}
		skipped, err := WriteArchive(w, src)
		if zw != nil {
			zw.Close()
		}
		if err != nil || skipped != 1 {
			t.Fatalf("WriteArchive = %d, %v; want the FIFO skipped", skipped, err)
		}
		dst := filepath.Join(t.TempDir(), "out")
		res, err := ExtractArchive(&b, dst, ExtractLimits{})
		if err != nil || res.Bytes != int64(len(blob))+10 {
			t.Fatalf("ExtractArchive(gzip %v) = %+v, %v", gz, res, err)
		}
		got := tree(t, dst)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %q after the round trip, want %q", k, got[k], v)
			}
		}
		if len(got) != len(want) {
			t.Errorf("round trip: %d entries, want %d", len(got), len(want))
		}
	}
}

// A hostile sandbox's archive cannot reach outside the destination, write
// through a symlink, or leave anything behind when it breaks a rule.
func TestExtractArchiveRules(t *testing.T) {
	outside := t.TempDir()
	canary := filepath.Join(outside, "canary")
	os.WriteFile(canary, []byte("canary"), 0o644)
	prelude := []tarEnt{reg("ok.txt", "fine"), {name: "d/", typ: tar.TypeDir, mode: 0o755}, reg("d/e.txt", "e")}
	cases := []struct {
		name  string
		ents  []tarEnt
		class error
		msg   string
	}{
		{"dot-dot", []tarEnt{reg("../escape", "x")}, sandbox.ErrInvalid, "names with '..'"},
		{"absolute", []tarEnt{reg(canary, "pwned")}, sandbox.ErrInvalid, "absolute names"},
		{"symlink then write through it", []tarEnt{{name: "l", typ: tar.TypeSymlink, link: outside}, reg("l/canary", "pwned")}, sandbox.ErrInvalid, `"l" is a symlink`},
		{"symlink to / then write", []tarEnt{{name: "r", typ: tar.TypeSymlink, link: "/"}, reg("r"+canary, "pwned")}, sandbox.ErrInvalid, "is a symlink"},
		{"hardlink outside", []tarEnt{{name: "h", typ: tar.TypeLink, link: canary}}, sandbox.ErrInvalid, "absolute names"},
		{"hardlink up", []tarEnt{{name: "h", typ: tar.TypeLink, link: "../canary"}}, sandbox.ErrInvalid, "names with '..'"},
		{"hardlink through a symlink", []tarEnt{{name: "l", typ: tar.TypeSymlink, link: outside}, {name: "h", typ: tar.TypeLink, link: "l/canary"}}, sandbox.ErrInvalid, "not a file this archive extracted"},
		{"hardlink to a symlink", []tarEnt{{name: "l", typ: tar.TypeSymlink, link: canary}, {name: "h", typ: tar.TypeLink, link: "l"}}, sandbox.ErrInvalid, "not a file this archive extracted"},
		{"file over a directory", []tarEnt{reg("d", "x")}, sandbox.ErrExists, "a directory exists"},
		{"too deep", []tarEnt{reg(strings.Repeat("x/", 70)+"f", "x")}, sandbox.ErrTooLarge, "max_depth"},
		{"long component", []tarEnt{reg(strings.Repeat("n", 300), "x")}, sandbox.ErrTooLarge, "max_name_bytes"},
		{"backslash", []tarEnt{reg(`..\..\escape`, "x")}, sandbox.ErrInvalid, `'\'`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dst := filepath.Join(parent, "dst")
			body := tarOf(t, append(append([]tarEnt{}, prelude...), tc.ents...)...)
			_, err := ExtractArchive(bytes.NewReader(body), dst, ExtractLimits{})
			if !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("ExtractArchive = %v, want %v naming %q", err, tc.class, tc.msg)
			}
			if ents, _ := os.ReadDir(parent); len(ents) != 0 {
				t.Errorf("a failed extraction left %v", ents)
			}
			if b, _ := os.ReadFile(canary); string(b) != "canary" {
				t.Fatalf("the canary outside changed: %q", b)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 1 {
				t.Fatalf("outside holds %d entries, want the canary only", len(ents))
			}
		})
	}
}

func TestExtractArchiveConfines(t *testing.T) {
	outside := t.TempDir()
	canary := filepath.Join(outside, "canary")
	os.WriteFile(canary, []byte("canary"), 0o644)
	dst := t.TempDir() // empty and existing: allowed
	body := tarOf(t,
		tarEnt{name: "c", typ: tar.TypeSymlink, link: canary}, reg("c", "replaced"),
		tarEnt{name: "suid", typ: tar.TypeReg, body: "x", mode: 0o6755},
		tarEnt{name: "sticky/", typ: tar.TypeDir, mode: 0o1777},
		tarEnt{name: "null", typ: tar.TypeChar, mode: 0o666},
		tarEnt{name: "fifo", typ: tar.TypeFifo, mode: 0o644},
		reg("orig", "same"), tarEnt{name: "alias", typ: tar.TypeLink, link: "orig"},
	)
	res, err := ExtractArchive(bytes.NewReader(body), dst, ExtractLimits{})
	if err != nil || res.SkippedCount != 2 || res.Skipped[0].Type != "char device" || res.Skipped[1].Type != "fifo" {
		t.Fatalf("ExtractArchive = %+v, %v", res, err)
	}
	if b, _ := os.ReadFile(canary); string(b) != "canary" {
		t.Errorf("the canary changed: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "c")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("c = %v, %v; want a regular file in place of the symlink", fi, err)
	}
	if fi, _ := os.Lstat(filepath.Join(dst, "suid")); fi == nil || fi.Mode() != 0o755 {
		t.Errorf("suid's mode = %v, want -rwxr-xr-x", fi.Mode())
	}
	if fi, _ := os.Lstat(filepath.Join(dst, "sticky")); fi == nil || fi.Mode() != fs.ModeDir|0o777 {
		t.Errorf("sticky's mode = %v, want drwxrwxrwx", fi.Mode())
	}
	o, _ := os.Stat(filepath.Join(dst, "orig"))
	a, _ := os.Stat(filepath.Join(dst, "alias"))
	if o == nil || a == nil || !os.SameFile(o, a) {
		t.Errorf("alias is not a hardlink of orig")
	}

	// An existing destination must be empty; a failure empties it again.
	if _, err := ExtractArchive(bytes.NewReader(tarOf(t, reg("x", "x"))), dst, ExtractLimits{}); !errors.Is(err, sandbox.ErrExists) {
		t.Errorf("ExtractArchive(non-empty) = %v, want exists", err)
	}
	empty := t.TempDir()
	if _, err := ExtractArchive(bytes.NewReader(tarOf(t, reg("x", "x"), reg("../y", "y"))), empty, ExtractLimits{}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("ExtractArchive(../y) = %v, want invalid", err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("the failed extraction left %v in the existing destination", ents)
	}
}

func TestExtractArchiveCaps(t *testing.T) {
	var many []tarEnt
	for i := range 30 {
		many = append(many, reg("f"+strings.Repeat("x", i), "x"))
	}
	dst := filepath.Join(t.TempDir(), "d")
	if _, err := ExtractArchive(bytes.NewReader(tarOf(t, many...)), dst, ExtractLimits{MaxEntries: 20}); !errors.Is(err, sandbox.ErrTooLarge) || !strings.Contains(err.Error(), "max_entries") {
		t.Errorf("ExtractArchive(30 entries, cap 20) = %v", err)
	}
	// A gzip bomb: 1 GiB of zeros, stopped at the cap after 8 MiB.
	pr, pw := io.Pipe()
	go func() {
		zw := gzip.NewWriter(pw)
		tw := tar.NewWriter(zw)
		err := tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Size: 1 << 30, Mode: 0o644})
		if err == nil {
			_, err = io.CopyN(tw, zeros{}, 1<<30)
		}
		pw.CloseWithError(err)
	}()
	_, err := ExtractArchive(pr, dst, ExtractLimits{MaxBytes: 8 << 20})
	pr.Close()
	if !errors.Is(err, sandbox.ErrTooLarge) || !strings.Contains(err.Error(), "max_bytes") {
		t.Errorf("ExtractArchive(bomb) = %v, want too large", err)
	}
	if _, err := os.Lstat(dst); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the bomb's destination remains: %v", err)
	}
}

// UploadDir streams: a local read error is the error reported.
func TestUploadDirSendsTar(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "f"), []byte("hello"), 0o644)
	var got []string
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "PUT" || r.URL.Path != "/v1/sandboxes/"+id+"/files/archive" || r.URL.Query().Get("path") != "/w/d" {
			t.Errorf("request %s %s", r.Method, r.URL)
		}
		tr := tar.NewReader(r.Body)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			got = append(got, h.Name)
		}
		w.Write([]byte(`{"path":"/w/d","entries":1,"bytes":5,"skipped":[],"skipped_count":0}`))
	})
	res, err := c.UploadDir(t.Context(), id, src, "/w/d", UploadDirOptions{})
	if err != nil || res.Entries != 1 || len(got) != 1 || got[0] != "f" {
		t.Errorf("UploadDir = %+v, %v; the daemon saw %q", res, err, got)
	}
}

// A daemon that refuses the archive before reading it all (a cap, a quota)
// is the error reported, not the writer it stopped.
func TestUploadDirEarlyRefusal(t *testing.T) {
	src := t.TempDir()
	big := make([]byte, 4<<20)
	rand.Read(big)
	os.WriteFile(filepath.Join(src, "big"), big, 0o644)
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(413)
		w.Write([]byte(`{"error":{"code":"out_of_range","message":"upload_archive ` + id + `: too large: over the quota","sandbox_id":"` + id + `"}}`))
	})
	_, err := c.UploadDir(t.Context(), id, src, "/w/d", UploadDirOptions{})
	if !errors.Is(err, sandbox.ErrTooLarge) || !strings.Contains(err.Error(), "over the quota") {
		t.Errorf("UploadDir refused early = %v, want the daemon's 413", err)
	}
}
