// This file implements the PR rows of the attack catalogue (SECURITY.md §5):
// what a sandbox sees of host processes and sockets, and whether its
// processes end when sbx says they do.

package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// --- PR-01: host pids -------------------------------------------------------------

func pr01Setup(r *run) error {
	r.create(map[string]any{"memory_mb": 128, "pids": 64})
	// The daemon's own argv is host data as well.
	r.forbidden = append(r.forbidden, "serve --data-dir")
	return nil
}

func pr01Control(r *run) error {
	// Unconfined: the host sees its marker process, so the probe has a target.
	if len(hostPidsWith(r.s.hostMarker)) == 0 {
		return fmt.Errorf("control: the host does not see its own marker process")
	}
	// Allowed target: the sandbox sees and signals its own processes.
	res := r.sh(r.a(), "kill -0 $$ && echo self-ok; tr '\\0' ' ' < /proc/1/cmdline")
	if !strings.Contains(res.Stdout, "self-ok") || !strings.Contains(res.Stdout, "__sbx_init") {
		return fmt.Errorf("control: own pid and PID 1 = %+v", res)
	}
	return nil
}

// pr01Probe lists /proc, reads every cmdline, and kill -0s 1…pid_max.
const pr01Probe = `import os
import sys
mx = int(sys.argv[1])
listed = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
tids = sorted(int(t) for p in listed for t in os.listdir("/proc/%d/task" % p))
alive = []
for p in range(1, mx + 1):
    try:
        os.kill(p, 0)
        alive.append(p)
    except ProcessLookupError:
        pass
    except PermissionError:
        alive.append(p)
print(mx, len(listed), len(alive))
print(" ".join(map(str, tids)))
print(" ".join(map(str, alive)))
for p in listed:
    try:
        print(p, open("/proc/%d/cmdline" % p, "rb").read().replace(b"\0", b" ").decode(errors="replace"))
    except OSError:
        pass
`

