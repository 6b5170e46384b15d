package e2e

// Directory transfer as tar archives, through the real daemon: a round trip
// of a tree, the FS-07 archive probes and the RS-11 archive bombs of
// SECURITY.md, on the native and local backends.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// arEnt is one entry of a test archive.
type arEnt struct {
	name string
	typ  byte
	body string
	mode int64
	link string
}

func arFile(name, body string) arEnt {
	return arEnt{name: name, typ: tar.TypeReg, body: body, mode: 0o644}
}
func arSym(name, target string) arEnt {
	return arEnt{name: name, typ: tar.TypeSymlink, link: target, mode: 0o777}
}
func arLink(name, target string) arEnt {
	return arEnt{name: name, typ: tar.TypeLink, link: target, mode: 0o644}
}

func arTar(t *testing.T, ents ...arEnt) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if e.typ == tar.TypeChar || e.typ == tar.TypeBlock {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("WriteHeader(%q): %v", e.name, err)
		}
		io.WriteString(tw, e.body)
	}
	tw.Close()
	return b.Bytes()
}

// archiveResult is PUT …/files/archive's answer.
type archiveResult struct {
	Path    string `json:"path"`
	Entries int64  `json:"entries"`
	Bytes   int64  `json:"bytes"`
	Skipped []struct {
		Name, Type, Reason string
	} `json:"skipped"`
	SkippedCount int64 `json:"skipped_count"`
}

// putArchive streams body (chunked, no length) to PUT …/files/archive.
func (d *daemon) putArchive(id, dir string, body io.Reader, query string) (int, []byte) {
	d.t.Helper()
	u := d.url + "/v1/sandboxes/" + id + "/files/archive?path=" + url.QueryEscape(dir) + query
	req, err := http.NewRequest("PUT", u, io.MultiReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+d.key)
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("PUT files/archive %s: %v", dir, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (d *daemon) getArchive(id, dir string, gz bool) (int, []byte, error) {
	d.t.Helper()
	u := d.url + "/v1/sandboxes/" + id + "/files/archive?path=" + url.QueryEscape(dir)
	if gz {
		u += "&gzip=1"
	}
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Authorization", "Bearer "+d.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// localTree describes every entry under dir: type and mode, size and hash or
// link target. The test's own tree and what comes back must agree.
func localTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			h := sha256.Sum256(b)
			desc += fmt.Sprintf(" %d %x", len(b), h[:8])
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		}
		out[filepath.ToSlash(rel)] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", dir, err)
	}
	return out
}

// sandboxTree is localTree as the sandbox sees wire directory dir (relative to
// the sandbox's workdir, which is exec's default cwd on both backends).
func (d *daemon) sandboxTree(id, dir string) map[string]string {
	d.t.Helper()
	r := d.exec(id, map[string]any{"argv": []string{"sh", "-c", `cd "$1" && find . -mindepth 1 | sort | while read -r p; do
		m=$(stat -c '%A' "$p")
		if [ -L "$p" ]; then echo "${p#./}|$m -> $(readlink "$p")"
		elif [ -f "$p" ]; then echo "${p#./}|$m $(stat -c %s "$p") $(sha256sum < "$p" | cut -c1-16)"
		else echo "${p#./}|$m"; fi
	done`, "sh", dir}})
	if r.ExitCode != 0 {
		d.t.Fatalf("listing %s in the sandbox: %+v", dir, r)
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		if k, v, ok := strings.Cut(l, "|"); ok {
			out[k] = v
		}
	}
	return out
}

// sameTree compares two descriptions; Go's mode strings spell a symlink "L",
// stat's "l", and a directory "d" in both.
func sameTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	norm := func(s string) string {
		if strings.HasPrefix(s, "L") {
			return "l" + s[1:]
		}
		return s
	}
	for k, v := range want {
		if norm(got[k]) != norm(v) {
			t.Errorf("%s: %s is %q, want %q", what, k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %s (%s)", what, k, got[k])
		}
	}
}

