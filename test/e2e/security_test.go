// This file implements the attack catalogue of SECURITY.md §5 as one table
// (catalogue) and its runner (TestSecurity). Each row runs, on every backend it
// names: setup → control (must succeed, its far end records it) → attack (must
// fail, its far end records nothing) → evidence check → canary check and
// output scan (§4.3) → teardown → leak audit (§4.4). The verdicts and a count
// per family are printed at the end (go test -v). The probes live beside this
// file, one file per family: security_fs_test.go, security_pr_test.go,
// security_rs_test.go, security_ap_test.go, plus security_more_test.go (PR-03,
// RS-14, AP-11, AP-14 and the rows' private daemons); the canaries in
// security_canary_test.go.

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// entry is one row of the catalogue. Adding a row is one entry here plus its
// probe functions.
type entry struct {
	id       string   // SECURITY.md's stable id: "FS-01"
	attack   string   // what the attack does, in a few words
	backends []string // where it runs (and must pass), of those selected
	// setup prepares the row (sandboxes, planted files); a failure is invalid.
	setup func(r *run) error
	// control runs the positive control: the same probe on an allowed target.
	// It returns an error when the control failed or its far end recorded
	// nothing: the row is then invalid.
	control func(r *run) error
	// attackProbe runs the attack. It records every success of the attack
	// with r.breach; it returns an error only when the probe itself could not
	// run (invalid).
	attackProbe func(r *run) error
	// evidence checks the far end once the attack is over (host files, logs,
	// the sibling), recording what it finds with r.breach. Optional.
	evidence func(r *run) error
}

const (
	backendNative = "native"
	backendLocal  = "local"
)

var (
	nativeOnly = []string{backendNative}
	// bothBackends is for the rows local runs too: the AP family and
	// FS-01…FS-05, whose file tools os.Root confines (SECURITY.md §4.1).
	bothBackends = []string{backendNative, backendLocal}
)

