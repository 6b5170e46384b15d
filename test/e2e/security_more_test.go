// This file implements four foundation rows of the attack catalogue
// (SECURITY.md §5): PR-03 (kill(-1, SIGKILL) as sandbox root, and the agent
// killed), RS-14 and AP-11 (limits per key and in all), and AP-14 (the audit
// log: every call recorded, no secret in it). It also holds the rows' private
// daemons: a row that needs other limits or keys than the suite's daemon starts
// its own, and the row's teardown stops it and audits what it left.

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"sbx.dev/sbx/internal/store"
)

// --- private daemons --------------------------------------------------------------

// tenantKey is an API key a row adds to its private daemon's store.
type tenantKey struct{ id, secret string }

// privateDaemon starts a daemon only this row uses, on a fresh data directory,
// serving the row's backend without a warm pool, with env added. Before it
// starts, one API key per name is added to its store; the admin key is the
// daemon's own. The row's teardown deletes the daemon's sandboxes, stops it and
// audits the host for what it left (closePrivate); its log is part of the
// row's output scan.
func (r *run) privateDaemon(names []string, env ...string) (*daemon, map[string]tenantKey) {
	r.t.Helper()
	dir, err := os.MkdirTemp("", "sbx-security-"+r.backend+"-private-")
	if err != nil {
		r.t.Fatal(err)
	}
	started := false
	defer func() { // a start that failed has no sandbox: the directory holds files only
		if !started {
			os.RemoveAll(dir)
		}
	}()
	keys := map[string]tenantKey{}
	if len(names) > 0 {
		st, err := store.Open(context.Background(), filepath.Join(dir, "sbx.db"))
		if err != nil {
			r.t.Fatalf("opening the private daemon's store: %v", err)
		}
		for _, n := range names {
			secret, k, err := st.CreateKey(context.Background(), n)
			if err != nil {
				st.Close()
				r.t.Fatalf("adding key %s: %v", n, err)
			}
			keys[n] = tenantKey{id: k.ID, secret: secret}
		}
		if err := st.Close(); err != nil {
			r.t.Fatalf("closing the private daemon's store: %v", err)
		}
	}
	d := startDaemon(r.t, dir, append([]string{"SANDBOX_BACKEND=" + r.backend, "SBX_POOL_SIZE=0"}, env...)...)
	started = true
	r.mu.Lock()
	r.private = append(r.private, d)
	r.mu.Unlock()
	return d, keys
}

// priv returns the row's first private daemon.
func (r *run) priv() *daemon {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.private) == 0 {
		r.t.Fatal("the row started no private daemon")
	}
	return r.private[0]
}

// adminKeyID returns the id of d's admin key, which d logs when it creates it.
func adminKeyID(d *daemon) string {
	m := regexp.MustCompile(`created the admin API key.*key_id=(key_[0-9a-f]+)`).FindStringSubmatch(d.log.String())
	if m == nil {
		return ""
	}
	return m[1]
}

// closePrivate deletes every sandbox of private daemon d, stops it and audits
// the host for what its instance left (§4.4). It returns the residue, each
// line naming the daemon; a daemon log with residue is kept in
// $TMPDIR/sbx-e2e-logs.
func (r *run) closePrivate(d *daemon) []string {
	var found []string
	select {
	case <-d.done:
		found = append(found, fmt.Sprintf("it had exited before teardown: %v", d.cmd.ProcessState))
	default:
		st, b := d.apiQuiet("GET", "/v1/sandboxes", nil)
		var list struct {
			Sandboxes []struct{ ID string } `json:"sandboxes"`
		}
		if st != 200 || json.Unmarshal(b, &list) != nil {
			found = append(found, fmt.Sprintf("GET /v1/sandboxes = %d %.200s", st, b))
		}
		for _, sb := range list.Sandboxes {
			if st, b := d.apiQuiet("DELETE", "/v1/sandboxes/"+sb.ID, nil); st != 204 && st != 404 {
				found = append(found, fmt.Sprintf("DELETE %s = %d %.200s", sb.ID, st, b))
			}
		}
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
			if code := d.cmd.ProcessState.ExitCode(); code != 0 {
				found = append(found, fmt.Sprintf("it exited %d after SIGTERM", code))
			}
		case <-time.After(30 * time.Second):
			d.kill()
			found = append(found, "it did not exit within 30 s of SIGTERM")
		}
	}
	if poolMounted(d.dataDir) {
		found = append(found, "the disk pool "+poolDir(d.dataDir)+" is still mounted after a clean stop")
	}
	for _, g := range spareGroups(d.instance) {
		found = append(found, "spare cgroup "+g+" after a clean stop")
	}
	found = append(found, leaksBeyond(d.dataDir, d.instance, nil, 5*time.Second)...)
	removeInstanceGroups(d.instance)
	mounted := false
	for i, f := range found {
		mounted = mounted || strings.HasPrefix(f, "mount ")
		found[i] = "private daemon " + d.instance + ": " + f
	}
	if len(found) > 0 {
		d.dumpLog()
	}
	if !mounted { // never walk into a mount left behind
		os.RemoveAll(d.dataDir)
	}
	return found
}

