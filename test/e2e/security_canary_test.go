// This file implements the host canaries of SECURITY.md §4.3, set up once per
// catalogue run and checked after every row: a host file watched with inotify,
// a loopback TCP and a unix listener logging accepts, a sibling sandbox B with
// secrets, host state (binary hashes, sysctls), and the scan of everything a
// row produced for the canary values. It also holds the per-backend daemon and
// its leak baseline (§4.4).

package e2e

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// randHex returns n random bytes in hex.
func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// suite holds the canaries of one catalogue run.
type suite struct {
	dir         string // test-owned host directory, outside every sandbox view
	canaryFile  string
	canaryValue string // 32 random bytes, hex

	inotifyFD int
	closed    atomic.Bool
	mu        sync.Mutex
	events    []string // guarded by mu: inotify events since the last reset

	tcp, unixLn net.Listener
	acceptsMu   sync.Mutex
	accepts     []string // guarded by acceptsMu: every accept since the last reset

	hostMarker string    // argv of a host process no sandbox may see
	hostProc   *exec.Cmd // that process
	hostState  map[string]string
	wg         sync.WaitGroup
}

// inotify events a read, a write or a change of the canary makes.
const canaryEvents = unix.IN_OPEN | unix.IN_ACCESS | unix.IN_MODIFY | unix.IN_ATTRIB |
	unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

// dirEvents are what a new, moved or removed entry in the canary directory makes.
const dirEvents = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_ATTRIB

func newSuite(t *testing.T) *suite {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbx-canary-")
	if err != nil {
		t.Fatal(err)
	}
	s := &suite{dir: dir, canaryValue: randHex(32), canaryFile: filepath.Join(dir, "canary")}
	if err := os.WriteFile(s.canaryFile, []byte(s.canaryValue+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.inotifyFD, err = unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	if _, err := unix.InotifyAddWatch(s.inotifyFD, s.canaryFile, canaryEvents); err != nil {
		t.Fatalf("watching the canary: %v", err)
	}
	if _, err := unix.InotifyAddWatch(s.inotifyFD, dir, dirEvents); err != nil {
		t.Fatalf("watching the canary directory: %v", err)
	}
	s.wg.Go(s.readEvents)

	if s.tcp, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if s.unixLn, err = net.Listen("unix", filepath.Join(dir, "canary.sock")); err != nil {
		t.Fatal(err)
	}
	for _, ln := range []net.Listener{s.tcp, s.unixLn} {
		s.wg.Go(func() { s.accept(ln) })
	}

	// A host process whose argv no sandbox may see (PR-01's far end).
	s.hostMarker = "sbx-host-canary-" + randHex(8)
	s.hostProc = exec.Command("/bin/sleep", "100000")
	s.hostProc.Args[0] = s.hostMarker
	if err := s.hostProc.Start(); err != nil {
		t.Fatal(err)
	}
	s.hostState = hostState()

	// Positive controls of the canaries themselves: an unmarked read of the
	// file, and a connect to each listener, must each be seen.
	if out, err := exec.Command("cat", s.canaryFile).Output(); err != nil || strings.TrimSpace(string(out)) != s.canaryValue {
		t.Fatalf("control: reading the canary: %v %q", err, out)
	}
	for _, a := range []net.Addr{s.tcp.Addr(), s.unixLn.Addr()} {
		c, err := net.Dial(a.Network(), a.String())
		if err != nil {
			t.Fatalf("control: dialing the canary listener %s: %v", a, err)
		}
		c.Close()
	}
	if !waitUntil(5*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.acceptsMu.Lock()
		defer s.acceptsMu.Unlock()
		return len(s.events) > 0 && len(s.accepts) == 2
	}) {
		t.Fatalf("control: the canaries saw nothing of a read and two connects (events %v, accepts %v)", s.events, s.accepts)
	}
	s.resetCanaries()
	return s
}

// readEvents logs every inotify event until the fd is closed.
func (s *suite) readEvents() {
	buf := make([]byte, 64<<10)
	for !s.closed.Load() {
		pfd := []unix.PollFd{{Fd: int32(s.inotifyFD), Events: unix.POLLIN}}
		if n, err := unix.Poll(pfd, 200); err != nil || n == 0 {
			continue // EINTR or a timeout: look at closed again
		}
		n, err := unix.Read(s.inotifyFD, buf)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			// struct inotify_event: wd, mask, cookie, len, then len bytes of name.
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+nameLen]), "\x00")
			if name == "" {
				name = "canary"
			}
			s.mu.Lock()
			if len(s.events) < 1000 {
				s.events = append(s.events, fmt.Sprintf("host canary: inotify %s on %q", maskNames(mask), name))
			}
			s.mu.Unlock()
			off += unix.SizeofInotifyEvent + nameLen
		}
	}
}