// archiveBackends runs fn against a daemon of each backend: the shared
// native one, and a local one of its own.
func archiveBackends(t *testing.T, fn func(t *testing.T, d *daemon, backend string)) {
	t.Run("native", func(t *testing.T) { fn(t, sharedDaemon(t), "native") })
	t.Run("local", func(t *testing.T) {
		d := startDaemon(t, "", "SANDBOX_BACKEND=local")
		defer d.cleanup()
		fn(t, d, "local")
	})
}

// A directory tree goes in and comes back out through `sbx cp` and the raw
// API, with its modes, symlinks, empty directories and binary content.
func TestArchiveRoundTrip(t *testing.T) {
	archiveBackends(t, func(t *testing.T, d *daemon, backend string) {
		id := d.create(nil)
		defer d.api("DELETE", "/v1/sandboxes/"+id, nil)
		proj := filepath.Join(t.TempDir(), "proj")
		blob := make([]byte, 2<<20)
		rand.Read(blob)
		for i := range 256 {
			blob[i] = byte(i)
		}
		for _, dir := range []string{"a/b/c", "empty", "private"} {
			os.MkdirAll(filepath.Join(proj, dir), 0o755)
		}
		os.Chmod(filepath.Join(proj, "empty"), 0o750)
		os.Chmod(filepath.Join(proj, "private"), 0o700)
		os.WriteFile(filepath.Join(proj, "blob.bin"), blob, 0o644)
		os.WriteFile(filepath.Join(proj, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
		os.WriteFile(filepath.Join(proj, "private/key"), []byte("k"), 0o600)
		os.WriteFile(filepath.Join(proj, "a/b/c/deep.txt"), []byte("deep\n"), 0o640)
		os.Chmod(filepath.Join(proj, "a/b/c/deep.txt"), 0o640)
		os.WriteFile(filepath.Join(proj, "a/zero"), nil, 0o644)
		os.Symlink("../blob.bin", filepath.Join(proj, "a/rel-link"))
		os.Symlink("/etc/hostname", filepath.Join(proj, "abs-link"))
		os.Symlink("missing", filepath.Join(proj, "dangling"))
		want := localTree(t, proj)

		// Up with the CLI: the destination does not exist, so it becomes proj.
		out, errOut, code := d.cli("cp", "--json", proj, id+":rt")
		var cp struct {
			Path    string
			Size    int64
			Entries int64
		}
		if code != 0 || json.Unmarshal([]byte(out), &cp) != nil || cp.Entries != int64(len(want)) || cp.Size != int64(len(blob))+19+1+5 {
			t.Fatalf("sbx cp DIR ID:rt = %d %s %s", code, out, errOut)
		}
		sameTree(t, "in the sandbox", d.sandboxTree(id, "rt"), want)
		if r := d.sh(id, "rt/run.sh"); r.Stdout != "ran\n" {
			t.Errorf("the uploaded script does not run: %+v", r)
		}
		// Into an existing directory: it lands inside, under its own name.
		if _, e, c := d.cli("cp", proj, id+":rt"); c != 0 {
			t.Fatalf("sbx cp DIR ID:existing = %d %s", c, e)
		}
		sameTree(t, "nested in the sandbox", d.sandboxTree(id, "rt/proj"), want)

		// Down with the CLI, extracted here.
		back := filepath.Join(t.TempDir(), "back")
		if _, e, c := d.cli("cp", id+":rt", back); c != 0 {
			t.Fatalf("sbx cp ID:rt DIR = %d %s", c, e)
		}
		delete(want, "proj") // the nested copy came back too: compare the rest
		got := localTree(t, back)
		for k := range got {
			if strings.HasPrefix(k, "proj") {
				delete(got, k)
			}
		}
		sameTree(t, "back on the host", got, want)

		// The raw API: gzip both ways.
		st, b, err := d.getArchive(id, "rt", true)
		if st != 200 || err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Fatalf("GET files/archive?gzip=1 = %d, %d bytes, %v", st, len(b), err)
		}
		st, rb := d.putArchive(id, "rt-gz", bytes.NewReader(b), "")
		var res archiveResult
		if st != 200 || json.Unmarshal(rb, &res) != nil || res.Entries < int64(len(want)) {
			t.Fatalf("PUT files/archive (gzip) = %d %s", st, rb)
		}
		sameTree(t, "after a gzip round trip", d.sandboxTree(id, "rt-gz/proj"), want)
		if st, b, _ := d.getArchive(id, "rt/blob.bin", false); st != 400 {
			t.Errorf("GET files/archive of a file = %d %s, want 400", st, b)
		}
		// Single files still copy as before.
		single := filepath.Join(t.TempDir(), "blob")
		if _, e, c := d.cli("cp", id+":rt/blob.bin", single); c != 0 {
			t.Fatalf("sbx cp of a file = %d %s", c, e)
		}
		if b, _ := os.ReadFile(single); !bytes.Equal(b, blob) {
			t.Errorf("the single file came back with %d bytes", len(b))
		}
	})
}

// TestArchiveEscapes is FS-07: archives with "../" and absolute entries, a
// symlink followed by a write through it, hardlinks leading out, device nodes
// and setuid bits. Each is rejected or confined; the evidence is checked where
// it would land: the host canary, the sandbox's /etc/passwd, stat in the
// sandbox. A benign archive in the same run extracts (positive control).
func TestArchiveEscapes(t *testing.T) {
	archiveBackends(t, func(t *testing.T, d *daemon, backend string) {
		id := d.create(nil)
		defer d.api("DELETE", "/v1/sandboxes/"+id, nil)
		hostDir := t.TempDir()
		canary := filepath.Join(hostDir, "canary")
		canaryValue := make([]byte, 32)
		rand.Read(canaryValue)
		os.WriteFile(canary, canaryValue, 0o644)
		canaryHash := fileHash(canary)
		hostPasswd := fileHash("/etc/passwd")
		passwdIn := func() string { return d.sh(id, "sha256sum /etc/passwd").Stdout }
		passwdBefore := passwdIn()
		escapeName := "sbx-fs07-" + id
		d.sh(id, "mkdir -p fs07 && echo pre > fs07/pre.txt && echo kept > fs07/kept.txt")
		before := d.sandboxTree(id, "fs07")

		probes := []struct {
			name string
			ents []arEnt
			msg  string
		}{
			{"dot-dot", []arEnt{arFile("../../../../../../../../tmp/"+escapeName, "x")}, "names with '..'"},
			{"dot-dot to the workspace's parent", []arEnt{arFile("../../"+escapeName, "x")}, "names with '..'"},
			{"absolute host canary", []arEnt{arFile(canary, "pwned")}, "absolute names"},
			{"absolute /etc/passwd", []arEnt{arFile("/etc/passwd", "pwned::0:0::/:/bin/sh\n")}, "absolute names"},
			{"symlink to /etc then write through it", []arEnt{arSym("link", "/etc"), arFile("link/passwd", "pwned")}, `entry "link/passwd"`},
			{"symlink to the canary's dir then write", []arEnt{arSym("cdir", hostDir), arFile("cdir/canary", "pwned")}, "is a symlink"},
			{"symlink to / then mkdir and write", []arEnt{arSym("r", "/"), {name: "r/tmp/x/", typ: tar.TypeDir, mode: 0o755}, arFile("r/tmp/"+escapeName, "x")}, "is a symlink"},
			{"hardlink to /etc/passwd", []arEnt{arLink("h", "/etc/passwd")}, "absolute names"},
			{"hardlink up to /etc/passwd", []arEnt{arLink("h", "../../../../../../etc/passwd")}, "names with '..'"},
			{"hardlink through a symlink", []arEnt{arSym("e", "/etc"), arLink("h", "e/passwd")}, "is not a file this archive extracted"},
			// kept.txt was there before and no entry replaces it; pre.txt is
			// replaced by each probe's prelude, so a link to it is fine.
			{"hardlink to a file already there", []arEnt{arLink("h", "kept.txt")}, "is not a file this archive extracted"},
		}
		for _, p := range probes {
			// Each probe follows harmless entries, so the rollback is exercised.
			ents := append([]arEnt{arFile("ok-"+strconv.Itoa(len(p.name)), "ok"), arFile("pre.txt", "replaced")}, p.ents...)
			st, b := d.putArchive(id, "fs07", bytes.NewReader(arTar(t, ents...)), "")
			if st != 400 {
				t.Errorf("%s: PUT = %d %s, want 400", p.name, st, b)
				continue
			}
			if e := decodeError(t, b); e.Error.Code != "invalid_argument" || e.Error.SandboxID != id || !strings.Contains(e.Error.Message, p.msg) {
				t.Errorf("%s: error %+v, want invalid_argument naming %q and the sandbox", p.name, e.Error, p.msg)
			}
			if got := d.sandboxTree(id, "fs07"); fmt.Sprint(got) != fmt.Sprint(before) {
				t.Errorf("%s: the destination changed after the refusal:\n%v\nwant\n%v", p.name, got, before)
			}
		}
		// Evidence at the far end.
		if fileHash(canary) != canaryHash {
			t.Errorf("the host canary changed")
		}
		if fileHash("/etc/passwd") != hostPasswd {
			t.Errorf("the host's /etc/passwd changed")
		}
		if got := passwdIn(); got != passwdBefore {
			t.Errorf("/etc/passwd in the sandbox changed: %q, was %q", got, passwdBefore)
		}
		if _, err := os.Lstat("/tmp/" + escapeName); err == nil {
			t.Errorf("an archive entry reached the host at /tmp/%s", escapeName)
		}
		if r := d.sh(id, "ls /tmp/"+escapeName+" ../"+escapeName+" 2>&1"); r.ExitCode == 0 {
			t.Errorf("an archive entry landed outside the destination: %s", r.Stdout)
		}
		if backend == "local" {
			sb := filepath.Join(d.dataDir, id)
			found, _ := filepath.Glob(filepath.Join(sb, escapeName))
			deeper, _ := filepath.Glob(filepath.Join(sb, "*", escapeName))
			if found = append(found, deeper...); len(found) > 0 {
				t.Errorf("an archive entry left the local workspace: %v", found)
			}
		}

		// Confined: what is valid extracts, with symlinks never followed,
		// devices skipped and special bits stripped.
		st, b := d.putArchive(id, "fs07", bytes.NewReader(arTar(t,
			arSym("c", canary), arFile("c", "replaced the symlink"),
			arSym("to-etc", "/etc"),
			arEnt{name: "suid", typ: tar.TypeReg, body: "#!/bin/sh\nid -u\n", mode: 0o4755},
			arEnt{name: "sgid", typ: tar.TypeReg, body: "x", mode: 0o2750},
			arEnt{name: "sticky/", typ: tar.TypeDir, mode: 0o1777},
			arEnt{name: "null2", typ: tar.TypeChar, mode: 0o666},
			arEnt{name: "disk", typ: tar.TypeBlock, mode: 0o660},
			arEnt{name: "pipe", typ: tar.TypeFifo, mode: 0o644},
			arFile("orig", "linked"), arLink("alias", "orig"),
		)), "")
		var res archiveResult
		if st != 200 || json.Unmarshal(b, &res) != nil {
			t.Fatalf("the confined archive = %d %s, want 200", st, b)
		}
		if res.SkippedCount != 3 || len(res.Skipped) != 3 || res.Skipped[0].Name != "null2" || res.Skipped[1].Type != "block device" || res.Skipped[2].Type != "fifo" {
			t.Errorf("skipped = %+v, want the two devices and the FIFO", res.Skipped)
		}
		r := d.sh(id, `cd fs07 && stat -c '%n %F %a' c to-etc suid sgid sticky && cat c && echo && readlink to-etc &&
			[ "$(stat -c %i orig)" = "$(stat -c %i alias)" ] && echo same-inode;
			for f in null2 disk pipe; do [ -e $f ] || [ -L $f ] && echo "present $f"; done; true`)
		for _, want := range []string{"c regular file 644", "to-etc symbolic link 777", "suid regular file 755", "sgid regular file 750",
			"sticky directory 777", "replaced the symlink", "\n/etc\n", "same-inode"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("in the sandbox, want %q in:\n%s", want, r.Stdout)
			}
		}
		if strings.Contains(r.Stdout, "present") {
			t.Errorf("a device or FIFO entry was created:\n%s", r.Stdout)
		}
		if fileHash(canary) != canaryHash || passwdIn() != passwdBefore {
			t.Errorf("the confined archive changed the canary or /etc/passwd")
		}
		// Positive control: a benign archive extracts in the same run.
		st, b = d.putArchive(id, "fs07/benign", bytes.NewReader(arTar(t, arFile("hello.txt", "hello"), arFile("sub/x", "x"))), "")
		if st != 200 || d.sh(id, "cat fs07/benign/hello.txt").Stdout != "hello" {
			t.Errorf("the benign control = %d %s", st, b)
		}
	})
}

