package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What the jail shows from inside, each with a control where one makes sense.
func TestJailView(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(map[string]any{"memory_mb": 128, "pids": 64})
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	// What the sandbox sees of processes is PR-01 of the attack catalogue.
	// Every thread of the agent, and the workload, hold only the default
	// capabilities with no_new_privs; the daemon's own are wider (control).
	const dockerCaps = "00000000000005fb" // nsinit.DefaultCaps
	// The workload holds exactly the default set, its bounding set too.
	r := d.sh(id, "grep -h -E '^(CapAmb|CapBnd|CapEff|CapPrm|NoNewPrivs)' /proc/self/status | tr -d '\t'")
	for _, want := range []string{"CapAmb:0000000000000000", "CapBnd:" + dockerCaps, "CapEff:" + dockerCaps, "CapPrm:" + dockerCaps, "NoNewPrivs:1"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("the workload: want %s, got\n%s", want, r.Stdout)
		}
	}
	// Every thread of the agent holds them at most, with no_new_privs (its
	// bounding set stays whole: it forks from a thread that narrows its own).
	r = d.sh(id, "grep -h -E '^(CapAmb|CapEff|CapPrm|NoNewPrivs)' /proc/1/task/*/status | tr -d '\t' | sort | uniq -c")
	for _, want := range []string{"CapAmb:0000000000000000", "CapEff:" + dockerCaps, "CapPrm:" + dockerCaps, "NoNewPrivs:1"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("threads of the agent: want every one %s, got\n%s", want, r.Stdout)
		}
	}
	if got := strings.Count(strings.TrimSpace(r.Stdout), "\n") + 1; got != 4 {
		t.Errorf("the agent's threads disagree on their capabilities (want 4 distinct lines):\n%s", r.Stdout)
	}
	if host, _ := os.ReadFile("/proc/self/status"); strings.Contains(string(host), "CapBnd:\t"+dockerCaps) {
		t.Errorf("control: the test process already has the default bounding set; the probe cannot tell")
	}
	if r := d.sh(id, "hostname"); strings.TrimSpace(r.Stdout) != id {
		t.Errorf("hostname = %q, want %s", r.Stdout, id)
	}
	if r := d.sh(id, "pwd"); strings.TrimSpace(r.Stdout) != "/workspace" {
		t.Errorf("default cwd = %q, want /workspace", r.Stdout)
	}
	// Loopback only.
	if r := d.sh(id, "ls /sys/class/net 2>/dev/null || cat /proc/net/dev"); strings.Contains(r.Stdout, "eth") || strings.Contains(r.Stdout, "veth") {
		t.Errorf("network interfaces beyond lo: %q", r.Stdout)
	}
	// Writes to the system view land in the sandbox's own layer.
	hostBefore, _ := os.ReadFile("/etc/hostname")
	if r := d.sh(id, "echo changed > /etc/hostname && cat /etc/hostname"); strings.TrimSpace(r.Stdout) != "changed" {
		t.Errorf("writing the sandbox's /etc: %+v", r)
	}
	if hostAfter, _ := os.ReadFile("/etc/hostname"); string(hostAfter) != string(hostBefore) {
		t.Fatalf("a write in the sandbox changed the host's /etc/hostname")
	}
	// Secrets of the host are not in the view; the file next to it is (control).
	if r := d.sh(id, "grep -c '[$]' /etc/shadow"); strings.TrimSpace(r.Stdout) != "0" {
		t.Errorf("/etc/shadow in the sandbox holds password hashes: %+v", r)
	}
	if r := d.sh(id, "test -e /etc/sudoers || test -e /etc/ssh || test -e /etc/machine-id"); r.ExitCode == 0 {
		t.Errorf("a host secret of /etc is visible in the sandbox")
	}
	if r := d.sh(id, "test -e /etc/passwd"); r.ExitCode != 0 {
		t.Errorf("control: /etc/passwd missing in the sandbox")
	}
	// The binary the agent runs cannot be opened for writing.
	if r := d.sh(id, "echo x >> /proc/1/exe"); r.ExitCode == 0 {
		t.Errorf("the agent's binary was writable through /proc/1/exe")
	}
	// The agent's fds (its cgroup directory among them) are out of reach; the
	// same probe on the workload's own fds works (control).
	if r := d.sh(id, "readlink /proc/self/fd/0 && ls /proc/self/fd/0"); r.ExitCode != 0 {
		t.Errorf("control: following /proc/self/fd/0 failed: %+v", r)
	}
	if r := d.sh(id, "for f in /proc/1/fd/*; do readlink $f && exit 0; ls $f/ && exit 0; done; exit 1"); r.ExitCode == 0 {
		t.Errorf("an agent fd is reachable from the sandbox: %q", r.Stdout)
	}
	if r := d.sh(id, "echo x > /proc/sys/kernel/hostname"); r.ExitCode == 0 {
		t.Errorf("/proc/sys is writable")
	}
	// The pids limit holds inside (the exec itself survives and reports).
	r = d.exec(id, map[string]any{"command": "for i in $(seq 200); do sleep 30 & done 2>/dev/null; sleep 1; ls -d /proc/[0-9]* | wc -l", "timeout": 20})
	if n := strings.TrimSpace(r.Stdout); n != "" && len(n) > 0 {
		if c := atoi(n); c > 64 {
			t.Errorf("%d processes alive under a pids limit of 64", c)
		}
	}
	var sb struct {
		Isolation struct {
			Level  string
			Cgroup string
			Layers map[string]string
		}
	}
	_, b := d.api("GET", "/v1/sandboxes/"+id, nil)
	json.Unmarshal(b, &sb)
	for _, l := range []string{"userns", "pidns", "mntns", "netns", "utsns", "ipcns", "cgroupns", "cgroup", "caps", "rlimits", "closefds", "nnp", "landlock", "seccomp"} {
		if sb.Isolation.Layers[l] != "applied" {
			t.Errorf("layer %s = %q, want applied", l, sb.Isolation.Layers[l])
		}
	}
}