// maskNames spells an inotify mask.
func maskNames(m uint32) string {
	var out []string
	for _, n := range []struct {
		bit  uint32
		name string
	}{{unix.IN_OPEN, "open"}, {unix.IN_ACCESS, "access"}, {unix.IN_MODIFY, "modify"}, {unix.IN_ATTRIB, "attrib"},
		{unix.IN_CLOSE_WRITE, "close_write"}, {unix.IN_CREATE, "create"}, {unix.IN_DELETE, "delete"},
		{unix.IN_MOVED_FROM, "moved_from"}, {unix.IN_MOVED_TO, "moved_to"}, {unix.IN_DELETE_SELF, "delete_self"},
		{unix.IN_MOVE_SELF, "move_self"}} {
		if m&n.bit != 0 {
			out = append(out, n.name)
		}
	}
	if len(out) == 0 {
		return fmt.Sprintf("%#x", m)
	}
	return strings.Join(out, "|")
}

func (s *suite) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.acceptsMu.Lock()
		s.accepts = append(s.accepts, fmt.Sprintf("accept on %s from %s", ln.Addr(), c.RemoteAddr()))
		s.acceptsMu.Unlock()
		c.Close()
	}
}

// resetCanaries forgets what the canaries saw so far.
func (s *suite) resetCanaries() {
	s.mu.Lock()
	s.events = nil
	s.mu.Unlock()
	s.acceptsMu.Lock()
	s.accepts = nil
	s.acceptsMu.Unlock()
}

// hostState is what no sandbox may change: the binaries' hashes and the
// sysctls the catalogue targets.
func hostState() map[string]string {
	st := map[string]string{}
	for _, k := range []string{"kernel/core_pattern", "kernel/modprobe", "kernel/hostname", "kernel/domainname", "kernel/sysrq"} {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			st["sysctl "+k] = "absent"
			continue
		}
		st["sysctl "+k] = strings.TrimSpace(string(b))
	}
	st["sha256 "+sbxBin] = fileHash(sbxBin)
	return st
}

