// This file implements the FS rows of the attack catalogue (SECURITY.md §5):
// the file API and exec against paths, symlinks and races that lead out of
// the sandbox's own view.

package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// wire is the file-API path of rel in the sandbox's workspace: /workspace on
// native, the root of the confined tree on local.
func (r *run) wire(rel string) string {
	if r.backend == backendLocal {
		return "/" + rel
	}
	return "/workspace/" + rel
}

// shPath is wire path w as a shell in the sandbox names it: the same path
// inside the jail; on local, relative to the workspace (exec's default cwd).
func (r *run) shPath(w string) string {
	if r.backend == backendLocal {
		return "." + w
	}
	return w
}

// siblingHostPath is the host path of B's secret file.
func (r *run) siblingHostPath() string {
	return filepath.Join(r.env.workRoot, r.env.sibling, "workspace", "secret.txt")
}

// fileCall is one file-API request on path p of sandbox id.
type fileCall struct {
	op     string
	status int
	body   []byte
}

// q escapes a path for a query unless it is given already encoded.
func q(p string) string { return url.QueryEscape(p) }

// fileOps runs every file operation on p (query form: pq, already escaped),
// writing content where the operation writes. The returned calls are in the
// order run.
func (r *run) fileOps(id, p, pq, content string, writes bool) []fileCall {
	r.t.Helper()
	base := "/v1/sandboxes/" + id + "/files"
	var out []fileCall
	add := func(op string, st int, b []byte) { out = append(out, fileCall{op, st, b}) }
	st, b := r.api("GET", base+"/read?path="+pq, nil)
	add("read", st, b)
	st, b = r.raw("GET", base+"/download?path="+pq, nil, nil)
	add("download", st, b)
	st, b = r.api("GET", base+"/stat?path="+pq, nil)
	add("stat", st, b)
	st, b = r.api("GET", base+"/list?path="+pq, nil)
	add("list", st, b)
	st, b = r.api("GET", base+"/glob?pattern=*&path="+pq, nil)
	add("glob", st, b)
	st, b = r.api("GET", base+"/grep?pattern=.&path="+pq, nil)
	add("grep", st, b)
	if !writes {
		return out
	}
	st, b = r.api("PUT", base+"/write", map[string]any{"path": p, "content": content})
	add("write", st, b)
	st, b = r.raw("PUT", base+"/upload?path="+pq, strings.NewReader(content), nil)
	add("upload", st, b)
	st, b = r.api("POST", base+"/mkdir", map[string]any{"path": p + ".d"})
	add("mkdir", st, b)
	src := r.wire("mv-" + randHex(4))
	r.api("PUT", base+"/write", map[string]any{"path": src, "content": content})
	st, b = r.api("POST", base+"/move", map[string]any{"source": src, "destination": p + ".mv"})
	add("move-to", st, b)
	st, b = r.api("POST", base+"/move", map[string]any{"source": p, "destination": r.wire("moved-" + randHex(4))})
	add("move-from", st, b)
	st, b = r.api("DELETE", base+"?path="+pq, nil)
	add("remove", st, b)
	return out
}

// judgeCalls records as breaches the answers SECURITY.md does not allow for a
// hostile path: a 5xx, or a 400 that does not name its field. 2xx answers are
// checked by the caller (resolution inside), 404 is resolution inside the
// sandbox that found nothing.
func (r *run) judgeCalls(what string, calls []fileCall) (ok2xx []fileCall) {
	for _, c := range calls {
		switch {
		case c.status >= 500:
			r.breach("%s: %s = %d %.200s (a 5xx for a hostile path)", what, c.op, c.status, c.body)
		case c.status == 400:
			var e errorBody
			json.Unmarshal(c.body, &e)
			if !strings.Contains(e.Error.Message, "path") && !strings.Contains(e.Error.Message, "source") &&
				!strings.Contains(e.Error.Message, "destination") && !strings.Contains(e.Error.Message, "pattern") {
				r.breach("%s: %s = 400 %q does not name the field", what, c.op, e.Error.Message)
			}
		case c.status >= 200 && c.status < 300:
			ok2xx = append(ok2xx, c)
		}
	}
	return ok2xx
}