func pr01Attack(r *run) error {
	id := r.a()
	r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": "/workspace/pr01.py", "content": pr01Probe})
	// The sweep covers every pid the host can hand out.
	hostMax, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return err
	}
	res := r.exec(id, map[string]any{"command": "python3 /workspace/pr01.py " + strings.TrimSpace(string(hostMax)) + "; ps -eo pid,args 2>/dev/null", "timeout": 120})
	lines := strings.Split(res.Stdout, "\n")
	if res.ExitCode != 0 || len(lines) < 3 {
		return fmt.Errorf("the probe did not run: %+v", res)
	}
	var mx, nListed, nAlive int
	fmt.Sscan(lines[0], &mx, &nListed, &nAlive)
	r.note("kill -0 over 1…%d (the host's pid_max): %d pids listed in /proc, %d pids and threads answer", mx, nListed, nAlive)
	if mx < 1000 {
		return fmt.Errorf("pid_max %d: the sweep cannot have covered the host's pids", mx)
	}
	listed := strings.Fields(lines[1])
	for _, p := range strings.Fields(lines[2]) {
		if !contains(listed, p) {
			r.breach("PR-01: pid %s answers kill -0 but is none of the sandbox's own processes or threads", p)
		}
	}
	if nAlive > 64 {
		r.breach("PR-01: %d pids answer kill -0; the sandbox runs only a handful", nAlive)
	}
	if !contains(listed, "1") {
		r.breach("PR-01: no PID 1 in the sandbox's /proc")
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// --- PR-06: path unix sockets -----------------------------------------------------

func pr06Setup(r *run) error {
	r.create(nil)
	return nil
}

func pr06Control(r *run) error {
	// Unconfined: the daemon's socket answers the host.
	c := &http.Client{Transport: &http.Transport{Dial: func(_, _ string) (net.Conn, error) {
		return net.Dial("unix", filepath.Join(r.d.dataDir, "sbx.sock"))
	}}}
	resp, err := c.Get("http://sbx/v1/health")
	if err != nil {
		return fmt.Errorf("control: the host cannot reach sbx.sock: %v", err)
	}
	resp.Body.Close()
	// Allowed target: a socket the sandbox makes itself is reachable inside.
	res := r.sh(r.a(), `python3 -c '
import socket, os
s = socket.socket(socket.AF_UNIX); s.bind("/tmp/own.sock"); s.listen(1)
c = socket.socket(socket.AF_UNIX); c.connect("/tmp/own.sock"); print("own-ok")'`)
	if !strings.Contains(res.Stdout, "own-ok") {
		return fmt.Errorf("control: connecting to the sandbox's own socket: %+v", res)
	}
	return nil
}

func pr06Attack(r *run) error {
	targets := []string{"/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
		"/run/podman/podman.sock", "/var/run/crio/crio.sock", "/run/dbus/system_bus_socket",
		"/var/run/dbus/system_bus_socket", "/run/systemd/private", "/run/systemd/journal/socket",
		filepath.Join(r.d.dataDir, "sbx.sock"), filepath.Join(r.s.dir, "canary.sock"),
		filepath.Join(r.env.workRoot, r.env.sibling, "agent.sock")}
	var onHost []string
	for _, t := range targets {
		if fi, err := os.Stat(t); err == nil && fi.Mode()&os.ModeSocket != 0 {
			onHost = append(onHost, t)
		}
	}
	r.note("host sockets among the targets: %s", strings.Join(onHost, ", "))
	probe := `import socket, sys, os
for p in sys.argv[1:]:
    try:
        s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect(p); print("CONNECTED", p)
    except OSError:
        pass
    finally:
        s.close()
`
	id := r.a()
	r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": "/workspace/pr06.py", "content": probe})
	res := r.exec(id, map[string]any{"argv": append([]string{"python3", "/workspace/pr06.py"}, targets...), "timeout": 60})
	if res.ExitCode != 0 {
		return fmt.Errorf("the probe did not run: %+v", res)
	}
	for _, l := range strings.Split(res.Stdout, "\n") {
		if strings.HasPrefix(l, "CONNECTED") {
			r.breach("PR-06: %s", l)
		}
	}
	// No fd beyond stdio is inherited: ls sees 0, 1, 2 and its own listing.
	res = r.sh(id, "ls /proc/self/fd")
	if f := strings.Fields(res.Stdout); len(f) != 4 {
		r.breach("PR-06: a workload process holds fds beyond stdio: %v", f)
	}
	// Every socket in the view is one the sandbox made.
	res = r.sh(id, "find / -xdev -type s 2>/dev/null; find /dev /run /var/run -type s 2>/dev/null; true")
	for _, s := range strings.Fields(res.Stdout) {
		if !strings.HasPrefix(s, "/tmp/") && !strings.HasPrefix(s, "/workspace/") {
			r.breach("PR-06: a socket the sandbox did not make is in its view: %s", s)
		}
	}
	return nil
}

// --- PR-07: survivors -------------------------------------------------------------

// survivors starts, each with marker m in its argv: a setsid'd loop ignoring
// TERM and HUP, a double fork, nohup, a new process group, and a subreaper
// with a grandchild; then waits forever.
func survivors(m string) string {
	loop := `trap "" TERM HUP INT; while :; do sleep 1; done`
	return fmt.Sprintf(`setsid sh -c '%[1]s' %[2]s-setsid &
(sh -c '%[1]s' %[2]s-dfork &) &
nohup sh -c '%[1]s' %[2]s-nohup >/dev/null 2>&1 &
python3 -c 'import os, sys; os.setpgid(0, 0); os.execvp("sh", ["sh", "-c", sys.argv[1], sys.argv[2]])' '%[1]s' %[2]s-pgrp &
python3 - %[2]s-sub <<'EOF' &
import ctypes, os, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
if os.fork() == 0:
    if os.fork() == 0:
        os.execvp("sh", ["sh", "-c", 'trap "" TERM HUP INT; while :; do sleep 1; done', sys.argv[1] + "-grandchild"])
    os._exit(0)
while True:
    time.sleep(1)
EOF
trap "" TERM HUP; while :; do sleep 1; done`, loop, m)
}

func pr07Setup(r *run) error {
	r.create(nil)
	return nil
}

func pr07Control(r *run) error {
	// The far end: the host sees the survivors in the sandbox before the
	// close, so their absence afterwards means something.
	m := "pr07c-" + randHex(4)
	r.set("m", m)
	bg := r.exec(r.a(), map[string]any{"command": survivors(m), "background": true, "timeout": 3600})
	if bg.ProcessID == "" {
		return fmt.Errorf("starting the survivors: %+v", bg)
	}
	if !waitUntil(10*time.Second, func() bool { return len(hostPidsWith(m)) >= 5 }) {
		return fmt.Errorf("control: the host sees %d survivor processes, want >= 5", len(hostPidsWith(m)))
	}
	return nil
}

func pr07Attack(r *run) error {
	id := r.a()
	// Timeout: a foreground exec starting the same survivors ends at 2 s.
	m2 := "pr07t-" + randHex(4)
	began := time.Now()
	res := r.exec(id, map[string]any{"command": survivors(m2), "timeout": 2})
	if res.Reason != "timeout" {
		r.breach("PR-07: the exec ended with reason %q, want timeout", res.Reason)
	}
	if !waitUntil(5*time.Second, func() bool { return len(hostPidsWith(m2)) == 0 }) {
		r.breach("PR-07: %d processes of a timed-out exec outlived it by 5 s", len(hostPidsWith(m2)))
	}
	r.note("timeout: tree gone %s after the exec began (timeout 2 s, grace 0)", time.Since(began).Round(10*time.Millisecond))
	// Close: delete the sandbox with the background survivors running.
	m := r.get("m")
	cgroups := sandboxCgroups(r.d, id)
	began = time.Now()
	if st, b := r.api("DELETE", "/v1/sandboxes/"+id, nil); st != 204 {
		return fmt.Errorf("DELETE = %d %s", st, b)
	}
	gone := waitUntil(5*time.Second, func() bool {
		if len(hostPidsWith(m)) > 0 {
			return false
		}
		for _, c := range cgroups {
			if _, err := os.Stat(c); err == nil {
				return false
			}
		}
		return true
	})
	if !gone {
		r.breach("PR-07: 5 s after DELETE: survivors %v, cgroups %v", hostPidsWith(m), existing(cgroups))
	}
	r.note("close: processes and %d cgroups gone %s after DELETE began", len(cgroups), time.Since(began).Round(10*time.Millisecond))
	return nil
}

func existing(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// --- PR-08: a zombie storm --------------------------------------------------------

func pr08Setup(r *run) error {
	r.create(map[string]any{"pids": 256})
	return nil
}

const countZombies = `grep -l '^State:.Z' /proc/[0-9]*/status 2>/dev/null | wc -l`

func pr08Control(r *run) error {
	// A zombie whose parent never reaps it shows in the count.
	res := r.sh(r.a(), `(sh -c 'true & exec sleep 3' &) ; sleep 0.5; `+countZombies)
	if n, _ := strconv.Atoi(strings.TrimSpace(res.Stdout)); n < 1 {
		return fmt.Errorf("control: an unreaped child does not show as a zombie: %+v", res)
	}
	return nil
}

// pr08Storm makes rounds of 100 orphans: a shell forks them and exits at
// once, so they are reparented to PID 1 and exit there. A fork the pids limit
// refuses shows on stderr.
const pr08Storm = `rounds=$1
for r in $(seq $rounds); do
  sh -c 'for i in $(seq 100); do (exit 0) & done'
done
echo $((rounds*100))
`

func pr08Attack(r *run) error {
	id := r.a()
	rounds := 20
	if soak() {
		rounds = 200
	}
	r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": "/workspace/storm.sh", "content": pr08Storm})
	res := r.exec(id, map[string]any{"command": fmt.Sprintf("sh /workspace/storm.sh %d 2>storm.err; sleep 1; grep -ci fork storm.err; %s", rounds, countZombies), "timeout": 300})
	f := strings.Fields(res.Stdout)
	if len(f) != 3 {
		return fmt.Errorf("the storm did not run: %+v", res)
	}
	r.note("%s orphans, %s forks refused, %s zombies 1 s later (pids limit 256)", f[0], f[1], f[2])
	if f[1] != "0" {
		r.breach("PR-08: %s forks failed: zombies held the pids limit", f[1])
	}
	if n, _ := strconv.Atoi(f[2]); n > 2 {
		r.breach("PR-08: %d zombies 1 s after the storm: PID 1 does not reap", n)
	}
	for _, c := range sandboxCgroups(r.d, id) {
		if b, err := os.ReadFile(filepath.Join(c, "pids.current")); err == nil {
			r.note("host pids.current after the storm: %s", strings.TrimSpace(string(b)))
		}
	}
	return nil
}

// --- PR-09: kill of a job, of an exited job, and pid reuse -------------------------

func pr09Setup(r *run) error {
	r.create(map[string]any{"timeout": 3600}) // the soak variant forks for 10 minutes
	return nil
}

func pr09Control(r *run) error {
	// kill -0 sees a live background job: the probe of the attack can tell.
	bg := r.exec(r.a(), map[string]any{"command": "sleep 1000", "background": true})
	if res := r.sh(r.a(), fmt.Sprintf("kill -0 %d", bg.PID)); res.ExitCode != 0 {
		return fmt.Errorf("control: kill -0 on a live background process failed: %+v", res)
	}
	r.set("live", bg.ProcessID)
	return nil
}

// pr09Reuse forks until the next pid is P, then starts a victim with that pid.
const pr09Reuse = `import os, sys, time
P, marker = int(sys.argv[1]), sys.argv[2]
end = time.time() + float(sys.argv[3])
while time.time() < end:
    pid = os.fork()
    if pid == 0:
        if os.getpid() == P:
            os.execvp("sh", ["sh", "-c", 'trap "" TERM HUP; while :; do sleep 1; done', marker])
        os._exit(0)
    if pid == P:
        open("/workspace/victim.pid", "w").write(str(pid))
        break
    os.waitpid(pid, 0)
while True:
    time.sleep(1)
`

func pr09Attack(r *run) error {
	id := r.a()
	sig := func(pid string) (int, string) {
		st, b := r.api("POST", "/v1/sandboxes/"+id+"/processes/"+pid+"/signal", map[string]any{"signal": "SIGKILL"})
		var res struct{ Result string }
		json.Unmarshal(b, &res)
		return st, string(b)
	}
	// 1. A job with a group of children: all of it goes.
	m := "pr09-" + randHex(4)
	job := r.exec(id, map[string]any{"command": fmt.Sprintf(`sh -c 'sleep 1000 & sleep 1000 & wait' %s-child & sh -c 'sleep 1000' %s-child2 & wait`, m, m), "background": true})
	if !waitUntil(5*time.Second, func() bool { return len(hostPidsWith(m)) >= 2 }) {
		return fmt.Errorf("the job's children never showed on the host")
	}
	if st, b := sig(job.ProcessID); st != 200 || !strings.Contains(b, "stopped") {
		r.breach("PR-09: signal of a live job = %d %s, want stopped", st, b)
	}
	if !waitUntil(5*time.Second, func() bool { return len(hostPidsWith(m)) == 0 }) {
		r.breach("PR-09: %d processes of the killed job's group survive", len(hostPidsWith(m)))
	}
	if st, b := sig(r.get("live")); st != 200 || !strings.Contains(b, "stopped") {
		r.breach("PR-09: signal of the control's live job = %d %s, want stopped", st, b)
	}
	// 2. An exited job: already_exited, and nothing else is signalled. After
	// a wrap the kernel hands out pids from 300 (RESERVED_PIDS) up, in every
	// pid namespace, so the job is started past that: its pid can come again.
	r.sh(id, "i=0; while [ $i -lt 320 ]; do /bin/true; i=$((i+1)); done")
	done := r.exec(id, map[string]any{"command": "true", "background": true})
	r.api("POST", "/v1/sandboxes/"+id+"/processes/"+done.ProcessID+"/wait", map[string]any{"timeout": 30})
	if st, b := sig(done.ProcessID); st != 200 || !strings.Contains(b, "already_exited") {
		r.breach("PR-09: signal of an exited job = %d %s, want already_exited", st, b)
	}
	// 3. Pid reuse: the exited job's pid now belongs to a victim. The
	// sandbox's pid namespace hands out pids up to its own pid_max (4M on
	// recent kernels, where it is per namespace), so the test lowers that
	// namespace's pid_max from the host, which owns it, to 4096: the pid then
	// comes round after at most a few thousand forks instead of millions.
	if err := lowerPidMax(r, id, 4096); err != nil {
		r.note("pid_max of the sandbox's pid namespace left as is: %v", err)
	}
	pidMax, _ := strconv.Atoi(strings.TrimSpace(r.sh(id, "cat /proc/sys/kernel/pid_max").Stdout))
	if pidMax > 65536 && !soak() {
		r.note("pid reuse not measured: the sandbox's pid namespace hands out %d pids before reusing one (SBX_SOAK=1 tries for 10 min)", pidMax)
		return nil
	}
	bound := 150 * time.Second
	if soak() {
		bound = 10 * time.Minute
	}
	victim := "pr09v-" + randHex(4)
	r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": "/workspace/reuse.py", "content": pr09Reuse})
	reuse := r.exec(id, map[string]any{"argv": []string{"python3", "/workspace/reuse.py", strconv.Itoa(done.PID), victim, strconv.Itoa(int(bound.Seconds()))}, "background": true, "timeout": 3600})
	if !waitUntil(bound, func() bool { return r.sh(id, "cat /workspace/victim.pid 2>/dev/null").Stdout != "" }) {
		r.note("pid reuse not measured: pid %d was not handed out again within %s", done.PID, bound)
		r.api("POST", "/v1/sandboxes/"+id+"/processes/"+reuse.ProcessID+"/signal", map[string]any{"signal": "SIGKILL"})
		return nil
	}
	res := r.sh(id, "cat /workspace/victim.pid")
	if strings.TrimSpace(res.Stdout) != strconv.Itoa(done.PID) {
		return fmt.Errorf("the victim has pid %q, want %d", res.Stdout, done.PID)
	}
	if st, b := sig(done.ProcessID); st != 200 || !strings.Contains(b, "already_exited") {
		r.breach("PR-09: signal of the exited job after its pid was reused = %d %s, want already_exited", st, b)
	}
	time.Sleep(200 * time.Millisecond)
	if res := r.sh(id, fmt.Sprintf("tr '\\0' ' ' < /proc/%d/cmdline", done.PID)); !strings.Contains(res.Stdout, victim) {
		r.breach("PR-09: the process that reused pid %d was signalled", done.PID)
	}
	r.note("pid %d reused by a victim (pid_max %d); the old job's signal left it alone", done.PID, pidMax)
	r.api("POST", "/v1/sandboxes/"+id+"/processes/"+reuse.ProcessID+"/signal", map[string]any{"signal": "SIGKILL"})
	return nil
}

// lowerPidMax sets pid_max of sandbox id's pid namespace from the host: a
// process forked into that namespace (nsenter -p) writes the namespace's own
// pid_max sysctl, which the host's root may set and the sandbox may not.
func lowerPidMax(r *run, id string, max int) error {
	m := "pr09pm-" + randHex(4)
	bg := r.exec(id, map[string]any{"command": "sh -c 'sleep 1000' " + m, "background": true})
	defer r.api("POST", "/v1/sandboxes/"+id+"/processes/"+bg.ProcessID+"/signal", map[string]any{"signal": "SIGKILL"})
	var pids []string
	if !waitUntil(5*time.Second, func() bool { pids = hostPidsWith(m); return len(pids) > 0 }) {
		return fmt.Errorf("no host pid carries %s", m)
	}
	out, err := exec.Command("nsenter", "-t", pids[0], "-p", "--", "sh", "-c", fmt.Sprintf("echo %d > /proc/sys/kernel/pid_max", max)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nsenter: %v: %s", err, out)
	}
	return nil
}
