package e2e

// The archive rows of the attack catalogue: FS-07 (hostile entries in an
// uploaded archive) and RS-11 (archive bombs). TestArchiveEscapes and
// TestArchiveBombs probe the same on both backends with more cases; these
// rows run them under the suite's canaries and leak audit.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// putArchive sends body to PUT …/files/archive of the row's sandbox A,
// beneath workspace directory dir; query adds parameters.
func (r *run) putArchive(dir string, body io.Reader, query string) (int, []byte) {
	r.t.Helper()
	return r.raw("PUT", "/v1/sandboxes/"+r.a()+"/files/archive?path="+q(r.wire(dir))+query, body, map[string]string{"Content-Type": "application/x-tar"})
}

// archiveErr checks a refused archive: status, code, the sandbox and a
// phrase of the message.
func (r *run) archiveErr(what string, st int, b []byte, status int, code, phrase string) {
	if st == 200 {
		r.breach("%s: the archive was extracted (200 %.200s)", what, b)
		return
	}
	var e errorBody
	if st != status || json.Unmarshal(b, &e) != nil || e.Error.Code != code || e.Error.SandboxID != r.a() || !strings.Contains(e.Error.Message, phrase) {
		r.breach("%s: %d %.300s, want %d %s naming %q and the sandbox", what, st, b, status, code, phrase)
	}
}

// --- FS-07: hostile archive entries -------------------------------------------------

func fs07Setup(r *run) error {
	id := r.create(nil)
	if res := r.sh(id, "mkdir -p fs07 && echo pre > fs07/pre.txt && echo kept > fs07/kept.txt"); res.ExitCode != 0 {
		return fmt.Errorf("preparing fs07: %+v", res)
	}
	return nil
}

func fs07Control(r *run) error {
	st, b := r.putArchive("fs07-ctl", bytes.NewReader(arTar(r.t, arFile("a/f", "control"), arSym("a/l", "f"), arLink("a/h", "a/f"))), "")
	if st != 200 {
		return fmt.Errorf("control: a benign archive = %d %.300s", st, b)
	}
	res := r.sh(r.a(), `cd fs07-ctl/a && cat l && [ "$(stat -c %i f)" = "$(stat -c %i h)" ] && echo " linked"`)
	if res.Stdout != "control linked\n" {
		return fmt.Errorf("control: the extracted tree reads %+v", res)
	}
	return nil
}