func fileHash(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func (s *suite) close() {
	s.tcp.Close()
	s.unixLn.Close()
	s.closed.Store(true)
	s.wg.Wait()
	unix.Close(s.inotifyFD)
	s.hostProc.Process.Kill()
	s.hostProc.Wait()
	os.RemoveAll(s.dir)
}

// checkEnd compares the canary file's content once every row has run.
func (s *suite) checkEnd(t *testing.T) {
	if b, err := os.ReadFile(s.canaryFile); err != nil || strings.TrimSpace(string(b)) != s.canaryValue {
		t.Errorf("CANARY TRIPPED: the host canary file changed: %v %q", err, b)
	}
}

// backendEnv is one daemon serving one backend, its sibling B and its leak
// baseline.
type backendEnv struct {
	name     string
	d        *daemon
	sibling  string // B's id
	bFile    string // the secret in B's /workspace/secret.txt
	bEnv     string // the secret in B's environment (SBX_CANARY_B)
	bHash    string
	bListen  bool // B runs a listener logging accepts (native only)
	bAccepts string
	workRoot string // host directory holding the sandboxes' own directories
	baseline map[string]bool
	fdBase   int
}

// startBackend starts a daemon for backend and its sibling sandbox B, and
// takes the leak baseline.
func (s *suite) startBackend(t *testing.T, backend string) *backendEnv {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbx-security-"+backend+"-")
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "SANDBOX_BACKEND="+backend, "SBX_POOL_SIZE=0")
	env := &backendEnv{name: backend, d: d, bFile: randHex(32), bEnv: randHex(32),
		workRoot: filepath.Join(dir, "backends", backend)}
	// B runs under the same API key as every row: tenants come later
	// (SECURITY.md §4.3 asks for another tenant's key).
	// B lives as long as the API allows: the soak variants run past the
	// default TTL.
	env.sibling = d.create(map[string]any{"env": map[string]string{"SBX_CANARY_B": env.bEnv}, "labels": map[string]string{"role": "sibling"}, "timeout": 3600})
	if st, b := d.apiQuiet("PUT", "/v1/sandboxes/"+env.sibling+"/files/write", map[string]any{"path": "secret.txt", "content": env.bFile}); st != 200 {
		t.Fatalf("writing B's secret: %d %s", st, b)
	}
	env.bListen = backend == backendNative
	if env.bListen {
		// B's listener on its own loopback logs every accept to a file.
		const listener = `import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7777)); s.listen(64)
while True:
    c, a = s.accept()
    open("/workspace/accepts.log", "a").write("%s\n" % (a,))
    c.close()`
		d.apiQuiet("PUT", "/v1/sandboxes/"+env.sibling+"/files/write", map[string]any{"path": "/workspace/listen.py", "content": listener})
		if st, b := d.apiQuiet("POST", "/v1/sandboxes/"+env.sibling+"/exec", map[string]any{"command": "python3 /workspace/listen.py", "background": true}); st != 202 {
			t.Fatalf("starting B's listener: %d %s", st, b)
		}
		// Control: B's own connect is logged.
		ok := waitUntil(10*time.Second, func() bool {
			_, b := d.apiQuiet("POST", "/v1/sandboxes/"+env.sibling+"/exec", map[string]any{"command": `python3 -c 'import socket; socket.create_connection(("127.0.0.1", 7777))' 2>/dev/null; cat /workspace/accepts.log 2>/dev/null | wc -l`})
			var r execResult
			json.Unmarshal(b, &r)
			return strings.TrimSpace(r.Stdout) != "" && strings.TrimSpace(r.Stdout) != "0"
		})
		if !ok {
			t.Fatalf("control: B's listener logged no accept of B's own connect")
		}
	}
	sig, err := s.siblingState(env)
	if err != nil {
		t.Fatalf("control: reading sibling B: %v", err)
	}
	env.bHash, env.bAccepts = sig.hash, sig.accepts
	if sig.env != env.bEnv {
		t.Fatalf("control: B's environment lacks its secret: %q", sig.env)
	}
	env.baseline = map[string]bool{}
	for _, l := range leaks(dir, d.instance) {
		env.baseline[l] = true
	}
	env.fdBase = daemonFDs(d)
	return env
}

// stopBackend deletes B, stops the daemon and audits the host.
func (s *suite) stopBackend(t *testing.T, env *backendEnv) {
	env.d.t = t
	env.d.cleanup()
	os.RemoveAll(env.d.dataDir)
}

type siblingSig struct{ hash, env, accepts string }

// siblingState reads B's secret file hash, its environment secret and its
// listener's accept count, through the harness's own unrecorded requests.
func (s *suite) siblingState(env *backendEnv) (siblingSig, error) {
	st, b := env.d.apiQuiet("POST", "/v1/sandboxes/"+env.sibling+"/exec", map[string]any{
		"command": "sha256sum secret.txt | cut -c1-64; printenv SBX_CANARY_B; cat accepts.log 2>/dev/null | wc -l"})
	if st != 200 {
		return siblingSig{}, fmt.Errorf("exec in B = %d %.200s", st, b)
	}
	var r execResult
	json.Unmarshal(b, &r)
	f := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(f) != 3 {
		return siblingSig{}, fmt.Errorf("exec in B printed %q", r.Stdout)
	}
	return siblingSig{hash: f[0], env: f[1], accepts: f[2]}, nil
}

