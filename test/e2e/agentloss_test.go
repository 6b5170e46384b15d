package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// agentLossBound is how soon the loss of a killed agent must show (SECURITY.md
// PR-03, RL-03); hungAgentBound is the same for an agent that lives but stops
// answering, which only the heartbeat (7.5 s at worst) finds. They are the only
// timing bounds the tests hold: contracts, with a margin.
const (
	agentLossBound = 5 * time.Second
	hungAgentBound = 15 * time.Second
)

// agentPID returns the host pid of sandbox id's agent: the process in the
// sandbox's cgroup that is PID 1 of its pid namespace. It fails t if there is none.
func agentPID(t *testing.T, instance, id string) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), "/sbx/"+instance+"/"+id) {
			continue
		}
		status, err := os.ReadFile(filepath.Join(filepath.Dir(p), "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(status), "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				return pid
			}
		}
	}
	t.Fatalf("no agent process (pid 1 of its namespace) in the cgroups of sandbox %s", id)
	return 0
}

// streamEvent is one event of an NDJSON exec stream.
type streamEvent struct {
	Type      string `json:"type"`
	ProcessID string `json:"process_id"`
	Reason    string `json:"reason"`
	ExitCode  int    `json:"exit_code"`
	Error     *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// streamExec starts a streamed exec and sends its events on the channel, which
// closes when the stream ends.
func streamExec(t *testing.T, d *daemon, id, command string) <-chan streamEvent {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"command": command, "timeout": 3600})
	req, err := http.NewRequest("POST", d.url+"/v1/sandboxes/"+id+"/exec", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("streamed exec: %v", err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		t.Fatalf("streamed exec = %s", resp.Status)
	}
	out := make(chan streamEvent, 16)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev streamEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				out <- ev
			}
		}
	}()
	return out
}

// awaitLost waits for the streamed exec's events to end, within streamBound,
// with a result of reason agent_lost, then for sandbox id to be in state error
// within stateBound of since, when the agent got signal sig; it returns the
// sandbox's state_reason.
func awaitLost(t *testing.T, d *daemon, id string, events <-chan streamEvent, since time.Time, streamBound, stateBound time.Duration, sig string) string {
	t.Helper()
	var last streamEvent
	timeout := time.After(streamBound)
wait:
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				break wait
			}
			last = ev
		case <-timeout:
			t.Fatalf("the exec in flight did not end within %v of the agent's %s", streamBound, sig)
		}
	}
	if last.Type != "result" || last.Reason != "agent_lost" {
		t.Errorf("last event of the exec in flight = %+v, want a result with reason agent_lost", last)
	}
	var sb struct {
		State       string `json:"state"`
		StateReason string `json:"state_reason"`
	}
	for {
		st, b := d.api("GET", "/v1/sandboxes/"+id, nil)
		if st != 200 {
			t.Fatalf("GET %s after the agent's %s = %d %s", id, sig, st, b)
		}
		json.Unmarshal(b, &sb)
		if sb.State == "error" {
			return sb.StateReason
		}
		if time.Since(since) > stateBound {
			t.Fatalf("sandbox %s is %q %v after its agent's %s, want error", id, sb.State, stateBound, sig)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PR-03, RL-03: the agent SIGKILLed from the host mid-exec. Within 5 s the
// exec ends with reason agent_lost and the sandbox's state is error, saying
// agent_lost and the signal; later calls get 502 agent_lost naming the sandbox
// and its state; the daemon and a sibling go on; delete leaves nothing.
func TestAgentKilledIsLost(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	sibling := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+sibling, nil)
	if r := d.sh(id, "echo alive"); r.Stdout != "alive\n" {
		t.Fatalf("control: exec before the kill = %+v", r)
	}

	events := streamExec(t, d, id, "sleep 1000")
	select {
	case ev, ok := <-events:
		if !ok || ev.Type != "started" {
			t.Fatalf("first event = %+v (open %v), want started", ev, ok)
		}
	case <-time.After(time.Minute):
		t.Fatal("the streamed exec did not start")
	}
	pid := agentPID(t, d.instance, id)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing agent pid %d: %v", pid, err)
	}
	reason := awaitLost(t, d, id, events, time.Now(), agentLossBound, agentLossBound, "SIGKILL")
	if !strings.Contains(reason, "agent_lost") || !strings.Contains(reason, "signal 9") {
		t.Errorf("state_reason = %q, want agent_lost and signal 9", reason)
	}

	st, b := d.api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "true"})
	if st != 502 {
		t.Errorf("exec on the lost sandbox = %d %s, want 502", st, b)
	} else if e := decodeError(t, b); e.Error.Code != "agent_lost" || e.Error.SandboxID != id || !strings.Contains(e.Error.Message, "error") {
		t.Errorf("exec on the lost sandbox: %+v, want agent_lost naming %s and its state", e.Error, id)
	}
	if st, b := d.api("GET", "/v1/sandboxes/"+id+"/files/read?path=/etc/hostname", nil); st != 502 {
		t.Errorf("read on the lost sandbox = %d %s, want 502", st, b)
	}
	if st, _ := d.api("GET", "/v1/health", nil); st != 200 {
		t.Errorf("daemon health after the loss = %d", st)
	}
	if r := d.sh(sibling, "echo sibling"); r.Stdout != "sibling\n" {
		t.Errorf("sibling after the loss: %+v", r)
	}

	if st, b := d.api("DELETE", "/v1/sandboxes/"+id, nil); st != 204 {
		t.Fatalf("DELETE of the lost sandbox = %d %s", st, b)
	}
	if st, _ := d.api("GET", "/v1/sandboxes/"+id, nil); st != 404 {
		t.Errorf("GET after delete = %d, want 404", st)
	}
	left := must(filepath.Glob("/sys/fs/cgroup/*/sbx/" + d.instance + "/" + id))
	left = append(left, "/sys/fs/cgroup/sbx/"+d.instance+"/"+id, filepath.Join(d.dataDir, "backends", "native", id))
	for _, h := range left {
		if _, err := os.Stat(h); err == nil {
			t.Errorf("left behind by the lost sandbox's delete: %s", h)
		}
	}
}