// call does one request to d with key, records the response body for the
// output scan and returns status, headers and body. body is sent as JSON,
// unless it is an io.Reader (sent as is) or nil.
func (r *run) call(d *daemon, key, method, path string, body any, hdr map[string]string) (int, http.Header, []byte) {
	r.t.Helper()
	var rd io.Reader
	ctype := ""
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd, ctype = b, "application/octet-stream"
	default:
		j, err := json.Marshal(b)
		if err != nil {
			r.t.Fatal(err)
		}
		rd, ctype = bytes.NewReader(j), "application/json"
	}
	req, err := http.NewRequest(method, d.url+path, rd)
	if err != nil {
		r.t.Fatalf("%s %.100s: %v", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	return r.send(req, hdr)
}

// createAs creates a sandbox on d with key and returns its id; anything but
// 201 is an error.
func (r *run) createAs(d *daemon, key string, body map[string]any) (string, error) {
	r.t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	st, _, b := r.call(d, key, "POST", "/v1/sandboxes", body, nil)
	var sb struct{ ID string }
	if st != 201 || json.Unmarshal(b, &sb) != nil || sb.ID == "" {
		return "", fmt.Errorf("create %v = %d %.300s", body, st, b)
	}
	return sb.ID, nil
}

// execAs runs body in sandbox id of d with key; anything but 200 is an error.
func (r *run) execAs(d *daemon, key, id string, body map[string]any) (execResult, error) {
	r.t.Helper()
	st, _, b := r.call(d, key, "POST", "/v1/sandboxes/"+id+"/exec", body, nil)
	var res execResult
	if st != 200 || json.Unmarshal(b, &res) != nil {
		return res, fmt.Errorf("exec %.200v in %s = %d %.300s", body, id, st, b)
	}
	return res, nil
}

// idsOn lists the ids of d's sandboxes.
func idsOn(d *daemon) []string {
	_, b := d.apiQuiet("GET", "/v1/sandboxes", nil)
	var list struct {
		Sandboxes []struct{ ID string } `json:"sandboxes"`
	}
	json.Unmarshal(b, &list)
	var out []string
	for _, s := range list.Sandboxes {
		out = append(out, s.ID)
	}
	slices.Sort(out)
	return out
}

// hostOf is what the host holds of d's sandboxes (leaks' view: cgroups,
// processes, mounts, sandbox directories), sorted.
func hostOf(d *daemon) []string {
	h := leaks(d.dataDir, d.instance)
	slices.Sort(h)
	return h
}

// sameHost reports whether the host holds what it held before (before from
// hostOf), polling a short while for a finishing exec's process to go; it
// returns what differs.
func sameHost(d *daemon, before []string) []string {
	var diff []string
	waitUntil(2*time.Second, func() bool {
		now := hostOf(d)
		diff = nil
		for _, l := range now {
			if !slices.Contains(before, l) {
				diff = append(diff, "new: "+l)
			}
		}
		for _, l := range before {
			if !slices.Contains(now, l) {
				diff = append(diff, "gone: "+l)
			}
		}
		return len(diff) == 0
	})
	return diff
}

// auditOf reads d's audit log with key (query q, without "?"), newest first.
func (r *run) auditOf(d *daemon, key, q string) ([]auditEntry, []byte, error) {
	r.t.Helper()
	st, _, b := r.call(d, key, "GET", "/v1/audit?limit=1000&"+q, nil, nil)
	var list struct{ Records []auditEntry }
	if st != 200 || json.Unmarshal(b, &list) != nil {
		return nil, b, fmt.Errorf("GET /v1/audit?%s = %d %.300s", q, st, b)
	}
	return list.Records, b, nil
}

// refusal checks that a response is a 429 whose error says want, with a
// Retry-After of at least minAfter seconds; it returns what is wrong, or "".
func refusal(st int, h http.Header, b []byte, want string, minAfter int) string {
	if st != 429 {
		return fmt.Sprintf("= %d %.200s, want 429", st, b)
	}
	var e errorBody
	if json.Unmarshal(b, &e) != nil || e.Error.Code != "resource_exhausted" || !strings.Contains(e.Error.Message, want) {
		return fmt.Sprintf("429 body %.300s, want resource_exhausted saying %q", b, want)
	}
	ra, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || ra < minAfter {
		return fmt.Sprintf("Retry-After %q, want at least %d seconds", h.Get("Retry-After"), minAfter)
	}
	return ""
}

// dbHolds reports which of values the store files of d (sbx.db and its WAL
// and shared-memory files) hold.
func dbHolds(d *daemon, values map[string]string) []string {
	var out []string
	for _, f := range []string{"sbx.db", "sbx.db-wal", "sbx.db-shm"} {
		raw, err := os.ReadFile(filepath.Join(d.dataDir, f))
		if err != nil {
			continue
		}
		for name, v := range values {
			if bytes.Contains(raw, []byte(v)) {
				out = append(out, fmt.Sprintf("%s in %s", name, f))
			}
		}
	}
	slices.Sort(out)
	return out
}

// --- PR-03: kill(-1) as sandbox root; the agent killed ------------------------------

// sleeper is argv of a process that sleeps with marker m in its argv, so the
// host can find it in /proc.
func sleeper(m string) []string {
	return []string{"python3", "-c", "import time; time.sleep(100000)", m}
}

// hostPid waits for the one host process whose argv holds marker m.
func hostPid(m string) (string, error) {
	var pids []string
	if !waitUntil(10*time.Second, func() bool { pids = hostPidsWith(m); return len(pids) == 1 }) {
		return "", fmt.Errorf("the host sees %d processes with marker %s, want 1", len(pids), m)
	}
	return pids[0], nil
}

func pr03Setup(r *run) error {
	a := r.create(map[string]any{"memory_mb": 256})
	c := r.create(map[string]any{"memory_mb": 256, "labels": map[string]string{"role": "pr03-sibling"}})
	m := randHex(6)
	for _, p := range []struct{ name, id string }{{"own1", a}, {"own2", a}, {"sib", c}} {
		marker := "pr03-" + p.name + "-" + m
		res := r.exec(p.id, map[string]any{"argv": sleeper(marker), "background": true})
		pid, err := hostPid(marker)
		if err != nil {
			return err
		}
		r.set(p.name, marker)
		r.set(p.name+".host", pid)
		r.set(p.name+".pid", strconv.Itoa(res.PID))
		r.set(p.name+".proc", res.ProcessID)
	}
	r.set("c", c)
	host, err := hostPid(r.s.hostMarker)
	if err != nil {
		return err
	}
	r.set("hostproc", host)
	return nil
}

func pr03Control(r *run) error {
	a := r.a()
	if res := r.exec(a, map[string]any{"argv": []string{"id", "-u"}}); res.Stdout != "0\n" {
		return fmt.Errorf("control: the workload does not run as sandbox root: id -u = %+v", res)
	}
	// Allowed target: root in A kills its own process by pid, and the host sees it go.
	if res := r.exec(a, map[string]any{"argv": []string{"sh", "-c", "kill -9 " + r.get("own1.pid")}}); res.ExitCode != 0 {
		return fmt.Errorf("control: kill -9 of the sandbox's own process: %+v", res)
	}
	if !waitUntil(10*time.Second, func() bool { return len(hostPidsWith(r.get("own1"))) == 0 }) {
		return fmt.Errorf("control: the host still sees the sandbox's own process after its kill -9 inside")
	}
	// The far ends exist: the host process, the sibling's process and the agent.
	if len(hostPidsWith(r.s.hostMarker)) == 0 || len(hostPidsWith(r.get("sib"))) == 0 {
		return fmt.Errorf("control: the host does not see its own or the sibling's marker process")
	}
	r.set("agent", strconv.Itoa(agentPID(r.t, r.d.instance, a)))
	return nil
}

// pr03Kill is run as sandbox root: SIGKILL to every process it may signal
// (kill(-1)), to its PID 1, and to each pid given (the host's numbers of
// the daemon, the host process and the sibling's processes), printing each
// outcome. It runs without a shell, so kill(-1) spares nothing the exec needs.
const pr03Kill = `import errno, os, signal, sys
out = []
for name, pid in [("-1", -1), ("1", 1)] + [("host:" + p, int(p)) for p in sys.argv[1:]]:
    try:
        os.kill(pid, signal.SIGKILL)
        out.append(name + "=sent")
    except OSError as e:
        out.append(name + "=" + errno.errorcode.get(e.errno, str(e.errno)))
print("survived", " ".join(out))
`

func pr03Attack(r *run) error {
	a := r.a()
	targets := []string{strconv.Itoa(r.d.cmd.Process.Pid), r.get("hostproc"), r.get("sib.host"),
		strconv.Itoa(agentPID(r.t, r.d.instance, r.get("c"))), strconv.Itoa(agentPID(r.t, r.d.instance, r.env.sibling))}
	st, b := r.api("POST", "/v1/sandboxes/"+a+"/exec", map[string]any{"argv": append([]string{"python3", "-c", pr03Kill}, targets...), "timeout": 60})
	var res execResult
	json.Unmarshal(b, &res)
	if st != 200 || !strings.HasPrefix(res.Stdout, "survived") {
		r.note("the kill(-1) exec itself ended %d %.200s", st, b)
	} else {
		r.note("kill(-1), kill(1) and the host's pids as sandbox root: %s", strings.TrimSpace(strings.TrimPrefix(res.Stdout, "survived")))
	}
	// The signal went out: the sandbox's own process is gone.
	if !waitUntil(10*time.Second, func() bool { return len(hostPidsWith(r.get("own2"))) == 0 }) {
		return fmt.Errorf("kill(-1) did not reach the sandbox's own process: the probe proves nothing")
	}
	r.pr03Unaffected("after kill(-1) as sandbox root")
	if err := syscall.Kill(atoi(r.get("agent")), 0); err != nil {
		r.note("the agent (host pid %s) did not survive kill(-1) and kill(1) from inside: %v", r.get("agent"), err)
	} else if res, err := r.execAs(r.d, r.d.key, a, map[string]any{"argv": []string{"echo", "still serving"}}); err != nil || res.Stdout != "still serving\n" {
		r.note("the sandbox stopped serving after kill(-1) inside (its own loss, not a crossing): %+v %v", res, err)
	}

	// The agent killed (from the host: as if it crashed), mid-exec.
	events := streamExec(r.t, r.d, a, "sleep 1000")
	select {
	case ev, ok := <-events:
		if !ok || ev.Type != "started" {
			return fmt.Errorf("the streamed exec's first event = %+v (open %v), want started", ev, ok)
		}
	case <-time.After(time.Minute):
		return fmt.Errorf("the streamed exec did not start within a minute")
	}
	agent := agentPID(r.t, r.d.instance, a)
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing agent pid %d: %v", agent, err)
	}
	killed := time.Now()
	const guard = 3 * agentLossBound // the contract, with a generous margin
	var last streamEvent
	var inFlight time.Duration
	timeout := time.After(guard)
wait:
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				inFlight = time.Since(killed)
				break wait
			}
			last = ev
		case <-timeout:
			r.breach("PR-03: the exec in flight did not end within %v of the agent's SIGKILL", guard)
			break wait
		}
	}
	if inFlight > 0 && (last.Type != "result" || last.Reason != "agent_lost") {
		r.breach("PR-03: the exec in flight ended with %+v, want a result with reason agent_lost", last)
	}
	var sb struct {
		State       string `json:"state"`
		StateReason string `json:"state_reason"`
	}
	var stateAfter time.Duration
	waitUntil(guard, func() bool {
		_, b := r.d.apiQuiet("GET", "/v1/sandboxes/"+a, nil)
		json.Unmarshal(b, &sb)
		if sb.State == "error" {
			stateAfter = time.Since(killed)
			return true
		}
		return false
	})
	switch {
	case stateAfter == 0:
		r.breach("PR-03: the sandbox is %q %v after its agent's SIGKILL, want error (agent_lost)", sb.State, guard)
	case !strings.Contains(sb.StateReason, "agent_lost"):
		r.breach("PR-03: state_reason %q, want agent_lost", sb.StateReason)
	}
	r.note("agent SIGKILLed: the exec in flight ended agent_lost after %v, the sandbox was error (%s) after %v; the contract is %v",
		inFlight.Round(time.Millisecond), sb.StateReason, stateAfter.Round(time.Millisecond), agentLossBound)
	if inFlight > agentLossBound || stateAfter > agentLossBound {
		r.note("over the %v contract (a failure only beyond %v)", agentLossBound, guard)
	}
	st, b = r.api("POST", "/v1/sandboxes/"+a+"/exec", map[string]any{"argv": []string{"true"}})
	var e errorBody
	if json.Unmarshal(b, &e); st != 502 || e.Error.Code != "agent_lost" || e.Error.SandboxID != a {
		r.breach("PR-03: exec on the lost sandbox = %d %.200s, want 502 agent_lost naming it", st, b)
	}
	r.pr03Unaffected("after the agent's loss")
	return nil
}