// catalogue is SECURITY.md §5's rows implemented so far, in its order.
var catalogue = []entry{
	{id: "FS-01", attack: "file API with ../, host paths, %2f, NUL, \\, 64 KiB paths", backends: bothBackends,
		setup: fs01Setup, control: fs01Control, attackProbe: fs01Attack, evidence: fs01Evidence},
	{id: "FS-02", attack: "planted final symlink to /etc/passwd, the canary, B", backends: bothBackends,
		setup: fs02Setup, control: fs02Control, attackProbe: fs02Attack, evidence: fs02Evidence},
	{id: "FS-03", attack: "intermediate symlink r -> /, write and mkdir r/…", backends: bothBackends,
		setup: fs03Setup, control: fs03Control, attackProbe: fs03Attack, evidence: fs03Evidence},
	{id: "FS-04", attack: "RENAME_EXCHANGE race dir <-> symlink under up/download", backends: bothBackends,
		setup: fs04Setup, control: fs04Control, attackProbe: fs04Attack, evidence: fs04Evidence},
	{id: "FS-05", attack: "create below a parent symlink leading out", backends: bothBackends,
		setup: fs05Setup, control: fs05Control, attackProbe: fs05Attack, evidence: fs05Evidence},
	{id: "FS-06", attack: "hard links to setuid, protected and /proc files, across the workspace", backends: nativeOnly,
		setup: oneSandbox, control: fs06Control, attackProbe: fs06Attack},
	{id: "FS-07", attack: "archive entries: ../, absolute, symlink then write, hardlinks, devices, setuid", backends: nativeOnly,
		setup: fs07Setup, control: fs07Control, attackProbe: fs07Attack, evidence: fs07Evidence},
	{id: "FS-08", attack: "magic links /proc/*/root, cwd, fd from inside and as API paths", backends: nativeOnly,
		setup: oneSandbox, control: fs08Control, attackProbe: fs08Attack},
	{id: "FS-09", attack: "leaked fds: /proc/self/fd in exec, cd /proc/self/fd/N, cwd=/proc/self/fd/N", backends: nativeOnly,
		setup: fs09Setup, control: fs09Control, attackProbe: fs09Attack},
	{id: "FS-10", attack: "write /proc/<pid>/exe of every process; #!/proc/self/exe", backends: nativeOnly,
		setup: oneSandbox, control: fs10Control, attackProbe: fs10Attack},
	{id: "FS-11", attack: "mount, umount of masks, remount rw, pivot_root, chroot, open_by_handle_at", backends: nativeOnly,
		setup: sysProbeSetup, control: sysProbeControl("FS-11"), attackProbe: fs11Attack},
	{id: "FS-12", attack: "hostile templates: /dev, /proc, /tmp, /workspace, /etc linked out, /dev/null -> core_pattern, a filled /proc", backends: nativeOnly,
		setup: fs12Setup, control: fs12Control, attackProbe: fs12Attack, evidence: fs12Evidence},
	{id: "FS-13", attack: "writes to /proc/sys, sysrq-trigger, core_pattern, uevent_helper, release_agent", backends: nativeOnly,
		setup: oneSandbox, control: fs13Control, attackProbe: fs13Attack},
	{id: "FS-14", attack: "A reaches B's host path by exec, file API, /proc/<pid>/root", backends: nativeOnly,
		setup: fs14Setup, control: fs14Control, attackProbe: fs14Attack},
	{id: "FS-15", attack: "API reads of /dev/zero, mem, FIFO, 100 GiB sparse, growing file", backends: nativeOnly,
		setup: fs15Setup, control: fs15Control, attackProbe: fs15Attack},
	{id: "FS-16", attack: "confused deputy: API through the agent's own rights", backends: nativeOnly,
		setup: fs16Setup, control: fs16Control, attackProbe: fs16Attack, evidence: fs16Evidence},

	{id: "PR-01", attack: "host pids: ps, /proc, kill -0 over 1…pid_max", backends: nativeOnly,
		setup: pr01Setup, control: pr01Control, attackProbe: pr01Attack},
	{id: "PR-02", attack: "ptrace, process_vm_readv, /proc/1/mem of the agent", backends: nativeOnly,
		setup: oneSandbox, control: pr02Control, attackProbe: pr02Attack},
	{id: "PR-03", attack: "kill(-1, SIGKILL) as sandbox root; the agent killed mid-exec", backends: nativeOnly,
		setup: pr03Setup, control: pr03Control, attackProbe: pr03Attack},
	{id: "PR-04", attack: "TIOCSTI, TIOCLINUX (and high bits) into a terminal", backends: nativeOnly,
		setup: oneSandbox, control: pr04Control, attackProbe: pr04Attack},
	{id: "PR-05", attack: "the host's SysV shm and abstract socket from inside", backends: nativeOnly,
		setup: pr05Setup, control: pr05Control, attackProbe: pr05Attack},
	{id: "PR-06", attack: "path unix sockets: engines, D-Bus, sbx.sock, inherited fds", backends: nativeOnly,
		setup: pr06Setup, control: pr06Control, attackProbe: pr06Attack},
	{id: "PR-07", attack: "survivors: setsid, double fork, TERM/HUP ignored, subreaper", backends: nativeOnly,
		setup: pr07Setup, control: pr07Control, attackProbe: pr07Attack},
	{id: "PR-08", attack: "zombie storm reparented to PID 1", backends: nativeOnly,
		setup: pr08Setup, control: pr08Control, attackProbe: pr08Attack},
	{id: "PR-09", attack: "API kill of a job, of an exited job, pid reuse", backends: nativeOnly,
		setup: pr09Setup, control: pr09Control, attackProbe: pr09Attack},

	{id: "PV-01", attack: "setuid binaries, su, sudo, newgrp as the sandbox's user", backends: nativeOnly,
		setup: oneSandbox, control: pv01Control, attackProbe: pv01Attack},
	{id: "PV-02", attack: "capability sets; SYS_ADMIN, NET_RAW, NET_ADMIN, SYS_PTRACE, SYS_CHROOT, MKNOD operations", backends: nativeOnly,
		setup: pv02Setup, control: pv02Control, attackProbe: pv02Attack},
	{id: "PV-03", attack: "nested user namespace (unshare -Urmn), as root and as a user", backends: nativeOnly,
		setup: pv03Setup, control: pv03Control, attackProbe: pv03Attack},
	{id: "PV-04", attack: "keyctl, add_key, request_key", backends: nativeOnly,
		setup: sysProbeSetup, control: sysProbeControl("PV-04"), attackProbe: sysProbeAttack("PV-04")},
	{id: "PV-05", attack: "bpf()", backends: nativeOnly,
		setup: sysProbeSetup, control: sysProbeControl("PV-05"), attackProbe: sysProbeAttack("PV-05")},
	{id: "PV-06", attack: "perf_event_open", backends: nativeOnly,
		setup: sysProbeSetup, control: sysProbeControl("PV-06"), attackProbe: sysProbeAttack("PV-06")},
	{id: "PV-07", attack: "io_uring_setup, io_uring_enter, io_uring_register", backends: nativeOnly,
		setup: sysProbeSetup, control: sysProbeControl("PV-07"), attackProbe: sysProbeAttack("PV-07")},
	{id: "PV-08", attack: "module load and unload, kexec", backends: nativeOnly,
		setup: sysProbeSetup, control: sysProbeControl("PV-08"), attackProbe: sysProbeAttack("PV-08")},
	{id: "PV-09", attack: "syscall sweep; i386 int 0x80 and x32 numbers", backends: nativeOnly,
		setup: sysProbeSetup, control: sysProbeControl("PV-09"), attackProbe: pv09Attack},
	{id: "PV-10", attack: "layers on agent, exec and background job against the report", backends: nativeOnly,
		setup: oneSandbox, control: pv10Control, attackProbe: pv10Attack},
	{id: "PV-11", attack: "fail closed: Landlock, seccomp, userns missing (fault hook)", backends: nativeOnly,
		control: pv11Control, attackProbe: pv11Attack},
	{id: "PV-12", attack: "devices: kvm, mem, block, tun, fuse, dri; mknod", backends: nativeOnly,
		setup: pv12Setup, control: pv12Control, attackProbe: pv12Attack},
	{id: "PV-13", attack: "exploit corpus: CVE-2019-5736, 2024-21626, 2022-0492, 2021-30465, 2022-0847", backends: nativeOnly,
		setup: pv13Setup, control: pv13Control, attackProbe: pv13Attack, evidence: pv13Evidence},

	{id: "RS-01", attack: "fork bomb under a pids limit of 64; a sibling and health meanwhile", backends: nativeOnly,
		setup: rs01Setup, control: rs01Control, attackProbe: rs01Attack},
	{id: "RS-02", attack: "memory bombs, one thread and eight", backends: nativeOnly,
		setup: rs02Setup, control: rs02Control, attackProbe: rs02Attack},
	{id: "RS-03", attack: "every core spinning, memory at the limit, client calls", backends: nativeOnly,
		setup: rs03Setup, control: rs03Control, attackProbe: rs03Attack},
	{id: "RS-04", attack: "disk fill (fallocate, dd) in the workspace and the writable layer; a btrfs subvolume or snapshot of its own", backends: nativeOnly,
		setup: rs04Setup, control: rs04Control, attackProbe: rs04Attack},
	{id: "RS-05", attack: "inode exhaustion: empty files until refused", backends: nativeOnly,
		setup: rs05Setup, control: rs05Control, attackProbe: rs05Attack},
	{id: "RS-06", attack: "fill /tmp and /dev/shm", backends: nativeOnly,
		setup: rs06Setup, control: rs06Control, attackProbe: rs06Attack},
	{id: "RS-07", attack: "output flood through exec, stream, background, slow reader", backends: nativeOnly,
		setup: rs07Setup, control: rs07Control, attackProbe: rs07Attack},
	{id: "RS-09", attack: "timeout: loop, TERM-ignoring child, setsid grandchild", backends: nativeOnly,
		setup: rs09Setup, control: rs09Control, attackProbe: rs09Attack},
	{id: "RS-10", attack: "uploads: GiB stream, chunked, slowloris, aborted", backends: nativeOnly,
		setup: rs10Setup, control: rs10Control, attackProbe: rs10Attack},
	{id: "RS-11", attack: "archive bombs: gzip ratio, 10 GiB entry, millions of entries, depth, nesting", backends: nativeOnly,
		setup: rs11Setup, control: rs11Control, attackProbe: rs11Attack},
	{id: "RS-12", attack: "one sandbox floods the egress proxy with 3000 connections", backends: nativeOnly,
		setup: nw15Setup, control: rs12Control, attackProbe: nw15Attack},
	{id: "RS-13", attack: "N sandboxes spinning; nproc and cpuinfo", backends: nativeOnly,
		setup: rs13Setup, control: rs13Control, attackProbe: rs13Attack},
	{id: "RS-14", attack: "creates beyond the per-key and global sandbox limits", backends: bothBackends,
		setup: rs14Setup, control: rs14Control, attackProbe: rs14Attack, evidence: rs14Evidence},

	{id: "NW-01", attack: "default tier: curl, wget, /dev/tcp, getent, ssh, UDP", backends: nativeOnly,
		setup: nw01Setup, control: nw01Control, attackProbe: nw01Attack},
	{id: "NW-02", attack: "a blocked domain through the proxy, HTTP and CONNECT", backends: nativeOnly,
		setup: nw02Setup, control: nw02Control, attackProbe: nw02Attack},
	{id: "NW-03", attack: "bypass: no proxy variables, raw sockets, own resolver", backends: nativeOnly,
		setup: nw03Setup, control: nw03Control, attackProbe: nw03Attack},
	{id: "NW-04", attack: "IP literals: dotted, decimal, octal, hex, ::ffff:, [::1]", backends: nativeOnly,
		setup: nw04Setup, control: nw04Control, attackProbe: nw04Attack},
	{id: "NW-05", attack: "fronting: SNI in a tunnel, Host to an IP, absolute URI vs Host", backends: nativeOnly,
		setup: nw05Setup, control: nw05Control, attackProbe: nw05Attack},
	{id: "NW-06", attack: "DNS exfiltration: lookups, TXT, direct UDP/TCP 53, DoH", backends: nativeOnly,
		setup: nw06Setup, control: nw06Control, attackProbe: nw06Attack},
	{id: "NW-07", attack: "IPv6: literals, fe80::, ULA, AAAA-only names", backends: nativeOnly,
		setup: nw07Setup, control: nw07Control, attackProbe: nw07Attack},
	{id: "NW-08", attack: "metadata by address (v4, v6, ECS, Alibaba), token flow, by name", backends: nativeOnly,
		setup: nw08Setup, control: nw08Control, attackProbe: nw08Attack},
	{id: "NW-09", attack: "the host's address, loopback by rebinding, the LAN, the gateway", backends: nativeOnly,
		setup: nw09Setup, control: nw09Control, attackProbe: nw09Attack},
	{id: "NW-10", attack: "sandbox A to B: address, ports, broadcast, mDNS, ARP", backends: nativeOnly,
		setup: nw10Setup, control: nw10Control, attackProbe: nw10Attack},
	{id: "NW-11", attack: "UDP/QUIC, ICMP, CONNECT to :22 and :25", backends: nativeOnly,
		setup: nw11Setup, control: nw11Control, attackProbe: nw11Attack},
	{id: "NW-12", attack: "proxy-mode secret: plain HTTP, other hosts, redirects, the sandbox's env and files", backends: nativeOnly,
		setup: nw12Setup, control: nw12Control, attackProbe: nw12Attack},
	{id: "NW-13", attack: "A speaks to the proxy as B, or from a spoofed address", backends: nativeOnly,
		setup: nw13Setup, control: nw13Control, attackProbe: nw13Attack},
	{id: "NW-14", attack: "a blocked connection whose handshake completes at the proxy", backends: nativeOnly,
		setup: nw14Setup, control: nw14Control, attackProbe: nw14Attack},
	{id: "NW-15", attack: "64 MiB PUT in a tunnel; 3000 held connections, slowloris", backends: nativeOnly,
		setup: nw15Setup, control: nw15Control, attackProbe: nw15Attack},
	{id: "NW-16", attack: "tighten a running sandbox's policy", backends: nativeOnly,
		setup: nw16Setup, control: nw16Control, attackProbe: nw16Attack},

	{id: "AP-01", attack: "router walk with missing, malformed, revoked keys", backends: bothBackends,
		control: ap01Control, attackProbe: ap01Attack},
	{id: "AP-02", attack: "key A on key B's sandbox ids: every /v1 route, E2B's planes, lists", backends: bothBackends,
		setup: ap02Setup, control: ap02Control, attackProbe: ap02Attack, evidence: ap02Evidence},
	{id: "AP-03", attack: "id guessing: entropy, unknown vs deleted vs malformed", backends: bothBackends,
		control: ap03Control, attackProbe: ap03Attack},
	{id: "AP-04", attack: "token scope: E2B and preview tokens on a sibling and on management routes; exec without sandbox.exec", backends: bothBackends,
		setup: ap04Setup, control: ap04Control, attackProbe: ap04Attack, evidence: ap04Evidence},
	{id: "AP-05", attack: "env and proxy secrets used every way, then logs, audit, files, argv, environ searched", backends: nativeOnly,
		setup: ap05Setup, control: ap05Control, attackProbe: ap05Attack},
	{id: "AP-06", attack: "raw keys at rest, in logs, echoed in errors", backends: bothBackends,
		control: ap06Control, attackProbe: ap06Attack},
	{id: "AP-07", attack: "hostile JSON: 100 MB, nesting, arrays, dup keys, bad UTF-8", backends: bothBackends,
		control: ap07Control, attackProbe: ap07Attack},
	{id: "AP-08", attack: "request smuggling through the egress proxy: CL.TE, TE.CL, TE.TE, CRLF", backends: nativeOnly,
		setup: ap08Setup, control: ap08Control, attackProbe: ap08Attack},
	{id: "AP-09", attack: "injection through argv, cwd, env names, filenames", backends: bothBackends,
		setup: ap09Setup, control: ap09Control, attackProbe: ap09Attack, evidence: ap09Evidence},
	{id: "AP-10", attack: "MCP over HTTP: foreign origin, rebinding, A's session on B's sandbox, instruction-like output", backends: nativeOnly,
		setup: ap10Setup, control: ap10Control, attackProbe: ap10Attack, evidence: ap10Evidence},
	{id: "AP-11", attack: "per-key create rate, live sandboxes, exec rate", backends: bothBackends,
		setup: ap11Setup, control: ap11Control, attackProbe: ap11Attack, evidence: ap11Evidence},
	{id: "AP-12", attack: "schema fuzzing over the OpenAPI document", backends: bothBackends,
		setup: ap12Setup, control: ap12Control, attackProbe: ap12Attack},
	{id: "AP-13", attack: "browser paths: preview cookie and terminal WebSocket from a foreign origin (CSRF)", backends: nativeOnly,
		setup: ap13Setup, control: ap13Control, attackProbe: ap13Attack, evidence: ap13Evidence},
	{id: "AP-14", attack: "secrets in argv, env, stdin, files vs the audit log", backends: bothBackends,
		setup: ap14Setup, control: ap14Control, attackProbe: ap14Attack},
}