// RL-03: an agent that lives but stops answering (SIGSTOP from the host) is lost
// by the heartbeat within 5 s; the sandbox's processes are then killed, so
// nothing runs on unwatched, and delete leaves nothing.
func TestAgentHungIsLost(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	bg := d.exec(id, map[string]any{"command": "sleep 1000", "background": true})
	if bg.ProcessID == "" {
		t.Fatalf("background exec returned no process id")
	}
	events := streamExec(t, d, id, "sleep 1000")
	if ev := <-events; ev.Type != "started" {
		t.Fatalf("first event = %+v, want started", ev)
	}
	pid := agentPID(t, d.instance, id)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stopping agent pid %d: %v", pid, err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT) // harmless once it is dead
	reason := awaitLost(t, d, id, events, time.Now(), hungAgentBound, agentLossBound, "SIGSTOP")
	if !strings.Contains(reason, "agent_lost") || !strings.Contains(reason, "health") {
		t.Errorf("state_reason = %q, want agent_lost and the missed health checks", reason)
	}
	// Nothing of the sandbox runs any more: no process on the host in its cgroups
	// (a hang guard of a minute, not a timing assertion).
	inSandbox := func() []string {
		var out []string
		procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
		for _, p := range procs {
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "/sbx/"+d.instance+"/"+id) {
				if st, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stat")); err == nil && !strings.Contains(string(st), ") Z ") {
					out = append(out, filepath.Dir(p))
				}
			}
		}
		return out
	}
	deadline := time.Now().Add(time.Minute)
	for left := inSandbox(); len(left) > 0; left = inSandbox() {
		if time.Now().After(deadline) {
			t.Fatalf("processes of the lost sandbox still run: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st, b := d.api("DELETE", "/v1/sandboxes/"+id, nil); st != 204 {
		t.Fatalf("DELETE of the lost sandbox = %d %s", st, b)
	}
	if st, _ := d.api("GET", "/v1/sandboxes/"+id, nil); st != 404 {
		t.Errorf("GET after delete = %d, want 404", st)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestIdleWatchCost measures what watching idle sandboxes costs: the daemon's
// CPU time (and, beside it, the agents' own) over 30 s with 100 idle sandboxes,
// each health-checked about once a second. It reports and asserts nothing about
// speed; SBX_WATCH_COST=1 runs it (it takes about a minute).
func TestIdleWatchCost(t *testing.T) {
	if os.Getenv("SBX_WATCH_COST") != "1" {
		t.Skip("set SBX_WATCH_COST=1 to measure the cost of watching 100 idle sandboxes")
	}
	const n, window = 100, 30 * time.Second
	d := startDaemon(t, "", "SBX_POOL_SIZE=0")
	defer d.cleanup()
	idle := cpuTicks(t, d.cmd.Process.Pid)
	time.Sleep(10 * time.Second)
	idle = cpuTicks(t, d.cmd.Process.Pid) - idle
	ids := make([]string, n)
	for i := range ids {
		ids[i] = d.create(map[string]any{"memory_mb": 64, "timeout": 600})
	}
	agents := make([]int, n)
	for i, id := range ids {
		agents[i] = agentPID(t, d.instance, id)
	}
	time.Sleep(5 * time.Second) // let the creates' work settle
	sum := func() (total int64) {
		for _, pid := range agents {
			total += cpuTicks(t, pid)
		}
		return total
	}
	d0, a0 := cpuTicks(t, d.cmd.Process.Pid), sum()
	time.Sleep(window)
	d1, a1 := cpuTicks(t, d.cmd.Process.Pid), sum()
	const hz = 100 // USER_HZ: /proc reports CPU time in 1/100 s on Linux
	pct := func(ticks int64, over time.Duration) float64 {
		return float64(ticks) / hz / over.Seconds() * 100
	}
	t.Logf("daemon, no sandbox: %.2f%% of one core over 10 s", pct(idle, 10*time.Second))
	t.Logf("daemon, %d idle watched sandboxes: %.2f%% of one core over %v (%d ticks of 10 ms)", n, pct(d1-d0, window), window, d1-d0)
	t.Logf("the %d agents together: %.2f%% of one core over %v", n, pct(a1-a0, window), window)
	for _, id := range ids {
		var sb struct{ State string }
		_, b := d.api("GET", "/v1/sandboxes/"+id, nil)
		if json.Unmarshal(b, &sb); sb.State != "running" {
			t.Errorf("idle sandbox %s is %q after the window, want running (no false loss)", id, sb.State)
		}
	}
}

// cpuTicks returns the user and system CPU time of pid, in clock ticks.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("reading the CPU time of pid %d: %v", pid, err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	return utime + stime
}