// TestArchiveBombs is RS-11: a high-ratio gzip bomb, millions of tiny entries
// and deep nesting stop at their caps with 413, leave nothing behind, keep the
// daemon's memory small (it streams, never decompresses) and leave the sandbox
// working. The sandbox's disk quota bounds an archive too, on the wire and
// extracted.
func TestArchiveBombs(t *testing.T) {
	d := startDaemon(t, "")
	defer d.cleanup()
	// A quota above the agent's own 8 GiB cap, so that cap is the one met.
	id := d.create(map[string]any{"disk_mb": 16 << 10})
	pid := d.cmd.Process.Pid
	rss0, hwm0 := procMem(t, pid, "VmRSS"), procMem(t, pid, "VmHWM")
	gone := func(id, what, dir string) {
		t.Helper()
		if !waitUntil(5*time.Second, func() bool { return d.sh(id, "test -e "+dir+" && echo present || echo gone").Stdout == "gone\n" }) {
			t.Errorf("%s: %s remains after the cap: the partial output must go", what, dir)
		}
	}
	capHit := func(id, what string, st int, b []byte, caps ...string) {
		t.Helper()
		if st != 413 {
			t.Errorf("%s: PUT = %d %.300s, want 413", what, st, b)
			return
		}
		e := decodeError(t, b)
		if e.Error.Code != "out_of_range" || e.Error.SandboxID != id {
			t.Errorf("%s: error %+v, want out_of_range naming the sandbox", what, e.Error)
		}
		for _, c := range caps {
			if !strings.Contains(e.Error.Message, c) {
				t.Errorf("%s: error %q does not name %q", what, e.Error.Message, c)
			}
		}
	}

	// 10 GiB of zeros, ~10 MB on the wire: 320 files of 32 MiB, each a gzip
	// member of its tar header and a member of zeros made once.
	zmember := gzipOf(make([]byte, 32<<20))
	bomb := func(files int) io.Reader {
		pr, pw := io.Pipe()
		go func() {
			var err error
			for i := 0; i < files && err == nil; i++ {
				var hb bytes.Buffer
				tw := tar.NewWriter(&hb)
				tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("bomb/z%04d", i), Typeflag: tar.TypeReg, Size: 32 << 20, Mode: 0o644})
				if _, err = pw.Write(gzipOf(hb.Bytes())); err == nil {
					_, err = pw.Write(zmember)
				}
			}
			if err == nil {
				_, err = pw.Write(gzipOf(make([]byte, 1024)))
			}
			pw.CloseWithError(err)
		}()
		return pr
	}
	t.Logf("gzip bomb: %d bytes on the wire for 10 GiB of zeros", 320*(len(zmember)+40))
	// At the default cap (8 GiB) the first entry too big for what is left
	// stops it: here, after 256 files, with 8 GiB written. That is slow, so
	// the default is checked on one 10 GiB entry (refused at its header) and
	// the streaming stop with a lowered cap.
	st, b := d.putArchive(id, "bomb-default", tenGiBEntry(), "")
	capHit(id, "one 10 GiB entry, default caps", st, b, "max_bytes", "8589934592 bytes (8 GiB)")
	gone(id, "one 10 GiB entry", "bomb-default")
	st, b = d.putArchive(id, "bomb-gzip", bomb(320), "&max_bytes="+strconv.Itoa(512<<20))
	capHit(id, "gzip bomb, 512 MiB cap", st, b, "max_bytes")
	gone(id, "gzip bomb", "bomb-gzip")

	// The disk quota (default 1 GiB) bounds what an archive writes, and
	// what it sends: an announced length over it is refused unread.
	small := d.create(map[string]any{"disk_mb": 64})
	st, b = d.putArchive(small, "bomb-quota", tenGiBEntry(), "")
	capHit(small, "one 10 GiB entry, disk_mb 64", st, b, "disk_mb", "67108864 bytes (64 MiB)")
	gone(small, "one 10 GiB entry, disk_mb 64", "bomb-quota")
	st, b = d.putArchive(small, "bomb-quota", bomb(4), "")
	capHit(small, "gzip bomb of 128 MiB, disk_mb 64", st, b, "disk_mb")
	gone(small, "gzip bomb of 128 MiB, disk_mb 64", "bomb-quota")
	st, b = d.putArchiveSized(small, "bomb-quota", 65<<20)
	capHit(small, "an archive announcing 65 MiB, disk_mb 64", st, b, "disk_mb", "68157440")
	gone(small, "an archive announcing 65 MiB", "bomb-quota")

	// Millions of entries, streamed. The default entries cap (100 000) on
	// entries that cost no file (FIFOs, skipped), then real files with a
	// lowered cap: creating a file costs this filesystem up to 0.3 ms, so
	// 100 000 of them would take half a minute.
	many := func(n int, typ byte) io.Reader {
		pr, pw := io.Pipe()
		go func() {
			zw, _ := gzip.NewWriterLevel(pw, gzip.BestSpeed)
			tw := tar.NewWriter(zw)
			var err error
			for i := 0; i < n && err == nil; i++ {
				h := &tar.Header{Name: fmt.Sprintf("m/%04d/%07d", i/2000, i), Typeflag: typ, Mode: 0o644}
				if typ == tar.TypeReg {
					h.Size = 1
				}
				if err = tw.WriteHeader(h); err == nil && typ == tar.TypeReg {
					_, err = tw.Write([]byte{'x'})
				}
			}
			if err == nil {
				if err = tw.Close(); err == nil {
					err = zw.Close()
				}
			}
			pw.CloseWithError(err)
		}()
		return pr
	}
	began := time.Now()
	st, b = d.putArchive(id, "bomb-many", many(3_000_000, tar.TypeFifo), "")
	capHit(id, "3 million entries", st, b, "max_entries", "100000")
	t.Logf("3 million entries: stopped at the default cap in %v", time.Since(began).Round(time.Millisecond))
	gone(id, "3 million entries", "bomb-many")
	began = time.Now()
	st, b = d.putArchive(id, "bomb-files", many(3_000_000, tar.TypeReg), "&max_entries=5000")
	capHit(id, "3 million files, max_entries 5000", st, b, "max_entries", "5000")
	t.Logf("3 million files: stopped at 5000 and cleaned up in %v", time.Since(began).Round(time.Millisecond))
	gone(id, "3 million files", "bomb-files")

	// Deep nesting: one entry 500 levels down, and a chain of directories.
	st, b = d.putArchive(id, "bomb-deep", bytes.NewReader(arTar(t, arFile(strings.Repeat("d/", 500)+"f", "x"))), "")
	capHit(id, "500 levels deep", st, b, "max_depth")
	gone(id, "500 levels deep", "bomb-deep")
	var chain []arEnt
	for i := 1; i <= 80; i++ {
		chain = append(chain, arEnt{name: strings.Repeat("n/", i), typ: tar.TypeDir, mode: 0o755})
	}
	st, b = d.putArchive(id, "bomb-chain", bytes.NewReader(arTar(t, chain...)), "")
	capHit(id, "80 nested directories", st, b, "max_depth")
	gone(id, "80 nested directories", "bomb-chain")

	rss1, hwm1 := procMem(t, pid, "VmRSS"), procMem(t, pid, "VmHWM")
	t.Logf("daemon memory: VmRSS %d → %d KiB, VmHWM %d → %d KiB", rss0>>10, rss1>>10, hwm0>>10, hwm1>>10)
	if hwm1-hwm0 > 64<<20 {
		t.Errorf("the daemon's peak RSS grew by %d MiB during the bombs (VmHWM %d → %d KiB): it must stream", (hwm1-hwm0)>>20, hwm0>>10, hwm1>>10)
	}
	// The sandboxes still work, and a benign archive extracts.
	for _, sb := range []string{id, small} {
		if r := d.sh(sb, "echo alive"); r.Stdout != "alive\n" {
			t.Errorf("the sandbox after the bombs: %+v", r)
		}
		st, b = d.putArchive(sb, "after", bytes.NewReader(gzipOf(arTar(t, arFile("ok", "ok")))), "")
		if st != 200 || d.sh(sb, "cat after/ok").Stdout != "ok" {
			t.Errorf("a benign archive after the bombs = %d %s", st, b)
		}
	}
}