// pr03Unaffected checks, at the far end, that the host process, the daemon and
// the sibling C are as they were: same host pids, the daemon healthy, C's
// process running and C serving execs.
func (r *run) pr03Unaffected(stage string) {
	if got := hostPidsWith(r.s.hostMarker); !slices.Equal(got, []string{r.get("hostproc")}) {
		r.breach("PR-03 (%s): the host process %s is now %v", stage, r.get("hostproc"), got)
	}
	if err := r.d.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		r.breach("PR-03 (%s): the daemon is gone: %v", stage, err)
	} else if st, b := r.d.apiQuiet("GET", "/v1/health", nil); st != 200 {
		r.breach("PR-03 (%s): daemon health = %d %.200s", stage, st, b)
	}
	c := r.get("c")
	if got := hostPidsWith(r.get("sib")); !slices.Equal(got, []string{r.get("sib.host")}) {
		r.breach("PR-03 (%s): the sibling's process (host pid %s) is now %v", stage, r.get("sib.host"), got)
	}
	var p struct {
		State string `json:"state"`
	}
	if _, b := r.d.apiQuiet("GET", "/v1/sandboxes/"+c+"/processes/"+r.get("sib.proc"), nil); json.Unmarshal(b, &p) != nil || p.State != "running" {
		r.breach("PR-03 (%s): the sibling's process: %.200s, want running", stage, b)
	}
	if res, err := r.execAs(r.d, r.d.key, c, map[string]any{"argv": []string{"echo", "sibling-ok"}}); err != nil || res.Stdout != "sibling-ok\n" {
		r.breach("PR-03 (%s): exec in the sibling: %+v %v", stage, res, err)
	}
}