func TestOOMIsReported(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(map[string]any{"memory_mb": 64})
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)
	r := d.exec(id, map[string]any{"command": "python3 -c 'x = bytearray(512 << 20); print(len(x))'", "timeout": 60})
	if r.Reason != "oom" {
		t.Errorf("memory bomb: reason %q exit %d stderr %q, want oom", r.Reason, r.ExitCode, r.Stderr)
	}
	// The sandbox survives its own OOM.
	if r := d.sh(id, "echo alive"); r.Stdout != "alive\n" {
		t.Errorf("after OOM: %+v", r)
	}
}

func TestTTLExpiresAndExtends(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(map[string]any{"timeout": 2})
	keep := d.create(map[string]any{"timeout": 2})
	defer d.api("DELETE", "/v1/sandboxes/"+keep, nil)
	if st, b := d.api("PATCH", "/v1/sandboxes/"+keep, map[string]any{"timeout": 600}); st != 200 {
		t.Fatalf("PATCH timeout = %d %s", st, b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, _ := d.api("GET", "/v1/sandboxes/"+id, nil)
		if st == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox with a 2 s TTL still there after 30 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st, _ := d.api("GET", "/v1/sandboxes/"+keep, nil); st != 200 {
		t.Errorf("extended sandbox = %d, want 200", st)
	}
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return n
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// PR-03: root in a sandbox kills every process it can see, kill(-1, SIGKILL),
// and tries its PID 1. Its own workload dies; its agent, the daemon, a sibling
// sandbox's processes and a host process live on, each checked on the host.
func TestKillAllAsSandboxRoot(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)
	sibling := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+sibling, nil)
	host := exec.Command("sleep", "1000")
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { host.Process.Kill(); host.Wait() }()
	sib := d.exec(sibling, map[string]any{"command": "sleep 1000", "background": true})
	own := d.exec(id, map[string]any{"command": "sleep 1000", "background": true})
	agent := agentPID(t, d.instance, id)

	r := d.sh(id, "kill -9 -1; kill -9 1; echo survived")
	if r.Stdout != "survived\n" {
		t.Errorf("kill -9 -1 as sandbox root: %+v (the shell itself is spared by kill(-1))", r)
	}
	// Control: the signal did reach the sandbox's own background process.
	var p struct {
		State string `json:"state"`
	}
	if !waitUntil(10*time.Second, func() bool {
		_, b := d.api("GET", "/v1/sandboxes/"+id+"/processes/"+own.ProcessID, nil)
		return json.Unmarshal(b, &p) == nil && p.State != "running"
	}) {
		t.Errorf("control: the sandbox's own background process is still %q after kill -9 -1", p.State)
	}
	if err := syscall.Kill(agent, 0); err != nil {
		t.Errorf("the sandbox's agent (host pid %d) did not survive: %v", agent, err)
	}
	if r := d.sh(id, "echo still serving"); r.Stdout != "still serving\n" {
		t.Errorf("exec after kill -9 -1: %+v", r)
	}
	if st, b := d.api("GET", "/v1/sandboxes/"+id, nil); st != 200 || !strings.Contains(string(b), `"state":"running"`) {
		t.Errorf("sandbox after kill -9 -1 = %d %s, want running", st, b)
	}
	if err := d.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the daemon did not survive: %v", err)
	}
	if err := host.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the host process did not survive: %v", err)
	}
	_, b := d.api("GET", "/v1/sandboxes/"+sibling+"/processes/"+sib.ProcessID, nil)
	if json.Unmarshal(b, &p) != nil || p.State != "running" {
		t.Errorf("the sibling's background process after kill -9 -1 next door: %s", b)
	}
}

// waitUntil polls cond for up to limit; it reports whether cond came true.
func waitUntil(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}