// checkCanaries returns every canary the row tripped (§4.3).
func (s *suite) checkCanaries(t *testing.T, r *run, logStart int) []string {
	var trips []string
	time.Sleep(20 * time.Millisecond) // let the last inotify events arrive
	s.mu.Lock()
	trips = append(trips, s.events...)
	s.mu.Unlock()
	s.acceptsMu.Lock()
	trips = append(trips, s.accepts...)
	s.acceptsMu.Unlock()
	env := r.env
	if st, b := env.d.apiQuiet("GET", "/v1/sandboxes/"+env.sibling, nil); st != 200 || !strings.Contains(string(b), `"running"`) {
		trips = append(trips, fmt.Sprintf("sibling B is no longer running: %d %.200s", st, b))
	} else if sig, err := s.siblingState(env); err != nil {
		trips = append(trips, "sibling B: "+err.Error())
	} else {
		if sig.hash != env.bHash {
			trips = append(trips, "sibling B's secret file changed")
		}
		if sig.env != env.bEnv {
			trips = append(trips, "sibling B's environment changed")
		}
		if sig.accepts != env.bAccepts {
			trips = append(trips, fmt.Sprintf("sibling B's listener logged %s accepts, %s before the row", sig.accepts, env.bAccepts))
		}
	}
	now := hostState()
	for k, v := range s.hostState {
		if now[k] != v {
			trips = append(trips, fmt.Sprintf("host state %s changed: %q -> %q", k, v, now[k]))
		}
	}
	// Output scan: every response the row got, and the daemon's log lines.
	r.mu.Lock()
	out := r.recorded.String()
	r.mu.Unlock()
	logs := env.d.log.String()
	if logStart <= len(logs) {
		logs = logs[logStart:]
	}
	r.mu.Lock()
	for _, d := range r.private { // the row's own daemons: their whole log
		logs += d.log.String()
	}
	r.mu.Unlock()
	values := map[string]string{"host canary": s.canaryValue, "B's file secret": env.bFile, "B's env secret": env.bEnv, "host process argv": s.hostMarker}
	for name, v := range values {
		if strings.Contains(out, v) {
			trips = append(trips, fmt.Sprintf("output scan: %s found in the row's API responses", name))
		}
		if strings.Contains(logs, v) {
			trips = append(trips, fmt.Sprintf("output scan: %s found in the daemon's log", name))
		}
	}
	for _, v := range r.forbidden {
		if strings.Contains(out, v) {
			trips = append(trips, fmt.Sprintf("output scan: %q found in the row's API responses", v))
		}
	}
	return trips
}

// audit is the leak audit of §4.4 against the baseline: host residue of this
// instance, sandboxes beyond B, and the daemon's fds.
func (env *backendEnv) audit(t *testing.T) []string {
	found := leaksBeyond(env.d.dataDir, env.d.instance, env.baseline, 5*time.Second)
	var extra []string
	waitUntil(5*time.Second, func() bool {
		extra = nil
		st, b := env.d.apiQuiet("GET", "/v1/sandboxes", nil)
		var list struct {
			Sandboxes []struct{ ID, State string } `json:"sandboxes"`
		}
		json.Unmarshal(b, &list)
		if st != 200 {
			extra = append(extra, fmt.Sprintf("GET /v1/sandboxes = %d", st))
		}
		for _, sb := range list.Sandboxes {
			if sb.ID != env.sibling {
				extra = append(extra, fmt.Sprintf("store row %s in state %s", sb.ID, sb.State))
			}
		}
		return len(extra) == 0
	})
	found = append(found, extra...)
	const fdSlack = 8
	var fds int
	waitUntil(5*time.Second, func() bool {
		fds = daemonFDs(env.d)
		return fds <= env.fdBase+fdSlack
	})
	if fds > env.fdBase+fdSlack {
		found = append(found, fmt.Sprintf("daemon holds %d fds, %d at the start (slack %d)", fds, env.fdBase, fdSlack))
	}
	return found
}

// daemonFDs counts the daemon's open fds.
func daemonFDs(d *daemon) int {
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(d.cmd.Process.Pid) + "/fd")
	return len(ents)
}

// daemonRSS returns the daemon's resident set in bytes.
func daemonRSS(d *daemon) int64 {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(d.cmd.Process.Pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}

// hostPidsWith returns the host pids whose argv contains marker.
func hostPidsWith(marker string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), marker) {
			out = append(out, filepath.Base(filepath.Dir(p)))
		}
	}
	return out
}

// sandboxCgroups returns the host cgroup directories of sandbox id.
func sandboxCgroups(d *daemon, id string) []string {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/sbx/" + d.instance + "/" + id)
	if fi, err := os.Stat("/sys/fs/cgroup/sbx/" + d.instance + "/" + id); err == nil && fi.IsDir() {
		dirs = append(dirs, "/sys/fs/cgroup/sbx/"+d.instance+"/"+id)
	}
	return dirs
}