func fs07Attack(r *run) error {
	id := r.a()
	tree := func() string {
		return r.sh(id, "cd fs07 && find . | sort | xargs -d '\\n' stat -c '%n %F %s %i'").Stdout
	}
	before := tree()
	escape := "sbx-fs07-" + randHex(4)
	r.set("escape", escape)
	for _, p := range []struct {
		name   string
		ents   []arEnt
		status int
		code   string
		phrase string
	}{
		{"dot-dot", []arEnt{arFile("../../../../../../.."+r.s.dir+"/"+escape, "x")}, 400, "invalid_argument", "names with '..'"},
		{"absolute canary", []arEnt{arFile(r.s.canaryFile, "pwned")}, 400, "invalid_argument", "absolute names"},
		{"absolute sibling", []arEnt{arFile(r.siblingHostPath(), "pwned")}, 400, "invalid_argument", "absolute names"},
		{"symlink to the canary's dir, then a write through it", []arEnt{arSym("cdir", r.s.dir), arFile("cdir/canary", "pwned")}, 400, "invalid_argument", "is a symlink"},
		{"symlink to /, then mkdir and write", []arEnt{arSym("root", "/"), {name: "root/tmp/" + escape + "/", typ: tar.TypeDir, mode: 0o755}, arFile("root/etc/passwd", "pwned")}, 400, "invalid_argument", "is a symlink"},
		{"symlink to the canary, then a write beneath it", []arEnt{arSym("s", r.s.canaryFile), arFile("s/x", "pwned")}, 400, "invalid_argument", "is a symlink"},
		{"hardlink to the canary", []arEnt{arLink("h", r.s.canaryFile)}, 400, "invalid_argument", "absolute names"},
		{"hardlink up and out", []arEnt{arLink("h", "../../../../etc/passwd")}, 400, "invalid_argument", "names with '..'"},
		{"hardlink through a symlink", []arEnt{arSym("e", "/etc"), arLink("h", "e/passwd")}, 400, "invalid_argument", "is not a file this archive extracted"},
		{"hardlink to a file already there", []arEnt{arLink("h", "kept.txt")}, 400, "invalid_argument", "is not a file this archive extracted"},
	} {
		// Harmless entries first, one replacing a file, so the refusal must
		// also undo them.
		ents := append([]arEnt{arFile("ok.txt", "ok"), arFile("pre.txt", "replaced")}, p.ents...)
		st, b := r.putArchive("fs07", bytes.NewReader(arTar(r.t, ents...)), "")
		r.archiveErr("FS-07 "+p.name, st, b, p.status, p.code, p.phrase)
		if after := tree(); after != before {
			r.breach("FS-07 %s: the destination changed after the refusal:\n%s\nwas\n%s", p.name, after, before)
		}
	}
	// Confined: devices and FIFOs skipped, special bits stripped, a symlink
	// replaced by a file instead of written through.
	st, b := r.putArchive("fs07-conf", bytes.NewReader(arTar(r.t,
		arSym("c", r.s.canaryFile), arFile("c", "replaced the symlink"),
		arEnt{name: "suid", typ: tar.TypeReg, body: "#!/bin/sh\nid -u\n", mode: 0o4755},
		arEnt{name: "sgid", typ: tar.TypeReg, body: "x", mode: 0o2755},
		arEnt{name: "sticky/", typ: tar.TypeDir, mode: 0o1777},
		arEnt{name: "mem", typ: tar.TypeChar, mode: 0o666},
		arEnt{name: "sda", typ: tar.TypeBlock, mode: 0o660},
		arEnt{name: "fifo", typ: tar.TypeFifo, mode: 0o644},
	)), "")
	var res archiveResult
	if st != 200 || json.Unmarshal(b, &res) != nil {
		return fmt.Errorf("the confinable archive = %d %.300s", st, b)
	}
	if res.SkippedCount != 3 {
		r.breach("FS-07: %d entries skipped, want the two devices and the FIFO: %+v", res.SkippedCount, res.Skipped)
	}
	out := r.sh(id, `cd fs07-conf && stat -c '%n %F %a' c suid sgid sticky; for f in mem sda fifo; do [ -e $f ] || [ -L $f ] && echo "present $f"; done; true`).Stdout
	for _, want := range []string{"c regular file 644", "suid regular file 755", "sgid regular file 755", "sticky directory 777"} {
		if !strings.Contains(out, want) {
			r.breach("FS-07: want %q in the sandbox, got:\n%s", want, out)
		}
	}
	if strings.Contains(out, "present") {
		r.breach("FS-07: a device or FIFO entry was created:\n%s", out)
	}
	return nil
}

func fs07Evidence(r *run) error {
	r.checkHostDir()
	if res := r.sh(r.a(), "ls -d /tmp/"+r.get("escape")+" 2>&1; grep -c pwned /etc/passwd"); !strings.Contains(res.Stdout, "No such file") || !strings.HasSuffix(res.Stdout, "0\n") {
		r.breach("FS-07: an entry landed outside the destination in the sandbox: %q", res.Stdout)
	}
	return nil
}

// --- RS-11: archive bombs -----------------------------------------------------------

func rs11Setup(r *run) error {
	r.create(map[string]any{"disk_mb": 64})
	return nil
}

func rs11Control(r *run) error {
	st, b := r.putArchive("rs11-ctl", bytes.NewReader(gzipOf(arTar(r.t, arFile("d/f", "control")))), "")
	if st != 200 || r.sh(r.a(), "cat rs11-ctl/d/f").Stdout != "control" {
		return fmt.Errorf("control: a benign tar.gz = %d %.300s", st, b)
	}
	return nil
}