// putArchiveSized sends PUT …/files/archive with a Content-Length of n
// bytes and a body that goes quiet after the first 64 KiB: the daemon must
// answer from the length alone.
func (d *daemon) putArchiveSized(id, dir string, n int64) (int, []byte) {
	d.t.Helper()
	u := d.url + "/v1/sandboxes/" + id + "/files/archive?path=" + url.QueryEscape(dir)
	quiet := make(chan struct{})
	defer close(quiet)
	req, err := http.NewRequest("PUT", u, io.MultiReader(bytes.NewReader(make([]byte, 64<<10)), quietReader(quiet)))
	if err != nil {
		d.t.Fatal(err)
	}
	req.ContentLength = n
	req.Header.Set("Authorization", "Bearer "+d.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("PUT files/archive %s (length %d): %v", dir, n, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// quietReader blocks until its channel closes, then fails: a body whose
// sender went quiet.
type quietReader chan struct{}

func (q quietReader) Read([]byte) (int, error) {
	<-q
	return 0, io.ErrUnexpectedEOF
}

// tenGiBEntry is a gzip stream of a tar whose one entry announces 10 GiB of
// zeros; it produces zeros for as long as it is read. A size of 8 GiB or more
// does not fit ustar's octal field: the header is PAX, an extended header
// block and its records before the entry's own block, all of which is sent.
func tenGiBEntry() io.Reader {
	var hb bytes.Buffer
	tw := tar.NewWriter(&hb)
	if err := tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Size: 10 << 30, Mode: 0o644, Format: tar.FormatPAX}); err != nil {
		panic(err)
	}
	zmember := gzipOf(make([]byte, 1<<20))
	parts := []io.Reader{bytes.NewReader(gzipOf(hb.Bytes()))}
	for range 10 << 10 {
		parts = append(parts, bytes.NewReader(zmember))
	}
	return io.MultiReader(parts...)
}

func gzipOf(b []byte) []byte {
	var out bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&out, gzip.BestCompression)
	zw.Write(b)
	zw.Close()
	return out.Bytes()
}