// Verdicts, SECURITY.md §4.1.
const (
	verdictPass    = "pass"
	verdictFail    = "fail"
	verdictInvalid = "invalid"
	verdictLeak    = "leak"
	verdictSkip    = "skip"
)

// result is one line of the verdict table.
type result struct {
	id, backend                        string
	attack, control, canaries, leakCol string
	verdict                            string
	notes                              []string
}

// soak reports whether the full variants run (SBX_SOAK=1) instead of the
// short ones `make test` runs.
func soak() bool { return os.Getenv("SBX_SOAK") == "1" }

// selectedBackends reads SBX_TEST_BACKENDS (default: native,local).
func selectedBackends() []string {
	v := os.Getenv("SBX_TEST_BACKENDS")
	if v == "" {
		v = backendNative + "," + backendLocal
	}
	var out []string
	for _, b := range strings.Split(v, ",") {
		if b = strings.TrimSpace(b); b != "" && !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}

// TestSecurity runs the attack catalogue on every selected backend.
func TestSecurity(t *testing.T) {
	began := time.Now()
	s := newSuite(t)
	defer s.close()
	var results []result
	defer func() { printTable(t, results, time.Since(began)) }()
	for _, backend := range selectedBackends() {
		if backend != backendNative && backend != backendLocal {
			t.Errorf("SBX_TEST_BACKENDS: backend %q is not installed by the test setup (native, local)", backend)
			continue
		}
		env := s.startBackend(t, backend)
		for _, e := range catalogue {
			if !slices.Contains(e.backends, backend) {
				continue
			}
			t.Run(e.id+"/"+backend, func(t *testing.T) {
				results = append(results, s.runEntry(t, env, e))
			})
		}
		s.stopBackend(t, env)
	}
	s.checkEnd(t)
}

// run is one row on one backend: what the probes use and what they record.
type run struct {
	t       *testing.T
	s       *suite
	env     *backendEnv
	d       *daemon
	backend string

	mu        sync.Mutex
	breaches  []string // guarded by mu: every success of the attack
	notes     []string // guarded by mu: gaps and measurements for the table
	recorded  bytes.Buffer
	sandboxes []string  // created by the row; deleted at teardown
	private   []*daemon // guarded by mu: daemons the row started itself; stopped and audited at teardown
	// forbidden are strings of this row that must appear in no API response
	// (beside the suite's canary values), e.g. the host data directory.
	forbidden []string
	skipped   string
	state     map[string]string // free-form values the phases of a row share
}

// breach records a success of the attack.
func (r *run) breach(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.breaches = append(r.breaches, fmt.Sprintf(format, args...))
}

// note adds a remark to the row's line: a gap, a measurement.
func (r *run) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

// skip marks the row skipped: the kernel or host truly lacks what it needs.
func (r *run) skip(format string, args ...any) { r.skipped = fmt.Sprintf(format, args...) }

// record keeps b for the output scan.
func (r *run) record(b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recorded.Len() < 64<<20 {
		r.recorded.Write(b)
		r.recorded.WriteByte('\n')
	}
}

// raw does one request with the daemon's key and records the response body.
// hdr adds headers; the body is read whole.
func (r *run) raw(method, path string, body io.Reader, hdr map[string]string) (int, []byte) {
	r.t.Helper()
	req, err := http.NewRequest(method, r.d.url+path, body)
	if err != nil {
		r.t.Fatalf("%s %.100s: %v", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+r.d.key)
	st, _, b := r.send(req, hdr)
	return st, b
}

// send sets hdr on req, does it, and records the response body, read whole.
func (r *run) send(req *http.Request, hdr map[string]string) (int, http.Header, []byte) {
	r.t.Helper()
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatalf("%s %.100s: %v", req.Method, req.URL.RequestURI(), err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r.record(b)
	return resp.StatusCode, resp.Header, b
}

// api does one JSON request (body nil for none) and records the response.
func (r *run) api(method, path string, body any) (int, []byte) {
	r.t.Helper()
	var rd io.Reader
	hdr := map[string]string{}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			r.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
		hdr["Content-Type"] = "application/json"
	}
	return r.raw(method, path, rd, hdr)
}

// create makes a sandbox the row owns; teardown deletes it.
func (r *run) create(body map[string]any) string {
	r.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	st, b := r.api("POST", "/v1/sandboxes", body)
	if st != 201 {
		r.t.Fatalf("POST /v1/sandboxes %v = %d %s", body, st, b)
	}
	var sb struct{ ID string }
	json.Unmarshal(b, &sb)
	if sb.ID == "" {
		r.t.Fatalf("create returned no id: %s", b)
	}
	r.sandboxes = append(r.sandboxes, sb.ID)
	return sb.ID
}

// exec runs body in sandbox id and returns the result; non-200 is fatal.
func (r *run) exec(id string, body map[string]any) execResult {
	r.t.Helper()
	st, b := r.api("POST", "/v1/sandboxes/"+id+"/exec", body)
	if st != 200 && !(st == 202 && body["background"] == true) {
		r.t.Fatalf("exec %.200v = %d %.300s", body, st, b)
	}
	var res execResult
	if err := json.Unmarshal(b, &res); err != nil {
		r.t.Fatalf("decoding exec result %.300s: %v", b, err)
	}
	return res
}

func (r *run) sh(id, command string) execResult {
	r.t.Helper()
	return r.exec(id, map[string]any{"command": command, "timeout": 120})
}

// a returns the row's first sandbox ("A" in the catalogue).
func (r *run) a() string {
	if len(r.sandboxes) == 0 {
		r.t.Fatal("the row has no sandbox")
	}
	return r.sandboxes[0]
}

func (r *run) set(k, v string) {
	if r.state == nil {
		r.state = map[string]string{}
	}
	r.state[k] = v
}

func (r *run) get(k string) string { return r.state[k] }

// phase runs f, turning a t.Fatal inside it into an error, so a probe that
// cannot go on still yields a verdict.
func (r *run) phase(name string, f func(r *run) error) (err error) {
	if f == nil {
		return nil
	}
	done := make(chan struct{})
	go func() { // t.Fatal ends this goroutine only; its deferred close reports it
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("%s panicked: %v", name, p)
			}
		}()
		err = fmt.Errorf("%s stopped: the test harness gave up (see the log above)", name)
		err = f(r)
	}()
	<-done
	return err
}