// zerosBomb is a gzip stream of a tar of files of 32 MiB of zeros, about
// 32 KiB on the wire each.
func zerosBomb(files int) io.Reader {
	zmember := gzipOf(make([]byte, 32<<20))
	var parts []io.Reader
	for i := range files {
		var hb bytes.Buffer
		tw := tar.NewWriter(&hb)
		tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("bomb/z%04d", i), Typeflag: tar.TypeReg, Size: 32 << 20, Mode: 0o644})
		parts = append(parts, bytes.NewReader(gzipOf(hb.Bytes())), bytes.NewReader(zmember))
	}
	return io.MultiReader(append(parts, bytes.NewReader(gzipOf(make([]byte, 1024))))...)
}

// fifoFlood is a gzip stream of n FIFO entries in directories of 2000: each
// costs the archive 512 bytes and the agent no file.
func fifoFlood(n int) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		zw, _ := gzip.NewWriterLevel(pw, gzip.BestSpeed)
		tw := tar.NewWriter(zw)
		var err error
		for i := 0; i < n && err == nil; i++ {
			err = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("m/%04d/%07d", i/2000, i), Typeflag: tar.TypeFifo, Mode: 0o644})
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

func rs11Attack(r *run) error {
	id := r.a()
	w := r.d.rssWatch()
	defer w.stop()
	began := time.Now()
	for _, p := range []struct {
		name, dir, query string
		body             func() io.Reader
		phrase           []string
	}{
		{"128 MiB of zeros in ~130 KB of gzip, disk_mb 64", "rs11-gz", "", func() io.Reader { return zerosBomb(4) }, []string{"disk_mb", "67108864"}},
		{"the same, max_bytes 16 MiB", "rs11-gz", "&max_bytes=" + fmt.Sprint(16<<20), func() io.Reader { return zerosBomb(4) }, []string{"max_bytes", "16777216"}},
		{"one entry announcing 10 GiB", "rs11-10g", "", tenGiBEntry, []string{"disk_mb"}},
		{"3 million entries", "rs11-many", "", func() io.Reader { return fifoFlood(3_000_000) }, []string{"max_entries", "100000"}},
		{"one entry 500 levels deep", "rs11-deep", "", func() io.Reader {
			return bytes.NewReader(arTar(r.t, arFile(strings.Repeat("d/", 500)+"f", "x")))
		}, []string{"max_depth"}},
		{"a zip inside a tar, inside a tar", "rs11-nested", "", func() io.Reader {
			inner := arTar(r.t, arFile("bomb.zip", "PK\x03\x04 not unpacked"), arFile("inner.tar.gz", string(gzipOf(arTar(r.t, arFile("x", "x"))))))
			return bytes.NewReader(arTar(r.t, arFile("outer.tar", string(inner))))
		}, nil},
	} {
		st, b := r.putArchive(p.dir, p.body(), p.query)
		if p.phrase == nil {
			// Nested archives are files like any other: stored, never opened.
			if res := r.sh(id, "ls "+p.dir); st != 200 || res.Stdout != "outer.tar\n" {
				r.breach("RS-11 %s: %d %.200s, sandbox sees %q: want stored as one file", p.name, st, b, res.Stdout)
			}
			continue
		}
		r.archiveErr("RS-11 "+p.name, st, b, 413, "out_of_range", p.phrase[0])
		for _, ph := range p.phrase[1:] {
			if !strings.Contains(string(b), ph) {
				r.breach("RS-11 %s: the error does not name %q: %.300s", p.name, ph, b)
			}
		}
		if res := r.sh(id, "test -e "+p.dir+" && echo present || echo gone"); res.Stdout != "gone\n" {
			r.breach("RS-11 %s: %s remains after the cap", p.name, p.dir)
		}
	}
	r.note("five bombs refused and cleaned up in %s", time.Since(began).Round(100*time.Millisecond))
	if res := r.sh(id, "echo alive"); res.Stdout != "alive\n" {
		r.breach("RS-11: the sandbox after the bombs: %+v", res)
	}
	peak, start := w.stop()
	r.note("daemon RSS %d MiB at the start, peak %d MiB", start>>20, peak>>20)
	if peak-start > rssBudget {
		r.breach("RS-11: daemon RSS grew by %d MiB (budget %d MiB): it must stream", (peak-start)>>20, rssBudget>>20)
	}
	return nil
}