// procMem reads a Vm* line of /proc/pid/status, in bytes.
func procMem(t *testing.T, pid int, key string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("reading the daemon's status: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

// The daemon's archive_max_entries reaches the agent: an archive past it is
// refused naming the cap, one within it extracts, and a request may not
// raise it.
func TestArchiveCapFromConfig(t *testing.T) {
	d := startDaemon(t, "", "SBX_ARCHIVE_MAX_ENTRIES=5", "SBX_POOL_SIZE=0")
	defer d.cleanup()
	id := d.create(nil)
	var ents []arEnt
	for i := range 4 {
		ents = append(ents, arFile("f"+strconv.Itoa(i), "x"))
	}
	if st, b := d.putArchive(id, "/workspace/ok", bytes.NewReader(arTar(t, ents...)), ""); st != 200 {
		t.Fatalf("control: 4 entries under a cap of 5 = %d %s", st, b)
	}
	ents = append(ents, arFile("f4", "x"), arFile("f5", "x"))
	st, b := d.putArchive(id, "/workspace/big", bytes.NewReader(arTar(t, ents...)), "")
	if st != 413 || !strings.Contains(string(b), "max_entries") {
		t.Errorf("6 entries under a configured cap of 5 = %d %s, want 413 naming max_entries", st, b)
	}
	if st, b := d.putArchive(id, "/workspace/raised", bytes.NewReader(arTar(t, ents...)), "max_entries=100"); st != 400 && st != 413 {
		t.Errorf("a request raising the cap = %d %s, want it refused", st, b)
	}
	if r := d.sh(id, "ls /workspace/big /workspace/raised 2>/dev/null | wc -l"); strings.TrimSpace(r.Stdout) != "0" {
		t.Errorf("a refused archive left files: %s", r.Stdout)
	}
}
