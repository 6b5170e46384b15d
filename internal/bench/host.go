package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/api/agent/boot"
)

// bwrapArgs is a one-shot bubblewrap sandbox comparable to sbx's jail: every
// namespace, read-only system dirs, fresh /proc, minimal /dev, tmpfs /tmp.
func bwrapArgs(argv ...string) []string {
	args := []string{
		"--unshare-all", "--die-with-parent", "--new-session",
		"--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/",
	}
	for _, d := range []string{"bin", "lib", "lib64", "sbin"} {
		p := "/" + d
		if target, err := os.Readlink(p); err == nil {
			args = append(args, "--symlink", target, p)
		} else if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			args = append(args, "--ro-bind", p, p)
		}
	}
	return append(args, argv...)
}

// runBwrap runs argv once in a fresh bubblewrap sandbox and returns how long the
// whole thing took.
func runBwrap(ctx context.Context, bwrap string, argv ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, bwrap, bwrapArgs(argv...)...)
	return timedRun(cmd, fmt.Sprintf("bwrap %v", argv))
}

// unshareArgs runs argv in fresh mount, UTS, IPC, network, PID and cgroup
// namespaces, as every sbx sandbox has, and nothing more.
func unshareArgs(argv ...string) []string {
	return append([]string{"--mount", "--uts", "--ipc", "--net", "--pid", "--fork", "--cgroup", "--"}, argv...)
}

// runUnshare runs argv once under unshare and returns how long it took.
func runUnshare(ctx context.Context, unshare string, argv ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, unshare, unshareArgs(argv...)...)
	return timedRun(cmd, fmt.Sprintf("unshare %v", argv))
}

// hostSpawn runs argv once as a child of this process, stdout and stderr
// captured through pipes as the agent captures them, and returns how long
// start to reaped took.
func hostSpawn(ctx context.Context, argv ...string) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout = &out
	return timedRun(cmd, fmt.Sprintf("%v on the host", argv))
}

// timedRun runs cmd with its stderr captured for the error, which what names,
// and returns how long start to reaped took.
func timedRun(cmd *exec.Cmd, what string) (time.Duration, error) {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w: %s", what, err, strings.TrimSpace(stderr.String()))
	}
	return time.Since(start), nil
}

// memory of one process, in bytes.
type memory struct {
	RSS, PSS, USS int64
}

// readMemory reads /proc/<pid>/smaps_rollup: RSS, PSS, and USS (private pages).
func readMemory(pid int) (memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return memory{}, err
	}
	defer f.Close()
	var m memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "Rss:":
			m.RSS = kb << 10
		case "Pss:":
			m.PSS = kb << 10
		case "Private_Clean:", "Private_Dirty:":
			m.USS += kb << 10
		}
	}
	return m, sc.Err()
}

// agentPID finds the agent of sandbox id through its cgroup (the agent is the
// process whose argv names the init or agent stage). It returns 0 when none is visible.
func agentPID(id string) int {
	for _, pid := range sandboxPIDs(id) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		// The native backend's agent is its init stage gone on; local's
		// is started as the agent stage.
		if bytes.Contains(cmd, []byte("\x00"+boot.InitArg+"\x00")) || bytes.Contains(cmd, []byte("\x00"+boot.AgentArg+"\x00")) {
			return pid
		}
	}
	return 0
}

// sandboxPIDs are the processes of sandbox id on this host: those of its
// cgroup and the groups below it, in one hierarchy.
func sandboxPIDs(id string) []int {
	for _, pat := range []string{"/sys/fs/cgroup/memory/sbx/*/" + id, "/sys/fs/cgroup/sbx/*/" + id, "/sys/fs/cgroup/*/sbx/*/" + id} {
		dirs, _ := filepath.Glob(pat)
		if len(dirs) == 0 {
			continue
		}
		var pids []int
		filepath.WalkDir(dirs[0], func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
		return pids
	}
	return nil
}

// childrenCPU is the CPU time of this process's children that it has waited
// for (and of theirs that they waited for), user and system.
func childrenCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_CHILDREN, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ).
const clockTick = 10 * time.Millisecond

// processCPU is the user and system CPU time of process pid so far.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command, which may hold spaces: state is field 3,
	// utime 14 and stime 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * clockTick, nil
}

// spawners lists the children of daemon pid whose argv names
// boot.SpawnerArg: the native backend's spawner.
func spawners(pid int) []int {
	var out []int
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if i < 0 || len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		child, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", child))
		if bytes.Contains(cmd, []byte("\x00"+boot.SpawnerArg+"\x00")) {
			out = append(out, child)
		}
	}
	return out
}

// DaemonCPU is the CPU used so far by daemon pid, by its spawner (a child
// whose argv names boot.SpawnerArg), and by the processes of the sandboxes
// of its native instance, counted in the instance's cgroup (v2 cpu.stat, else
// v1 cpuacct), which keeps what removed sandboxes used.
func DaemonCPU(pid int, instance string) (CPUUse, error) {
	var u CPUUse
	var err error
	if u.Daemon, err = processCPU(pid); err != nil {
		return u, err
	}
	for _, child := range spawners(pid) {
		if c, err := processCPU(child); err == nil {
			u.Helpers += c
		}
	}
	// The unified group first: every sandbox process is in it on a v2 or
	// hybrid host, where sbx makes no v1 cpuacct group (cgroup.NoCPUAcct).
	for _, p := range []string{"/sys/fs/cgroup/sbx/" + instance + "/cpu.stat", "/sys/fs/cgroup/unified/sbx/" + instance + "/cpu.stat"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return u, fmt.Errorf("%s: %w", p, err)
				}
				u.Sandboxes = time.Duration(us) * time.Microsecond
				return u, nil
			}
		}
	}
	if dirs, _ := filepath.Glob("/sys/fs/cgroup/cpu*acct*/sbx/" + instance + "/cpuacct.usage"); len(dirs) > 0 {
		b, err := os.ReadFile(dirs[0])
		if err != nil {
			return u, err
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return u, fmt.Errorf("%s: %w", dirs[0], err)
		}
		u.Sandboxes = time.Duration(ns)
		return u, nil
	}
	return u, fmt.Errorf("no cgroup CPU count for instance %s", instance)
}