// runEntry runs e on env and returns its line of the table.
func (s *suite) runEntry(t *testing.T, env *backendEnv, e entry) result {
	env.d.t = t
	r := &run{t: t, s: s, env: env, d: env.d, backend: env.name}
	res := result{id: e.id, backend: env.name, attack: "-", control: "-", canaries: "-", leakCol: "-"}
	logStart := len(env.d.log.String())
	s.resetCanaries()

	var controlErr, attackErr, evidenceErr error
	setupErr := r.phase("setup", e.setup)
	if setupErr == nil && r.skipped == "" {
		controlErr = r.phase("control", e.control)
		res.control = "ok"
		if controlErr != nil {
			res.control = "FAILED"
		}
	}
	if setupErr == nil && r.skipped == "" {
		attackErr = r.phase("attack", e.attackProbe)
		evidenceErr = r.phase("evidence", e.evidence)
		res.attack = "blocked"
		if len(r.breaches) > 0 || attackErr != nil || evidenceErr != nil {
			res.attack = "SUCCEEDED"
		}
		if len(r.breaches) == 0 && (attackErr != nil || evidenceErr != nil) {
			res.attack = "NOT RUN"
		}
	}
	trips := s.checkCanaries(t, r, logStart)
	res.canaries = "intact"
	if len(trips) > 0 {
		res.canaries = "TRIPPED"
	}
	teardownErrs := r.teardown()
	leaks := env.audit(t)
	leaks = append(leaks, teardownErrs...)
	res.leakCol = "clean"
	if len(leaks) > 0 {
		res.leakCol = fmt.Sprintf("%d", len(leaks))
	}

	switch {
	case r.skipped != "":
		res.verdict = verdictSkip
		r.note("skip: %s", r.skipped)
	case len(r.breaches) > 0 || len(trips) > 0:
		res.verdict = verdictFail
	case setupErr != nil || controlErr != nil || attackErr != nil || evidenceErr != nil:
		res.verdict = verdictInvalid
	case len(leaks) > 0:
		res.verdict = verdictLeak
	default:
		res.verdict = verdictPass
	}
	for _, err := range []error{setupErr, controlErr, attackErr, evidenceErr} {
		if err != nil {
			t.Errorf("%s/%s invalid: %v", e.id, env.name, err)
		}
	}
	for _, b := range r.breaches {
		t.Errorf("%s/%s ATTACK SUCCEEDED: %s", e.id, env.name, b)
	}
	for _, c := range trips {
		t.Errorf("%s/%s CANARY TRIPPED: %s", e.id, env.name, c)
	}
	for _, l := range leaks {
		t.Errorf("%s/%s leak: %s", e.id, env.name, l)
	}
	res.notes = r.notes
	for _, n := range r.notes {
		t.Logf("%s/%s note: %s", e.id, env.name, n)
	}
	if res.verdict == verdictSkip {
		t.Skip(r.skipped)
	}
	return res
}