// --- RS-14: creates beyond the per-key and global limits ----------------------------

func rs14Setup(r *run) error {
	_, keys := r.privateDaemon([]string{"rs14-tenant"}, "SBX_MAX_SANDBOXES=3", "SBX_MAX_SANDBOXES_PER_KEY=2")
	r.set("keyB", keys["rs14-tenant"].secret)
	r.set("keyB.id", keys["rs14-tenant"].id)
	return nil
}

// rs14Live creates a sandbox with key and checks, at the far end, that it runs
// and that the host holds it.
func (r *run) rs14Live(d *daemon, key string) (string, error) {
	id, err := r.createAs(d, key, map[string]any{"labels": map[string]string{"rs14": "control"}})
	if err != nil {
		return "", err
	}
	if res, err := r.execAs(d, key, id, map[string]any{"argv": []string{"echo", "ok"}}); err != nil || res.Stdout != "ok\n" {
		return id, fmt.Errorf("exec in %s: %+v %v", id, res, err)
	}
	if !slices.ContainsFunc(hostOf(d), func(l string) bool { return strings.Contains(l, id) }) {
		return id, fmt.Errorf("the host holds nothing of sandbox %s: the audit of refused creates would prove nothing", id)
	}
	return id, nil
}

func rs14Control(r *run) error {
	d := r.priv()
	var ids []string
	for range 2 { // key A (the admin key) up to its own limit
		id, err := r.rs14Live(d, d.key)
		if err != nil {
			return fmt.Errorf("control: %v", err)
		}
		ids = append(ids, id)
	}
	r.set("a.ids", strings.Join(ids, " "))
	return nil
}