// hostDirEntries lists the canary directory, which no row may change.
func (r *run) hostDirEntries() []string {
	ents, _ := os.ReadDir(r.s.dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// checkHostDir records a breach when the canary directory holds anything
// beyond the canary file and socket.
func (r *run) checkHostDir() {
	for _, n := range r.hostDirEntries() {
		if n != "canary" && n != "canary.sock" {
			r.breach("host directory %s gained %q", r.s.dir, n)
		}
	}
}

// fileControl is the positive control of the FS rows: the same operations on
// a workspace file succeed, and the sandbox itself sees what they wrote.
func (r *run) fileControl(id string) error {
	content := "ctl-" + randHex(8)
	p := r.wire("ctl-" + randHex(4))
	calls := r.fileOps(id, p, q(p), content, true)
	want := map[string]int{"write": 200, "upload": 200, "mkdir": 200, "move-to": 200, "move-from": 200, "remove": 204}
	for _, c := range calls {
		if w, ok := want[c.op]; ok && c.status != w {
			return fmt.Errorf("control %s %s = %d %.200s", c.op, p, c.status, c.body)
		}
	}
	// The far end: the sandbox sees the upload (write ran first, upload
	// replaced it), the directory, and the moved file.
	res := r.sh(id, fmt.Sprintf("cat %s.mv; echo; test -d %s.d && echo dir", r.shPath(p), r.shPath(p)))
	if res.Stdout != content+"\ndir\n" {
		return fmt.Errorf("control: the sandbox does not see what the API wrote: %+v", res)
	}
	// And a read returns the sandbox's own content.
	r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": p, "content": content})
	st, b := r.api("GET", "/v1/sandboxes/"+id+"/files/read?path="+q(p), nil)
	if st != 200 || !strings.Contains(string(b), content) {
		return fmt.Errorf("control: read %s = %d %.200s", p, st, b)
	}
	return nil
}

// --- FS-01: hostile path spellings -------------------------------------------------

type hostilePath struct {
	name string
	p    string // as a JSON body carries it
	pq   string // as a query carries it, escaped
}

func (r *run) fs01Paths() []hostilePath {
	c := r.s.canaryFile
	rel := strings.TrimPrefix(c, "/")
	hp := []hostilePath{
		{"host canary, absolute", c, q(c)},
		{"../ climb to the canary", strings.Repeat("../", 12) + rel, q(strings.Repeat("../", 12) + rel)},
		{"/workspace/../ climb", "/workspace/" + strings.Repeat("../", 12) + rel, q("/workspace/" + strings.Repeat("../", 12) + rel)},
		{"..%2f once encoded", strings.Repeat("..%2f", 12) + rel, strings.Repeat("..%2f", 12) + q(rel)},
		{"..%252f double encoded", strings.Repeat("..%252f", 12) + rel, strings.Repeat("..%25252f", 12) + q(rel)},
		{"backslashes", strings.Repeat(`..\`, 12) + strings.ReplaceAll(rel, "/", `\`), q(strings.Repeat(`..\`, 12) + strings.ReplaceAll(rel, "/", `\`))},
		{"/etc/shadow", "/etc/shadow", q("/etc/shadow")},
		{"../../etc/shadow", "../../etc/shadow", q("../../etc/shadow")},
		{"B's host path", r.siblingHostPath(), q(r.siblingHostPath())},
		{"64 KiB path", strings.Repeat("a/", 32<<10), q(strings.Repeat("a/", 32<<10))},
	}
	return hp
}

func fs01Setup(r *run) error {
	r.create(nil)
	return nil
}

func fs01Control(r *run) error { return r.fileControl(r.a()) }

func fs01Attack(r *run) error {
	id := r.a()
	content := "fs01-" + randHex(8)
	for _, h := range r.fs01Paths() {
		calls := r.fileOps(id, h.p, h.pq, content, true)
		for _, c := range r.judgeCalls("FS-01 "+h.name, calls) {
			if (c.op == "read" || c.op == "download") && !strings.Contains(string(c.body), content) && len(c.body) > 0 && h.name != "/etc/shadow" {
				// Anything read must be what the row itself wrote inside.
				r.note("%s: %s = 200 with %d bytes not written by the row", h.name, c.op, len(c.body))
			}
			if h.name == "/etc/shadow" || h.name == "../../etc/shadow" {
				// The sandbox has a shadow file of its own accounts, locked;
				// the host's, or any password hash, must never show.
				host, _ := os.ReadFile("/etc/shadow")
				if (c.op == "read" || c.op == "download") && r.backend == backendNative && len(c.body) > 0 &&
					(string(c.body) == string(host) || strings.Contains(string(c.body), ":$")) {
					r.breach("%s: %s = 200: the host's shadow file is in the sandbox's view", h.name, c.op)
				}
			}
		}
	}
	// NUL cannot go in a JSON path or a query unnoticed: 400 naming the field.
	for _, c := range []struct{ method, path string }{
		{"GET", "/files/read?path=" + q(r.s.canaryFile+"\x00.txt")},
		{"GET", "/files/download?path=" + q(r.s.canaryFile+"\x00")},
	} {
		st, b := r.api(c.method, "/v1/sandboxes/"+id+c.path, nil)
		if st != 400 || !strings.Contains(string(b), "path") {
			r.breach("FS-01 NUL: %s %s = %d %.200s, want 400 naming path", c.method, c.path, st, b)
		}
	}
	st, b := r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": r.s.canaryFile + "\x00x", "content": content})
	if st != 400 || !strings.Contains(string(b), "path") {
		r.breach("FS-01 NUL: write = %d %.200s, want 400 naming path", st, b)
	}
	r.set("content", content)
	return nil
}

func fs01Evidence(r *run) error {
	r.checkHostDir()
	// What the row wrote under the canary's path must have landed in the
	// sandbox's own view.
	w := r.s.canaryFile
	res := r.sh(r.a(), "cat "+r.shPath(w)+" 2>/dev/null; true")
	if res.Stdout != "" && !strings.Contains(res.Stdout, r.get("content")) {
		r.breach("FS-01: the sandbox's %s holds %q, not what the row wrote", w, res.Stdout)
	}
	return nil
}

// --- FS-02: planted final-component symlinks ---------------------------------------

func fs02Setup(r *run) error {
	id := r.create(nil)
	marker := "fs02-own-view-" + randHex(4)
	r.set("marker", marker)
	cmd := fmt.Sprintf("echo ctl > ctl.txt && ln -s ctl.txt l-ctl && ln -s /etc/passwd l-passwd && ln -s /etc/shadow l-shadow && ln -s %s l-canary && ln -s %s l-b",
		r.s.canaryFile, r.siblingHostPath())
	if r.backend == backendNative {
		// Mark the sandbox's own /etc/passwd, so a read through the link
		// shows whose file it reached.
		cmd += " && echo " + marker + " >> /etc/passwd"
	}
	if res := r.sh(id, cmd); res.ExitCode != 0 {
		return fmt.Errorf("planting symlinks: %+v", res)
	}
	return nil
}

func fs02Control(r *run) error {
	id := r.a()
	st, b := r.api("GET", "/v1/sandboxes/"+id+"/files/read?path="+q(r.wire("l-ctl")), nil)
	if st != 200 || !strings.Contains(string(b), "ctl") {
		return fmt.Errorf("control: read through l-ctl = %d %.200s", st, b)
	}
	v := "ctl-" + randHex(8)
	if st, b := r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": r.wire("l-ctl"), "content": v}); st != 200 {
		return fmt.Errorf("control: write through l-ctl = %d %.200s", st, b)
	}
	if res := r.sh(id, "cat ctl.txt"); res.Stdout != v {
		return fmt.Errorf("control: the write through l-ctl did not reach ctl.txt: %q", res.Stdout)
	}
	return nil
}

func fs02Attack(r *run) error {
	id := r.a()
	base := "/v1/sandboxes/" + id + "/files"
	for _, l := range []string{"l-passwd", "l-shadow", "l-canary", "l-b"} {
		p := r.wire(l)
		calls := r.fileOps(id, p, q(p), "", false)
		for _, c := range r.judgeCalls("FS-02 "+l, calls) {
			if c.op != "read" && c.op != "download" {
				continue
			}
			switch {
			case l == "l-passwd" && r.backend == backendNative && !strings.Contains(string(c.body), r.get("marker")):
				r.breach("FS-02 %s: %s returned a passwd file without the sandbox's own marker: not its own view", l, c.op)
			case l == "l-passwd" && r.backend == backendLocal:
				r.breach("FS-02 %s: %s = 200 on local: the link led out of the workspace", l, c.op)
			case l == "l-shadow" && r.backend == backendLocal:
				r.breach("FS-02 %s: %s = 200 on local: the host's shadow file was read", l, c.op)
			case l == "l-shadow" && strings.Contains(string(c.body), ":$"):
				// The sandbox's own shadow file holds its accounts, locked;
				// a password hash means the host's.
				r.breach("FS-02 %s: %s = 200 with a password hash: the host's shadow file", l, c.op)
			}
		}
	}
	// Writes go through the links to the canary and to B only: those are the
	// targets the canaries watch.
	for _, l := range []string{"l-canary", "l-b"} {
		p := r.wire(l)
		v := "fs02-" + randHex(8)
		st, b := r.api("PUT", base+"/write", map[string]any{"path": p, "content": v})
		r.judgeCalls("FS-02 write "+l, []fileCall{{"write", st, b}})
		st, b = r.api("PUT", base+"/write", map[string]any{"path": p, "content": v, "append": true})
		r.judgeCalls("FS-02 append "+l, []fileCall{{"append", st, b}})
		st, b = r.raw("PUT", base+"/upload?path="+q(p), strings.NewReader(v), nil)
		r.judgeCalls("FS-02 upload "+l, []fileCall{{"upload", st, b}})
	}
	return nil
}

func fs02Evidence(r *run) error {
	r.checkHostDir()
	return nil
}

// --- FS-03: an intermediate symlink to / -------------------------------------------

func fs03Setup(r *run) error {
	id := r.create(nil)
	if res := r.sh(id, "ln -s / r && mkdir sub && ln -s sub r2"); res.ExitCode != 0 {
		return fmt.Errorf("planting r -> /: %+v", res)
	}
	return nil
}

func fs03Control(r *run) error {
	id := r.a()
	v := "fs03-ctl-" + randHex(4)
	if st, b := r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": r.wire("r2/x"), "content": v}); st != 200 {
		return fmt.Errorf("control: write r2/x = %d %.200s", st, b)
	}
	if st, b := r.api("POST", "/v1/sandboxes/"+id+"/files/mkdir", map[string]any{"path": r.wire("r2/d")}); st != 200 {
		return fmt.Errorf("control: mkdir r2/d = %d %.200s", st, b)
	}
	if res := r.sh(id, "cat sub/x && test -d sub/d"); res.Stdout != v {
		return fmt.Errorf("control: the sandbox does not see r2/x and r2/d: %+v", res)
	}
	return nil
}

func fs03Attack(r *run) error {
	id := r.a()
	base := "/v1/sandboxes/" + id + "/files"
	v := "fs03-" + randHex(8)
	r.set("content", v)
	target := r.wire("r" + r.s.dir + "/fs03")
	calls := []fileCall{}
	st, b := r.api("PUT", base+"/write", map[string]any{"path": target + "-w", "content": v})
	calls = append(calls, fileCall{"write", st, b})
	st, b = r.api("POST", base+"/mkdir", map[string]any{"path": target + "-d/sub"})
	calls = append(calls, fileCall{"mkdir", st, b})
	st, b = r.raw("PUT", base+"/upload?path="+q(target+"-u"), strings.NewReader(v), nil)
	calls = append(calls, fileCall{"upload", st, b})
	st, b = r.api("PUT", base+"/write", map[string]any{"path": r.wire("r" + r.s.canaryFile), "content": v})
	calls = append(calls, fileCall{"write canary", st, b})
	src := r.wire("mv-src")
	r.api("PUT", base+"/write", map[string]any{"path": src, "content": v})
	st, b = r.api("POST", base+"/move", map[string]any{"source": src, "destination": target + "-m"})
	calls = append(calls, fileCall{"move", st, b})
	// The old e2e marker: a write through r to the host's /tmp.
	marker := fmt.Sprintf("/tmp/sbx-e2e-marker-%s", id)
	r.set("marker", marker)
	st, b = r.api("PUT", base+"/write", map[string]any{"path": r.wire("r" + marker), "content": "x"})
	calls = append(calls, fileCall{"write /tmp marker", st, b})
	ok := r.judgeCalls("FS-03", calls)
	r.note("%d of %d writes through r -> / answered 2xx (in the sandbox's own view)", len(ok), len(calls))
	return nil
}

func fs03Evidence(r *run) error {
	r.checkHostDir()
	if _, err := os.Lstat(r.get("marker")); err == nil {
		r.breach("FS-03: a write through r -> / reached the host at %s", r.get("marker"))
		os.Remove(r.get("marker"))
	}
	if r.backend == backendNative {
		// On native the writes resolve in the jail: they must be there.
		if res := r.sh(r.a(), "cat "+r.get("marker")); res.ExitCode != 0 || res.Stdout != "x" {
			r.breach("FS-03: the write through r -> / is not in the sandbox's own /tmp: %+v", res)
		}
	}
	return nil
}

// --- FS-04: the RENAME_EXCHANGE race -----------------------------------------------

// fs04Racer swaps "race" (a directory) and "race-x" (a symlink leading out)
// with renameat2(RENAME_EXCHANGE) until its time is up and it has done at
// least 10k swaps, then writes the count.
const fs04Racer = `import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
end = time.time() + float(sys.argv[1])
n = 0
while n < 10000 or time.time() < end:
    for _ in range(1000):
        if libc.renameat2(AT_FDCWD, b"race", AT_FDCWD, b"race-x", RENAME_EXCHANGE) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")
    n += 1000
open("race-count", "w").write(str(n))
`

func fs04Setup(r *run) error {
	id := r.create(nil)
	benign := "benign-" + randHex(4)
	r.set("benign", benign)
	if st, b := r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": r.wire("race.py"), "content": fs04Racer}); st != 200 {
		return fmt.Errorf("writing the racer: %d %s", st, b)
	}
	cmd := fmt.Sprintf("mkdir race && echo %s > race/canary && ln -s %s race-x", benign, r.s.dir)
	if res := r.sh(id, cmd); res.ExitCode != 0 {
		return fmt.Errorf("planting the race: %+v", res)
	}
	return nil
}

func fs04Control(r *run) error {
	// Before the race, race/ is a directory: both directions work.
	id := r.a()
	st, b := r.raw("GET", "/v1/sandboxes/"+id+"/files/download?path="+q(r.wire("race/canary")), nil, nil)
	if st != 200 || strings.TrimSpace(string(b)) != r.get("benign") {
		return fmt.Errorf("control: download race/canary = %d %.100s", st, b)
	}
	v := "fs04-ctl-" + randHex(4)
	if st, b := r.raw("PUT", "/v1/sandboxes/"+id+"/files/upload?path="+q(r.wire("race/up")), strings.NewReader(v), nil); st != 200 {
		return fmt.Errorf("control: upload race/up = %d %.100s", st, b)
	}
	if res := r.sh(id, "cat race/up"); res.Stdout != v {
		return fmt.Errorf("control: the sandbox does not see race/up: %+v", res)
	}
	return nil
}

func fs04Attack(r *run) error {
	dur := 10 * time.Second
	if soak() {
		dur = 60 * time.Second
	}
	return raceExchange(r, "FS-04", dur)
}

// raceExchange runs the RENAME_EXCHANGE racer fs04Setup planted in the first
// sandbox for dur while two clients upload to and download from the racing
// path, and checks the race was met from both sides (CVE-2021-30465 class).
func raceExchange(r *run, row string, dur time.Duration) error {
	id := r.a()
	bg := r.exec(id, map[string]any{"command": fmt.Sprintf("python3 race.py %d", int(dur.Seconds())), "background": true, "timeout": int(dur.Seconds()) + 120})
	if bg.ProcessID == "" {
		return fmt.Errorf("starting the racer: %+v", bg)
	}
	var ok, refused, calls atomic.Int64
	end := time.Now().Add(dur)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; time.Now().Before(end); i++ {
				var st int
				var b []byte
				switch (i + w) % 3 {
				case 0:
					st, b = r.raw("GET", "/v1/sandboxes/"+id+"/files/download?path="+q(r.wire("race/canary")), nil, nil)
				case 1:
					st, b = r.raw("PUT", "/v1/sandboxes/"+id+"/files/upload?path="+q(r.wire("race/fs04-up")), strings.NewReader("fs04"), nil)
				case 2:
					st, b = r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": r.wire("race/fs04-w"), "content": "fs04"})
				}
				calls.Add(1)
				switch {
				case st >= 500:
					r.breach("%s: a call during the race = %d %.200s", row, st, b)
				case st >= 200 && st < 300:
					ok.Add(1)
				default:
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	st, b := r.api("POST", "/v1/sandboxes/"+id+"/processes/"+bg.ProcessID+"/wait", map[string]any{"timeout": 120})
	if st != 200 {
		return fmt.Errorf("waiting for the racer: %d %s", st, b)
	}
	res := r.sh(id, "cat race-count")
	n, _ := strconv.Atoi(strings.TrimSpace(res.Stdout))
	r.note("%d swaps in-sandbox, %d client calls in %s (%d answered 2xx, %d refused)", n, calls.Load(), dur, ok.Load(), refused.Load())
	if n < 10000 {
		return fmt.Errorf("the racer did %d swaps, want >= 10000: %+v", n, res)
	}
	if ok.Load() == 0 || refused.Load() == 0 {
		// Both outcomes show the client really met both sides of the swap;
		// without them the row proves nothing.
		return fmt.Errorf("the race was not seen from both sides (2xx %d, refused %d)", ok.Load(), refused.Load())
	}
	return nil
}

func fs04Evidence(r *run) error {
	r.checkHostDir()
	return nil
}

// --- FS-05: creating below a parent symlink that leads out ------------------------

func fs05Setup(r *run) error {
	id := r.create(nil)
	if res := r.sh(id, fmt.Sprintf("ln -s %s out && ln -s / out2 && mkdir realdir && ln -s realdir in", r.s.dir)); res.ExitCode != 0 {
		return fmt.Errorf("planting out -> %s: %+v", r.s.dir, res)
	}
	return nil
}

func fs05Control(r *run) error {
	id := r.a()
	v := "fs05-ctl-" + randHex(4)
	if st, b := r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": r.wire("in/new"), "content": v}); st != 200 {
		return fmt.Errorf("control: write in/new = %d %.200s", st, b)
	}
	if res := r.sh(id, "cat realdir/new"); res.Stdout != v {
		return fmt.Errorf("control: realdir/new = %+v", res)
	}
	return nil
}

func fs05Attack(r *run) error {
	id := r.a()
	base := "/v1/sandboxes/" + id + "/files"
	v := "fs05-" + randHex(8)
	var calls []fileCall
	for _, p := range []string{r.wire("out/fs05-new"), r.wire("out2" + r.s.dir + "/fs05-new2")} {
		st, b := r.api("PUT", base+"/write", map[string]any{"path": p, "content": v})
		calls = append(calls, fileCall{"write " + p, st, b})
		st, b = r.raw("PUT", base+"/upload?path="+q(p+"-up"), strings.NewReader(v), nil)
		calls = append(calls, fileCall{"upload " + p, st, b})
		st, b = r.api("POST", base+"/mkdir", map[string]any{"path": p + "-d"})
		calls = append(calls, fileCall{"mkdir " + p, st, b})
		src := r.wire("mv-" + randHex(4))
		r.api("PUT", base+"/write", map[string]any{"path": src, "content": v})
		st, b = r.api("POST", base+"/move", map[string]any{"source": src, "destination": p + "-mv"})
		calls = append(calls, fileCall{"move " + p, st, b})
	}
	ok := r.judgeCalls("FS-05", calls)
	r.note("%d of %d creations below out -> host dir answered 2xx", len(ok), len(calls))
	return nil
}

func fs05Evidence(r *run) error {
	r.checkHostDir()
	return nil
}

// --- FS-14: A reaches for B -------------------------------------------------------

func fs14Setup(r *run) error {
	id := r.create(nil)
	own := "own-" + randHex(8)
	r.set("own", own)
	if res := r.sh(id, "echo "+own+" > own.txt"); res.ExitCode != 0 {
		return fmt.Errorf("writing A's own file: %+v", res)
	}
	return nil
}

func fs14Control(r *run) error {
	id := r.a()
	if res := r.sh(id, "cat own.txt /proc/self/root/workspace/own.txt"); res.Stdout != r.get("own")+"\n"+r.get("own")+"\n" {
		return fmt.Errorf("control: A's exec reading its own file: %+v", res)
	}
	st, b := r.api("GET", "/v1/sandboxes/"+id+"/files/read?path="+q("/workspace/own.txt"), nil)
	if st != 200 || !strings.Contains(string(b), r.get("own")) {
		return fmt.Errorf("control: A's file API reading its own file = %d %.200s", st, b)
	}
	return nil
}

func fs14Attack(r *run) error {
	id := r.a()
	hp := r.siblingHostPath()
	up := strings.Repeat("../", 40) + strings.TrimPrefix(hp, "/")
	// exec: the host path, every visible pid's root and cwd, and B's id as a
	// directory name anywhere in the view.
	cmds := []string{
		"cat " + hp,
		"for p in /proc/[0-9]*; do cat $p/root" + hp + " $p/root/workspace/secret.txt $p/cwd/secret.txt; done",
		"find / -xdev -name " + r.env.sibling + " 2>/dev/null | head",
		"cat " + up,
	}
	for _, c := range cmds {
		r.sh(id, c+" 2>/dev/null; true")
	}
	// exec with a working directory the agent resolves: its own fds and magic
	// links, then climbing out (CVE-2024-21626).
	for _, cwd := range []string{"/proc/self/cwd", "/proc/self/root", "/proc/1/root", "/proc/1/cwd"} {
		r.api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "cat " + up + " 2>/dev/null; true", "cwd": cwd})
	}
	escaped := 0
	for fd := range 32 {
		st, b := r.api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "cat " + up + " 2>/dev/null; pwd -P 2>/dev/null; true", "cwd": fmt.Sprintf("/proc/self/fd/%d", fd)})
		if st == 200 && strings.Contains(string(b), r.env.bFile) {
			escaped++
		}
	}
	if escaped > 0 {
		r.breach("FS-14: exec with cwd=/proc/self/fd/N climbed out of the jail and read B's secret (%d fds)", escaped)
	}
	// The file API, by B's host path and through /proc.
	for _, p := range []string{hp, "/proc/1/root" + hp, "/proc/self/root" + hp} {
		r.fileOps(id, p, q(p), "", false)
	}
	// B's id from another key: A's sandbox under a key of its own, whose
	// calls on B's id are those on an unknown id (AP-02 walks every route).
	k, _ := r.newRowKey("fs14-a", nil)
	a2, err := r.createAs(r.d, k, nil)
	if err != nil {
		return err
	}
	r.sandboxes = append(r.sandboxes, a2)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/sandboxes/" + r.env.sibling + "/files/read?path=secret.txt"},
		{"GET", "/v1/sandboxes/" + r.env.sibling + "/files/download?path=secret.txt"},
		{"POST", "/v1/sandboxes/" + r.env.sibling + "/exec"},
	} {
		st, _, b := r.call(r.d, k, c.method, c.path, map[string]any{"command": "cat secret.txt"}, nil)
		if st != 404 || strings.Contains(string(b), r.env.bFile) {
			r.breach("FS-14: another key's %s %s on B = %d %.200s, want 404", c.method, c.path, st, b)
		}
	}
	if res, err := r.execAs(r.d, k, a2, map[string]any{"command": "echo own"}); err != nil || res.Stdout != "own\n" {
		return fmt.Errorf("control: the other key in its own sandbox: %+v %v", res, err)
	}
	r.note("B is the admin key's; A's calls run under the admin key too (which sees every sandbox), and A2's under a key of its own, refused on B's id; no bind-mount API exists to try bind sources")
	return nil
}

// --- FS-15: pathological reads ----------------------------------------------------

func fs15Setup(r *run) error {
	id := r.create(nil)
	res := r.sh(id, "mkfifo fifo && truncate -s 100G sparse && head -c 1048576 /dev/urandom > ctl.bin && sha256sum ctl.bin | cut -c1-64")
	if res.ExitCode != 0 {
		return fmt.Errorf("preparing the files: %+v", res)
	}
	r.set("sum", strings.TrimSpace(res.Stdout))
	if bg := r.exec(id, map[string]any{"command": "yes > grow", "background": true, "timeout": 600}); bg.ProcessID == "" {
		return fmt.Errorf("starting the growing file: %+v", bg)
	}
	return nil
}

func fs15Control(r *run) error {
	id := r.a()
	st, b := r.raw("GET", "/v1/sandboxes/"+id+"/files/download?path="+q("/workspace/ctl.bin"), nil, nil)
	if st != 200 || len(b) != 1<<20 || fmt.Sprintf("%x", sha256Sum(b)) != r.get("sum") {
		return fmt.Errorf("control: download ctl.bin = %d, %d bytes", st, len(b))
	}
	st, b = r.api("GET", "/v1/sandboxes/"+id+"/files/read?path="+q("/workspace/ctl.bin")+"&limit=1048576", nil)
	var fc struct {
		ContentBase64 string `json:"content_base64"`
		Length        int64  `json:"length"`
	}
	json.Unmarshal(b, &fc)
	got, _ := base64.StdEncoding.DecodeString(fc.ContentBase64)
	if st != 200 || fmt.Sprintf("%x", sha256Sum(got)) != r.get("sum") {
		return fmt.Errorf("control: read ctl.bin = %d, length %d", st, fc.Length)
	}
	return nil
}

func fs15Attack(r *run) error {
	id := r.a()
	base := r.d.rssWatch()
	defer base.stop()
	client := &http.Client{Timeout: 30 * time.Second}
	for _, p := range []string{"/dev/zero", "/dev/urandom", "/proc/self/mem", "/proc/1/mem", "/workspace/fifo", "/workspace/sparse", "/workspace/grow"} {
		for _, qs := range []string{"", "&limit=8388608", "&limit=16777216", "&offset=4611686018427387904"} {
			began := time.Now()
			st, b, err := r.timedGet(client, "/v1/sandboxes/"+id+"/files/read?path="+q(p)+qs, 0)
			if err != nil {
				r.breach("FS-15: read %s%s did not answer within 30 s: %v", p, qs, err)
				continue
			}
			if st >= 500 {
				r.breach("FS-15: read %s%s = %d %.200s", p, qs, st, b)
			}
			var page struct {
				Length int64 `json:"length"`
			}
			json.Unmarshal(b, &page)
			if page.Length > 8<<20 {
				r.breach("FS-15: read %s%s answered %d bytes of content, over the 8 MiB page", p, qs, page.Length)
			}
			if len(b) > 16<<20 {
				r.note("read %s%s: %d MiB of JSON for %d MiB of content", p, qs, len(b)>>20, page.Length>>20)
			}
			if d := time.Since(began); d > 10*time.Second {
				r.note("read %s%s took %s", p, qs, d)
			}
		}
		// A download is a stream: read at most 64 MiB of it, then hang up.
		st, n, err := r.timedDownload(client, "/v1/sandboxes/"+id+"/files/download?path="+q(p), 64<<20)
		if err != nil {
			r.breach("FS-15: download %s: %v", p, err)
		} else if st >= 500 {
			r.breach("FS-15: download %s = %d", p, st)
		} else if st == 200 && p != "/workspace/sparse" && p != "/workspace/grow" {
			r.note("download %s = 200, %d bytes", p, n)
		}
	}
	if res := r.exec(id, map[string]any{"command": "echo alive", "timeout": 10}); res.Stdout != "alive\n" {
		r.breach("FS-15: the agent no longer answers after the reads: %+v", res)
	}
	// An 8 MiB page of NUL bytes is valid UTF-8 and goes out as JSON text,
	// six bytes per NUL: 48 MiB per response, built whole. This row allows
	// for that; the answer, not the budget, is what should shrink.
	const budget = rssBudget + 128<<20
	peak, start := base.stop()
	r.note("daemon RSS %d MiB at the start, peak %d MiB (budget +%d MiB: 8 MiB of NULs is 48 MiB of JSON)", start>>20, peak>>20, budget>>20)
	if peak-start > budget {
		r.breach("FS-15: daemon RSS grew by %d MiB (budget %d MiB)", (peak-start)>>20, budget>>20)
	}
	return nil
}

// --- FS-16: the confused deputy ---------------------------------------------------

func fs16Setup(r *run) error {
	id := r.create(nil)
	own := "own000-" + randHex(8)
	r.set("own", own)
	res := r.sh(id, "echo "+own+" > own000 && chown 1234:1234 own000 && chmod 000 own000 && ln -s /proc/1/fd dlink && ln -s /proc/1/environ envlink && ln -s /proc/sys/kernel/hostname hn")
	if res.ExitCode != 0 {
		return fmt.Errorf("preparing: %+v", res)
	}
	// The far end on the host: the agent's log file and its cgroups.
	r.set("agentlog", filepath.Join(r.env.workRoot, id, "agent.log"))
	// No response may name a host path of the daemon.
	r.forbidden = append(r.forbidden, r.d.dataDir, "/sys/fs/cgroup")
	return nil
}

func fs16Control(r *run) error {
	id := r.a()
	// The sandbox's identity (root, with the default capabilities) reads a
	// mode-000 file of another uid; the API, acting for it, reads the same.
	if res := r.sh(id, "cat own000"); res.Stdout != r.get("own")+"\n" {
		return fmt.Errorf("control: exec reading own000: %+v", res)
	}
	st, b := r.api("GET", "/v1/sandboxes/"+id+"/files/read?path="+q("/workspace/own000"), nil)
	if st != 200 || !strings.Contains(string(b), r.get("own")) {
		return fmt.Errorf("control: API reading own000 = %d %.200s", st, b)
	}
	// And the identity cannot reach the agent's own fds, environ or the
	// read-only /proc/sys: what the attack asks the API to do for it.
	for _, c := range []string{"readlink /proc/1/fd/2", "cat /proc/1/environ", "echo x > /proc/sys/kernel/hostname", "ls /proc/1/fd/0/"} {
		if res := r.sh(id, c); res.ExitCode == 0 {
			return fmt.Errorf("control: the sandbox identity itself can %q: %+v", c, res)
		}
	}
	return nil
}

func fs16Attack(r *run) error {
	id := r.a()
	base := "/v1/sandboxes/" + id + "/files"
	marker := "fs16-" + randHex(8)
	r.set("marker", marker)
	// Reads and listings through the agent's own fds, directly and through
	// the planted link.
	for _, p := range []string{"/proc/1/fd", "/workspace/dlink", "/proc/self/fd", "/proc/thread-self/fd"} {
		r.fileOps(id, p, q(p), "", false)
	}
	for fd := range 24 {
		for _, p := range []string{fmt.Sprintf("/proc/1/fd/%d", fd), fmt.Sprintf("/workspace/dlink/%d", fd)} {
			calls := r.fileOps(id, p, q(p), "", false)
			for _, c := range calls {
				if (c.op == "read" || c.op == "download") && c.status == 200 && !bytes.Contains(c.body, []byte(`"length":0`)) && len(c.body) > 0 && c.op == "download" {
					r.breach("FS-16: download %s = 200 with %d bytes of an agent fd", p, len(c.body))
				}
				if c.op == "list" && c.status == 200 {
					r.breach("FS-16: list %s = 200: the API opened a directory through an agent fd", p)
				}
			}
			// Writes and mkdir through the agent's fds land on the host.
			r.api("PUT", base+"/write", map[string]any{"path": p, "content": marker + "\n", "append": true})
			r.api("POST", base+"/mkdir", map[string]any{"path": p + "/" + marker})
		}
	}
	// The agent's environ and a read-only /proc/sys file, directly and by link.
	for _, p := range []string{"/proc/1/environ", "/workspace/envlink"} {
		st, b := r.api("GET", base+"/grep?pattern=PATH&path="+q(p), nil)
		if st == 200 && strings.Contains(string(b), "PATH=") {
			r.breach("FS-16: grep of %s returned the agent's environment: %.200s", p, b)
		}
		r.fileOps(id, p, q(p), "", false)
	}
	for _, p := range []string{"/proc/sys/kernel/hostname", "/workspace/hn"} {
		st, b := r.api("PUT", base+"/write", map[string]any{"path": p, "content": "fs16"})
		if st == 200 {
			r.breach("FS-16: write %s = 200: the API wrote what the sandbox identity cannot: %.200s", p, b)
		}
	}
	r.note("no chmod or chown route exists: only the mode of new files (write, upload) is settable; upload replaces a final symlink, never follows it")
	return nil
}

func fs16Evidence(r *run) error {
	marker := r.get("marker")
	if b, _ := os.ReadFile(r.get("agentlog")); bytes.Contains(b, []byte(marker)) {
		r.breach("FS-16: the API wrote into the host file %s through an agent fd", r.get("agentlog"))
	}
	for _, dir := range sandboxCgroups(r.d, r.a()) {
		var found []string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && strings.Contains(d.Name(), marker) {
				found = append(found, p)
			}
			return nil
		})
		for _, p := range found {
			r.breach("FS-16: the API made the host cgroup %s through an agent fd", p)
			os.Remove(p)
		}
	}
	return nil
}

// --- helpers shared by the rows that stream -----------------------------------------

// rssBudget is how much the daemon's RSS may grow during a row's attack: a
// few 8 MiB pages in flight, JSON-escaped (a NUL becomes six bytes), plus the
// garbage collector's headroom.
const rssBudget = 256 << 20

// rssWatcher samples the daemon's RSS until stopped.
type rssWatcher struct {
	start  int64
	peak   atomic.Int64
	cancel context.CancelFunc
	done   chan struct{}
}

func (d *daemon) rssWatch() *rssWatcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &rssWatcher{start: daemonRSS(d), cancel: cancel, done: make(chan struct{})}
	w.peak.Store(w.start)
	go func() {
		defer close(w.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if v := daemonRSS(d); v > w.peak.Load() {
					w.peak.Store(v)
				}
			}
		}
	}()
	return w
}

// stop ends the sampling (idempotent) and returns the peak and start.
func (w *rssWatcher) stop() (peak, start int64) {
	w.cancel()
	<-w.done
	return w.peak.Load(), w.start
}

// timedGet does GET path with client's timeout and records the body.
func (r *run) timedGet(client *http.Client, path string, _ int) (int, []byte, error) {
	req, _ := http.NewRequest("GET", r.d.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+r.d.key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	r.record(b)
	return resp.StatusCode, b, err
}

// timedDownload reads at most max bytes of a download, then hangs up. Only
// the first 4 KiB are kept for the output scan.
func (r *run) timedDownload(client *http.Client, path string, max int64) (int, int64, error) {
	req, _ := http.NewRequest("GET", r.d.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+r.d.key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var head bytes.Buffer
	n, err := io.Copy(io.MultiWriter(&limitedBuffer{b: &head, max: 4096}, io.Discard), io.LimitReader(resp.Body, max))
	r.record(head.Bytes())
	if err != nil && !strings.Contains(err.Error(), "Client.Timeout") {
		return resp.StatusCode, n, nil // the body ended early: the status is what counts
	}
	return resp.StatusCode, n, err
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