// teardown deletes the row's sandboxes and stops its private daemons; an
// error, or what a private daemon left on the host, is reported as residue.
func (r *run) teardown() []string {
	var errs []string
	for _, id := range r.sandboxes {
		st, b := r.d.apiQuiet("DELETE", "/v1/sandboxes/"+id, nil)
		if st != 204 && st != 404 {
			errs = append(errs, fmt.Sprintf("DELETE %s = %d %.200s", id, st, b))
		}
	}
	for _, d := range r.private {
		errs = append(errs, r.closePrivate(d)...)
	}
	http.DefaultClient.CloseIdleConnections() // the daemon's fds for them go in the audit
	return errs
}

// printTable logs the verdict table and the counts per family and verdict.
func printTable(t *testing.T, results []result, took time.Duration) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nattack catalogue (SECURITY.md §5), %s variants, %s\n\n", map[bool]string{true: "soak", false: "short"}[soak()], took.Round(time.Second))
	b.WriteString("canaries after every row: host file (inotify), loopback TCP and unix listeners, sibling B (the admin key's, as the rows' own sandboxes are; AP-02, AP-04 and FS-14 add keys of their own), host state, output scan; leak audit against the suite's baseline\n\n")
	fmt.Fprintf(&b, "| ID | backend | attack | control | canaries | leaks | verdict |\n|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.id, r.backend, r.attack, r.control, r.canaries, r.leakCol, r.verdict)
	}
	b.WriteString("\nnotes:\n")
	for _, r := range results {
		for _, n := range r.notes {
			fmt.Fprintf(&b, "- %s/%s: %s\n", r.id, r.backend, n)
		}
	}
	verdicts := []string{verdictPass, verdictFail, verdictInvalid, verdictLeak, verdictSkip}
	counts := map[string]map[string]int{}
	var families []string
	for _, r := range results {
		fam := r.id[:2]
		if counts[fam] == nil {
			counts[fam] = map[string]int{}
			families = append(families, fam)
		}
		counts[fam][r.verdict]++
	}
	fmt.Fprintf(&b, "\n| family | %s |\n|---|%s\n", strings.Join(verdicts, " | "), strings.Repeat("---|", len(verdicts)))
	total := map[string]int{}
	for _, fam := range families {
		fmt.Fprintf(&b, "| %s |", fam)
		for _, v := range verdicts {
			fmt.Fprintf(&b, " %d |", counts[fam][v])
			total[v] += counts[fam][v]
		}
		b.WriteString("\n")
	}
	b.WriteString("| all |")
	for _, v := range verdicts {
		fmt.Fprintf(&b, " %d |", total[v])
	}
	b.WriteString("\n")
	t.Log(b.String())
}

// apiQuiet is a request of the harness itself: its response is not part of
// any row's output scan (it may hold the sibling's secret on purpose).
func (d *daemon) apiQuiet(method, path string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, d.url+path, rd)
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+d.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.client().Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