// rs14Refuse sends n creates with key at once, each labelled with the row's
// mark, expecting 429s saying want; it returns the refusals and records a
// breach for every other answer.
func (r *run) rs14Refuse(d *daemon, who, key string, n int, want string, hdr map[string]string) int {
	var mu sync.Mutex
	refused := 0
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			st, h, b := r.call(d, key, "POST", "/v1/sandboxes", map[string]any{"labels": map[string]string{"rs14": r.get("mark")}}, hdr)
			if msg := refusal(st, h, b, want, 1); msg != "" {
				r.breach("RS-14: %s: create %s", who, msg)
			}
			if st == 429 {
				mu.Lock()
				refused++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return refused
}

func rs14Attack(r *run) error {
	d := r.priv()
	kb := r.get("keyB")
	r.set("mark", "rs14-"+randHex(8))
	refused := map[string]int{}
	// Key A at its own limit, one create at a time, then 8 at once.
	before := hostOf(d)
	refused["a"] += r.rs14Refuse(d, "key A at max_sandboxes_per_key", d.key, 1, "(max_sandboxes_per_key)", nil)
	refused["a"] += r.rs14Refuse(d, "key A at max_sandboxes_per_key", d.key, 1, "(max_sandboxes_per_key)", nil)
	refused["a"] += r.rs14Refuse(d, "key A at max_sandboxes_per_key, 8 at once", d.key, 8, "(max_sandboxes_per_key)", nil)
	if diff := sameHost(d, before); len(diff) > 0 {
		r.breach("RS-14: refused creates of key A changed the host: %v", diff)
	}
	// Control inside the attack: the limit is A's alone; key B still creates.
	b1, err := r.rs14Live(d, kb)
	if err != nil {
		return fmt.Errorf("key B's create under the global limit (control): %v", err)
	}
	r.set("b.id", b1)
	// Now the daemon is at max_sandboxes: B (1 of 2) and A are refused.
	before = hostOf(d)
	refused["b"] += r.rs14Refuse(d, "key B at max_sandboxes", kb, 1, "(max_sandboxes)", nil)
	var wg sync.WaitGroup
	var nb, na int
	wg.Go(func() {
		nb = r.rs14Refuse(d, "keys A and B at max_sandboxes, 16 at once", kb, 8, "(max_sandboxes)", nil)
	})
	wg.Go(func() {
		na = r.rs14Refuse(d, "keys A and B at max_sandboxes, 16 at once", d.key, 8, "(max_sandboxes)", nil)
	})
	wg.Wait()
	refused["b"] += nb
	refused["a"] += na
	// A refusal must not be remembered under its Idempotency-Key.
	r.set("idem", "rs14-idem-"+randHex(8))
	refused["a"] += r.rs14Refuse(d, "key A with an Idempotency-Key", d.key, 1, "(max_sandboxes)", map[string]string{"Idempotency-Key": r.get("idem")})
	if diff := sameHost(d, before); len(diff) > 0 {
		r.breach("RS-14: refused creates at the global limit changed the host: %v", diff)
	}
	r.set("refused.a", strconv.Itoa(refused["a"]))
	r.set("refused.b", strconv.Itoa(refused["b"]))
	r.note("%d creates of key A and %d of key B refused with 429 (per key 2, global 3)", refused["a"], refused["b"])
	return nil
}

func rs14Evidence(r *run) error {
	d := r.priv()
	want := append(strings.Fields(r.get("a.ids")), r.get("b.id"))
	slices.Sort(want)
	if got := idsOn(d); !slices.Equal(got, want) {
		r.breach("RS-14: the daemon lists %v after the refused creates, want %v", got, want)
	}
	if held := dbHolds(d, map[string]string{"the refused creates' label": r.get("mark")}); len(held) > 0 {
		r.breach("RS-14: the store holds %v: a refused create left a record", held)
	}
	// The far end saw each refusal: audited under its key, with no sandbox.
	recs, _, err := r.auditOf(d, d.key, "")
	if err != nil {
		return err
	}
	admin := adminKeyID(d)
	n := map[string]int{}
	for _, rec := range recs {
		if rec.Action != "create" || rec.Outcome != "resource_exhausted" {
			continue
		}
		if rec.SandboxID != "" {
			r.breach("RS-14: a refused create is audited with sandbox %s", rec.SandboxID)
		}
		switch rec.KeyID {
		case admin:
			n["a"]++
		case r.get("keyB.id"):
			n["b"]++
		default:
			r.breach("RS-14: a refused create is audited under key %q, neither A (%s) nor B", rec.KeyID, admin)
		}
	}
	if strconv.Itoa(n["a"]) != r.get("refused.a") || strconv.Itoa(n["b"]) != r.get("refused.b") {
		return fmt.Errorf("the audit log holds %d refused creates of A and %d of B, the row saw %s and %s", n["a"], n["b"], r.get("refused.a"), r.get("refused.b"))
	}
	// A place freed by a delete is taken again, by the very create that was
	// refused under its Idempotency-Key: the refusal consumed nothing.
	a0 := strings.Fields(r.get("a.ids"))[0]
	if st, _, b := r.call(d, d.key, "DELETE", "/v1/sandboxes/"+a0, nil, nil); st != 204 {
		return fmt.Errorf("DELETE %s = %d %s", a0, st, b)
	}
	st, _, b := r.call(d, d.key, "POST", "/v1/sandboxes", map[string]any{"labels": map[string]string{"rs14": r.get("mark")}},
		map[string]string{"Idempotency-Key": r.get("idem")})
	if st != 201 {
		r.breach("RS-14: the refused create's retry, with a place free, = %d %.300s, want 201 (the refusal was remembered)", st, b)
		return nil
	}
	// The daemon is full again, and says so.
	r.rs14Refuse(d, "key B at max_sandboxes again", r.get("keyB"), 1, "(max_sandboxes)", nil)
	return nil
}

// --- AP-11: per-key create rate, concurrent sandboxes, exec rate ---------------------

func ap11Setup(r *run) error {
	// One token per 100 s: nothing refills within the row.
	_, keys := r.privateDaemon([]string{"ap11-tenant"}, "SBX_MAX_SANDBOXES_PER_KEY=2",
		"SBX_CREATE_RATE_PER_KEY=0.01", "SBX_CREATE_BURST_PER_KEY=3",
		"SBX_EXEC_RATE_PER_KEY=0.01", "SBX_EXEC_BURST_PER_KEY=4")
	r.set("keyB", keys["ap11-tenant"].secret)
	r.set("keyB.id", keys["ap11-tenant"].id)
	return nil
}

// touch runs `touch name` in sandbox id of d with key; it returns the answer.
func (r *run) touch(d *daemon, key, id, name string, extra map[string]any, hdr map[string]string) (int, http.Header, []byte) {
	body := map[string]any{"argv": []string{"touch", name}}
	for k, v := range extra {
		body[k] = v
	}
	return r.call(d, key, "POST", "/v1/sandboxes/"+id+"/exec", body, hdr)
}

// exists says whether the file API of d finds name in sandbox id.
func (r *run) exists(d *daemon, key, id, name string) (bool, error) {
	st, _, b := r.call(d, key, "GET", "/v1/sandboxes/"+id+"/files/stat?path="+url.QueryEscape(r.wire(name)), nil, nil)
	switch st {
	case 200:
		return true, nil
	case 404:
		return false, nil
	}
	return false, fmt.Errorf("stat %s in %s = %d %.200s", name, id, st, b)
}

func ap11Control(r *run) error {
	d := r.priv()
	kb := r.get("keyB")
	a1, err := r.createAs(d, d.key, nil)
	if err != nil {
		return fmt.Errorf("control: %v", err)
	}
	a2, err := r.createAs(d, d.key, nil)
	if err != nil {
		return fmt.Errorf("control: %v", err)
	}
	b1, err := r.createAs(d, kb, nil)
	if err != nil {
		return fmt.Errorf("control: %v", err)
	}
	r.set("a1", a1)
	r.set("a2", a2)
	r.set("b1", b1)
	// Key A's whole exec burst, each exec leaving a file the file API finds.
	for i := range 4 {
		name := fmt.Sprintf("ap11-ctl-%d", i)
		if st, _, b := r.touch(d, d.key, a1, name, nil, nil); st != 200 {
			return fmt.Errorf("control: exec %d of key A's burst of 4 = %d %.200s", i+1, st, b)
		}
		if ok, err := r.exists(d, d.key, a1, name); !ok {
			return fmt.Errorf("control: exec %d left no %s: %v", i+1, name, err)
		}
	}
	return nil
}

func ap11Attack(r *run) error {
	d := r.priv()
	kb := r.get("keyB")
	a1, a2, b1 := r.get("a1"), r.get("a2"), r.get("b1")
	mark := "ap11-" + randHex(8)
	r.set("mark", mark)
	body := map[string]any{"labels": map[string]string{"ap11": mark}}
	refusedCreates := 0
	create := func(what, key, want string, minAfter int) {
		st, h, b := r.call(d, key, "POST", "/v1/sandboxes", body, nil)
		if msg := refusal(st, h, b, want, minAfter); msg != "" {
			r.breach("AP-11: %s: create %s", what, msg)
		}
		if st == 429 {
			refusedCreates++
		}
	}

	// Concurrent sandboxes: key A holds 2 of 2.
	before := hostOf(d)
	for range 3 {
		create("key A at 2 live sandboxes", d.key, "(max_sandboxes_per_key)", 1)
	}
	if diff := sameHost(d, before); len(diff) > 0 {
		r.breach("AP-11: refused creates changed the host: %v", diff)
	}
	// Those refusals took no create token: with a place freed, A's third
	// token makes a sandbox.
	if st, _, b := r.call(d, d.key, "DELETE", "/v1/sandboxes/"+a2, nil, nil); st != 204 {
		return fmt.Errorf("DELETE %s = %d %s", a2, st, b)
	}
	a3, err := r.createAs(d, d.key, nil)
	if err != nil {
		r.breach("AP-11: with a place free and a create token left, %v (refused creates consumed tokens)", err)
	} else if st, _, b := r.call(d, d.key, "DELETE", "/v1/sandboxes/"+a3, nil, nil); st != 204 {
		return fmt.Errorf("DELETE %s = %d %s", a3, st, b)
	}

	// Create rate: A's burst of 3 is spent; the next token is 100 s away.
	before = hostOf(d)
	for range 3 {
		create("key A past its create rate", d.key, "create rate", 2)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 8 {
		wg.Go(func() {
			st, h, b := r.call(d, d.key, "POST", "/v1/sandboxes", body, nil)
			if msg := refusal(st, h, b, "create rate", 2); msg != "" {
				r.breach("AP-11: key A past its create rate, 8 at once: create %s", msg)
			}
			if st == 429 {
				mu.Lock()
				refusedCreates++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if diff := sameHost(d, before); len(diff) > 0 {
		r.breach("AP-11: creates refused by rate changed the host: %v", diff)
	}
	// Control inside the attack: B's bucket is its own.
	b2, err := r.createAs(d, kb, nil)
	if err != nil {
		return fmt.Errorf("key B's create while A is over its rate (control): %v", err)
	}
	r.set("b2", b2)

	// Exec rate: A's burst of 4 is spent; plain, background and streamed
	// execs are refused, naming the sandbox, and run nothing.
	refusedExecs := 0
	for i, v := range []struct {
		extra map[string]any
		hdr   map[string]string
	}{{}, {}, {extra: map[string]any{"background": true}}, {hdr: map[string]string{"Accept": "application/x-ndjson"}}} {
		st, h, b := r.touch(d, d.key, a1, fmt.Sprintf("ap11-refused-%d", i), v.extra, v.hdr)
		if msg := refusal(st, h, b, "exec rate", 1); msg != "" {
			r.breach("AP-11: key A past its exec rate (%v %v): exec %s", v.extra, v.hdr, msg)
		}
		var e errorBody
		if json.Unmarshal(b, &e); st == 429 && e.Error.SandboxID != a1 {
			r.breach("AP-11: the exec refusal names sandbox %q, want %s", e.Error.SandboxID, a1)
		}
		if st == 429 {
			refusedExecs++
		}
	}
	if st, _, b := r.touch(d, kb, b1, "ap11-b", nil, nil); st != 200 {
		return fmt.Errorf("key B's exec while A is over its rate (control) = %d %.200s", st, b)
	}
	r.set("refused.creates", strconv.Itoa(refusedCreates))
	r.set("refused.execs", strconv.Itoa(refusedExecs))
	r.note("%d creates (count and rate) and %d execs of key A refused with 429; key B served meanwhile", refusedCreates, refusedExecs)
	return nil
}

func ap11Evidence(r *run) error {
	d := r.priv()
	a1 := r.get("a1")
	for i := range 4 {
		name := fmt.Sprintf("ap11-refused-%d", i)
		ok, err := r.exists(d, d.key, a1, name)
		if err != nil {
			return err
		}
		if ok {
			r.breach("AP-11: refused exec %d ran: %s exists", i, name)
		}
	}
	if ok, err := r.exists(d, r.get("keyB"), r.get("b1"), "ap11-b"); !ok {
		return fmt.Errorf("key B's exec left no file: %v", err)
	}
	want := []string{a1, r.get("b1"), r.get("b2")}
	slices.Sort(want)
	if got := idsOn(d); !slices.Equal(got, want) {
		r.breach("AP-11: the daemon lists %v, want %v: a refused create left a record", got, want)
	}
	if held := dbHolds(d, map[string]string{"the refused creates' label": r.get("mark")}); len(held) > 0 {
		r.breach("AP-11: the store holds %v: a refused create left a record", held)
	}
	// The far end saw each refusal, under A's key.
	recs, _, err := r.auditOf(d, d.key, "")
	if err != nil {
		return err
	}
	admin := adminKeyID(d)
	var creates, execs, ends int
	for _, rec := range recs {
		switch {
		case rec.Action == "create" && rec.Outcome == "resource_exhausted" && rec.KeyID == admin:
			creates++
		case rec.Action == "exec_start" && rec.Outcome == "resource_exhausted" && rec.KeyID == admin && rec.SandboxID == a1:
			execs++
		case rec.Action == "exec_end" && rec.SandboxID == a1:
			ends++
		}
	}
	if strconv.Itoa(creates) != r.get("refused.creates") || strconv.Itoa(execs) != r.get("refused.execs") {
		return fmt.Errorf("the audit log holds %d refused creates and %d refused execs of key A, the row saw %s and %s",
			creates, execs, r.get("refused.creates"), r.get("refused.execs"))
	}
	if ends != 4 {
		r.breach("AP-11: %d execs ended in %s, want the control's 4: a refused exec ran", ends, a1)
	}
	return nil
}

// --- AP-14: the audit log ----------------------------------------------------------

func ap14Setup(r *run) error {
	// Debug level: no log line at any level may hold a secret.
	_, keys := r.privateDaemon([]string{"ap14-tenant"}, "SBX_LOG_LEVEL=debug")
	r.set("keyB", keys["ap14-tenant"].secret)
	r.set("keyB.id", keys["ap14-tenant"].id)
	return nil
}

// ap14Channels name the row's secrets, one for each way a call carries one.
var ap14Channels = []string{"create env", "exec argv", "exec command", "exec env", "exec stdin",
	"stdin call", "file content", "upload", "grep pattern", "B's create env", "B's file content"}

// ap14Call is one call of the control and the audit record it must leave.
type ap14Call struct {
	action, sandbox, key string
}

func ap14Control(r *run) error {
	d := r.priv()
	kb := r.get("keyB")
	sec := map[string]string{}
	for _, c := range ap14Channels {
		sec[c] = "ap14-" + strings.ReplaceAll(c, " ", "-") + "-" + randHex(12)
		r.set("secret "+c, sec[c])
	}
	var calls []ap14Call
	fail := func(format string, args ...any) error { return fmt.Errorf("control: "+format, args...) }
	// do does one call as key on sandbox id, expecting status want; action
	// names the audit record it must leave ("" for none).
	do := func(key, id, action, method, path string, body any, want int) ([]byte, error) {
		st, _, b := r.call(d, key, method, path, body, nil)
		if st != want {
			return b, fail("%s %s = %d %.300s, want %d", method, path, st, b, want)
		}
		calls = append(calls, ap14Call{action, id, key})
		return b, nil
	}
	a, err := r.createAs(d, d.key, map[string]any{"env": map[string]string{"AP14_TOKEN": sec["create env"]}})
	if err != nil {
		return fail("%v", err)
	}
	calls = append(calls, ap14Call{"create", a, d.key})
	// Not this row's contract (AP-05's: helper argv and environ), but seen
	// from here: the host's process table.
	if pids := hostPidsWith(sec["create env"]); len(pids) > 0 {
		r.note("AP-05 finding: the create env secret is in the argv of host processes %v, readable by every host user", pids)
	}
	sb := "/v1/sandboxes/" + a
	execOK := func(body map[string]any, want string) error {
		res, err := r.execAs(d, d.key, a, body)
		if err != nil || res.Stdout != want {
			return fail("exec %.100v = %+v %v, want stdout %q", body, res, err, want)
		}
		calls = append(calls, ap14Call{"exec_start", a, d.key}, ap14Call{"exec_end", a, d.key})
		return nil
	}
	// The sandbox gets each secret: the command's output proves it.
	if err := execOK(map[string]any{"argv": []string{"printf", "%s", sec["exec argv"]}}, sec["exec argv"]); err != nil {
		return err
	}
	if err := execOK(map[string]any{"command": `printf '%s %s %s' ` + sec["exec command"] + ` "$AP14_TOKEN" "$AP14_E"`,
		"env": map[string]string{"AP14_E": sec["exec env"]}},
		sec["exec command"]+" "+sec["create env"]+" "+sec["exec env"]); err != nil {
		return err
	}
	if err := execOK(map[string]any{"argv": []string{"cat"}, "stdin": sec["exec stdin"]}, sec["exec stdin"]); err != nil {
		return err
	}
	// stdin through its own call, to a background process.
	b, err := do(d.key, a, "exec_start", "POST", sb+"/exec", map[string]any{"argv": []string{"sh", "-c", "cat > stdin.txt"},
		"background": true, "keep_stdin_open": true}, 202)
	if err != nil {
		return err
	}
	var bg execResult
	json.Unmarshal(b, &bg)
	if _, err := do(d.key, a, "write_stdin", "POST", sb+"/processes/"+bg.ProcessID+"/stdin", map[string]any{"data": sec["stdin call"], "eof": true}, 204); err != nil {
		return err
	}
	if _, err := do(d.key, a, "", "POST", sb+"/processes/"+bg.ProcessID+"/wait", map[string]any{"timeout": 30}, 200); err != nil {
		return err
	}
	read := func(name, want string) error {
		b, err := do(d.key, a, "read_file", "GET", sb+"/files/read?path="+q(r.wire(name)), nil, 200)
		if err != nil {
			return err
		}
		var rr struct{ Content string }
		if json.Unmarshal(b, &rr); rr.Content != want {
			return fail("%s holds %q, want %q", name, rr.Content, want)
		}
		return nil
	}
	if err := read("stdin.txt", sec["stdin call"]); err != nil {
		return err
	}
	// Every file call.
	if _, err := do(d.key, a, "write_file", "PUT", sb+"/files/write", map[string]any{"path": r.wire("sec.txt"), "content": sec["file content"]}, 200); err != nil {
		return err
	}
	if err := read("sec.txt", sec["file content"]); err != nil {
		return err
	}
	if _, err := do(d.key, a, "upload", "PUT", sb+"/files/upload?path="+q(r.wire("up.bin")), strings.NewReader(sec["upload"]), 200); err != nil {
		return err
	}
	if b, err := do(d.key, a, "download", "GET", sb+"/files/download?path="+q(r.wire("up.bin")), nil, 200); err != nil {
		return err
	} else if string(b) != sec["upload"] {
		return fail("download of up.bin = %q", b)
	}
	if _, err := do(d.key, a, "write_file", "PUT", sb+"/files/write", map[string]any{"path": r.wire("grep.txt"), "content": "x " + sec["grep pattern"] + "\n"}, 200); err != nil {
		return err
	}
	if b, err := do(d.key, a, "grep", "GET", sb+"/files/grep?fixed=true&path="+q(r.wire(""))+"&pattern="+q(sec["grep pattern"]), nil, 200); err != nil {
		return err
	} else if !strings.Contains(string(b), "grep.txt") {
		return fail("grep for the pattern found %.300s, want grep.txt", b)
	}
	for _, c := range []struct {
		action, method, path string
		body                 any
		want                 int
	}{
		{"stat", "GET", "/files/stat?path=" + q(r.wire("sec.txt")), nil, 200},
		{"list_dir", "GET", "/files/list?path=" + q(r.wire("")), nil, 200},
		{"make_dir", "POST", "/files/mkdir", map[string]any{"path": r.wire("d1")}, 200},
		{"move", "POST", "/files/move", map[string]any{"source": r.wire("sec.txt"), "destination": r.wire("d1/sec.txt")}, 200},
		{"glob", "GET", "/files/glob?pattern=*.txt&path=" + q(r.wire("")), nil, 200},
		{"remove", "DELETE", "/files?path=" + q(r.wire("d1/sec.txt")), nil, 204},
	} {
		if _, err := do(d.key, a, c.action, c.method, sb+c.path, c.body, c.want); err != nil {
			return err
		}
	}
	if there, _ := r.exists(d, d.key, a, "d1/sec.txt"); there {
		return fail("d1/sec.txt is still there after its remove")
	}
	// A signal (kill) of a background process.
	b, err = do(d.key, a, "exec_start", "POST", sb+"/exec", map[string]any{"argv": []string{"sleep", "1000"}, "background": true}, 202)
	if err != nil {
		return err
	}
	json.Unmarshal(b, &bg)
	if b, err := do(d.key, a, "signal", "POST", sb+"/processes/"+bg.ProcessID+"/signal", map[string]any{"signal": "SIGKILL"}, 200); err != nil {
		return err
	} else if !strings.Contains(string(b), "stopped") {
		return fail("signal answered %.200s, want stopped", b)
	}
	// Key B's own sandbox.
	bID, err := r.createAs(d, kb, map[string]any{"env": map[string]string{"AP14_TOKEN": sec["B's create env"]}})
	if err != nil {
		return fail("%v", err)
	}
	calls = append(calls, ap14Call{"create", bID, kb})
	if res, err := r.execAs(d, kb, bID, map[string]any{"command": `printf %s "$AP14_TOKEN"`}); err != nil || res.Stdout != sec["B's create env"] {
		return fail("exec in B's sandbox: %+v %v", res, err)
	}
	calls = append(calls, ap14Call{"exec_start", bID, kb}, ap14Call{"exec_end", bID, kb})
	if _, err := do(kb, bID, "write_file", "PUT", "/v1/sandboxes/"+bID+"/files/write", map[string]any{"path": r.wire("b.txt"), "content": sec["B's file content"]}, 200); err != nil {
		return err
	}
	// Delete (kill) both sandboxes.
	if _, err := do(d.key, a, "delete", "DELETE", sb, nil, 204); err != nil {
		return err
	}
	if _, err := do(kb, bID, "delete", "DELETE", "/v1/sandboxes/"+bID, nil, 204); err != nil {
		return err
	}

	// The far end: each call has its record, with its key's id and its sandbox.
	recs, _, err := r.auditOf(d, d.key, "")
	if err != nil {
		return fail("%v", err)
	}
	keyID := map[string]string{d.key: adminKeyID(d), kb: r.get("keyB.id")}
	if keyID[d.key] == "" {
		return fail("the daemon's log does not name its admin key's id")
	}
	have := map[ap14Call]int{}
	for _, rec := range recs {
		if rec.Outcome == "ok" {
			have[ap14Call{rec.Action, rec.SandboxID, rec.KeyID}]++
		}
	}
	need := map[ap14Call]int{}
	for _, c := range calls {
		if c.action != "" {
			need[ap14Call{c.action, c.sandbox, keyID[c.key]}]++
		}
	}
	var missing []string
	for c, n := range need {
		if have[c] < n {
			missing = append(missing, fmt.Sprintf("%s on %s by %s (%d of %d)", c.action, c.sandbox, c.key, have[c], n))
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		return fail("no audit record for: %s", strings.Join(missing, "; "))
	}
	// The log holds the records too, so its scan can see what they carry.
	// The daemon's stderr reaches d.log through a pipe: allow it a moment.
	for _, action := range []string{"create", "exec_start", "write_stdin", "write_file", "upload", "grep", "signal", "delete"} {
		line := "action=" + action + " key_id=" + keyID[d.key] + " sandbox_id=" + a
		if !waitUntil(5*time.Second, func() bool { return strings.Contains(d.log.String(), line) }) {
			return fail("the daemon's log has no %s record of %s", action, a)
		}
	}
	// The store holds them: its scan can see records.
	if held := dbHolds(d, map[string]string{"A's id": a, "B's id": bID}); len(held) == 0 {
		return fail("the store files hold neither sandbox's id: their scan would prove nothing")
	}
	audited := 0
	for _, n := range need {
		audited += n
	}
	r.note("%d audited calls of keys A and B (create, exec, stdin, signal, every file call but archives, delete) each recorded with its key and sandbox", audited)
	return nil
}

func ap14Attack(r *run) error {
	d := r.priv()
	kb := r.get("keyB")
	sec := map[string]string{}
	for _, c := range ap14Channels {
		if v := r.get("secret " + c); v != "" {
			sec[c] = v
		}
	}
	if len(sec) != len(ap14Channels) {
		return fmt.Errorf("the control made no secrets")
	}
	// The audit API, as the admin and as B.
	_, all, err := r.auditOf(d, d.key, "")
	if err != nil {
		return err
	}
	for c, v := range sec {
		if bytes.Contains(all, []byte(v)) {
			r.breach("AP-14: GET /v1/audit shows the %s secret", c)
		}
	}
	recs, _, err := r.auditOf(d, kb, "")
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if rec.KeyID != r.get("keyB.id") {
			r.breach("AP-14: key B reads a record of key %s: %+v", rec.KeyID, rec)
		}
	}
	if len(recs) == 0 {
		return fmt.Errorf("key B reads none of its own records")
	}
	if st, _, b := r.call(d, kb, "GET", "/v1/audit?key_id="+url.QueryEscape(adminKeyID(d)), nil, nil); st != 403 {
		r.breach("AP-14: key B asking for the admin key's records = %d %.200s, want 403", st, b)
	}
	// The daemon's log, at debug level.
	logs := d.log.String()
	for c, v := range sec {
		if strings.Contains(logs, v) {
			r.breach("AP-14: the daemon's log holds the %s secret", c)
		}
	}
	// The store files.
	for _, h := range dbHolds(d, sec) {
		r.breach("AP-14: the store holds a secret: %s", h)
	}
	// Nothing else in the data directory keeps them once both sandboxes are gone.
	filepath.WalkDir(d.dataDir, func(p string, de os.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() || strings.HasPrefix(de.Name(), "sbx.db") {
			return nil
		}
		if fi, _ := de.Info(); fi == nil || fi.Size() > 64<<20 {
			return nil
		}
		raw, _ := os.ReadFile(p)
		for c, v := range sec {
			if bytes.Contains(raw, []byte(v)) {
				r.breach("AP-14: %s holds the %s secret after both sandboxes were deleted", p, c)
			}
		}
		return nil
	})
	return nil
}
