package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/isolation/cgroup"
)

// createWork is the work one create + exec of true + delete does, counted in
// the system calls of the daemon and everything it starts (strace -f).
type createWork struct {
	GoStarts  int // execve of the sbx binary: a Go runtime started
	Processes int // clone/clone3/fork/vfork without CLONE_THREAD
	Execs     int // every execve
	Mounts    int // mount(2), open_tree, move_mount, mount_setattr
	Mkdirs    int // mkdir, mkdirat
	Unshares  int // but unshare(CLONE_NEWNET), a network namespace
	// NetNamespaces is network namespaces made: clones with CLONE_NEWNET
	// and the spawner's unshare(CLONE_NEWNET) making one ahead.
	NetNamespaces int
	// NoNewPrivs is prctl(PR_SET_NO_NEW_PRIVS) calls: the init setting it
	// process-wide stops every thread, one call each; born with it from
	// the spawner, it sets none.
	NoNewPrivs int
	// KernelLog is the overlayfs lines the kernel logged: a warning per
	// mount is both work (printk to the console) and noise in the host's log.
	KernelLog int
	// Replies is writes on unix sockets (the agent's connections from the
	// daemon): each wakes the daemon to read it. Budgeted for an exec only
	// (TestExecWork): a create's include the watch's health checks.
	Replies int
	// Subvolumes is btrfs subvolumes made and deleted (the quota pool's
	// ioctls): each a transaction, and the cleaner's drop of a deleted one.
	Subvolumes int
}

// createBudget is the most each count may be per cycle on a merged-/usr host
// (Debian 12 here and in CI); each top-level directory a host has as a real
// directory instead of a link into /usr (TopLinks) adds one overlay: one mount
// and its dirs. Lower a figure when a change removes work; a change that adds
// work fails here first.
var createBudget = createWork{GoStarts: 1, Processes: 2, Execs: 2, Mounts: 47, Mkdirs: 21, Unshares: 1, NetNamespaces: 1, NoNewPrivs: 2, KernelLog: 0, Subvolumes: 0}

// TestCreateWork is the regression guard of the create path's cost: it counts
// work, not time, so it cannot flake on a noisy machine.
func TestCreateWork(t *testing.T) {
	d := startDaemon(t, "", "SBX_POOL_SIZE=0")
	defer d.cleanup()
	cycle := func() {
		id := d.create(nil)
		if res := d.exec(id, map[string]any{"argv": []string{"true"}}); res.ExitCode != 0 {
			t.Fatalf("exec true = %+v", res)
		}
		if st, b := d.api("DELETE", "/v1/sandboxes/"+id, nil); st != 204 {
			t.Fatalf("delete = %d %s", st, b)
		}
	}
	// The first builds the shared layers; its memory group, charged with
	// the page cache of the agent's binary, is removed, not kept as a
	// spare. The second leaves spares (groups, its emptied directory's
	// subvolume) for the cycles counted.
	cycle()
	cycle()
	kmsg, err := openKernelLog()
	if err != nil {
		t.Fatal(err)
	}
	defer kmsg.Close()
	// The daemon and its spawner, which forks the sandboxes' init stages.
	const n = 3
	total := traceWork(t, append([]int{d.cmd.Process.Pid}, childrenWith(d.cmd.Process.Pid, "__sbx_spawner")...), n, cycle)
	logged := kernelLogSince(t, kmsg, "overlayfs:")
	total.KernelLog = len(logged)
	per := total.per(n)
	if len(logged) > 0 {
		t.Logf("kernel log during the cycles:\n%s", strings.Join(logged, "\n"))
	}
	t.Logf("per create+exec+delete: %+v (budget %+v)", per, budgetHere())
	if total.GoStarts < n || per.Mounts == 0 {
		t.Fatalf("strace saw %d sandbox starts of %d (%+v): the count is broken, not the daemon", total.GoStarts, n, total)
	}
	checkWork(t, per, budgetHere(), "cycle", "create")
}

// traceWork counts the work of n runs of work in pids and everything they
// start (strace -f).
func traceWork(t *testing.T, pids []int, n int, work func()) createWork {
	t.Helper()
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Fatalf("strace is needed (make test installs it): %v", err)
	}
	out := filepath.Join(t.TempDir(), "strace")
	args := []string{"-f", "-qq", "-yy", "-o", out, "-e", "trace=execve,clone,clone3,fork,vfork,mount,open_tree,move_mount,mount_setattr,mkdir,mkdirat,unshare,prctl,write,writev,sendmsg,ioctl"}
	for _, pid := range pids {
		args = append(args, "-p", fmt.Sprint(pid))
	}
	tr := exec.Command(strace, args...)
	if err := tr.Start(); err != nil {
		t.Fatal(err)
	}
	// strace is attached once it has written the threads' first line or a
	// moment has passed; the runs below are what it must see.
	time.Sleep(500 * time.Millisecond)
	for range n {
		work()
	}
	time.Sleep(200 * time.Millisecond)
	tr.Process.Signal(syscall.SIGINT)
	tr.Wait()
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return countWork(string(b))
}

// per is w for one of n runs, rounded up.
func (w createWork) per(n int) createWork {
	return createWork{
		GoStarts: ceilDiv(w.GoStarts, n), Processes: ceilDiv(w.Processes, n), Execs: ceilDiv(w.Execs, n),
		Mounts: ceilDiv(w.Mounts, n), Mkdirs: ceilDiv(w.Mkdirs, n), Unshares: ceilDiv(w.Unshares, n), NetNamespaces: ceilDiv(w.NetNamespaces, n),
		NoNewPrivs: ceilDiv(w.NoNewPrivs, n), KernelLog: ceilDiv(w.KernelLog, n), Replies: ceilDiv(w.Replies, n),
		Subvolumes: ceilDiv(w.Subvolumes, n),
	}
}

// checkWork fails t for each count of per (work per unit of the path named)
// above its budget.
func checkWork(t *testing.T, per, budget createWork, unit, path string) {
	t.Helper()
	for _, c := range []struct {
		name       string
		got, limit int
	}{
		{"Go runtime starts", per.GoStarts, budget.GoStarts},
		{"processes", per.Processes, budget.Processes},
		{"execs", per.Execs, budget.Execs},
		{"mounts", per.Mounts, budget.Mounts},
		{"mkdirs", per.Mkdirs, budget.Mkdirs},
		{"unshares", per.Unshares, budget.Unshares},
		{"network namespaces", per.NetNamespaces, budget.NetNamespaces},
		{"no_new_privs settings (one per thread stopped)", per.NoNewPrivs, budget.NoNewPrivs},
		{"overlayfs lines in the kernel log", per.KernelLog, budget.KernelLog},
		{"btrfs subvolumes made or deleted", per.Subvolumes, budget.Subvolumes},
	} {
		if c.got > c.limit {
			t.Errorf("%s per %s = %d, budget %d: a change added work to the %s path (or lower costs elsewhere allow raising the budget, with a measurement)", c.name, unit, c.got, c.limit, path)
		}
	}
}

// openKernelLog opens /dev/kmsg positioned after its last record: reads
// then return only what the kernel logs from now on, one record each.
func openKernelLog() (*os.File, error) {
	fd, err := syscall.Open("/dev/kmsg", syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the kernel log: %w", err)
	}
	if _, err := syscall.Seek(fd, 0, 2 /* SEEK_END */); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("seeking the kernel log: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/kmsg"), nil
}

// kernelLogSince returns the records logged since kmsg was opened (or last
// read) whose text holds substr.
func kernelLogSince(t *testing.T, kmsg *os.File, substr string) []string {
	var out []string
	buf := make([]byte, 8192)
	for {
		n, err := syscall.Read(int(kmsg.Fd()), buf)
		if err == syscall.EPIPE { // records overwritten meanwhile: go on from the next
			continue
		}
		if err == syscall.EAGAIN || n <= 0 {
			return out
		}
		if err != nil {
			t.Fatalf("reading the kernel log: %v", err)
		}
		// "prio,seq,usec,flags;text"
		_, text, _ := strings.Cut(strings.TrimRight(string(buf[:n]), "\n"), ";")
		if strings.Contains(text, substr) {
			out = append(out, text)
		}
	}
}

// budgetHere is createBudget for this host's layout.
func budgetHere() createWork {
	b := createBudget
	// A v1 host's memory and cpu groups are taken from the spares the
	// deletes before kept (cgroup.Layout.KeepSpares), not made.
	if l, err := cgroup.Detect(); err == nil && l.V1["memory"] != "" && l.V1["cpu"] != "" {
		b.Mkdirs -= 2
	}
	for _, name := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		if fi, err := os.Lstat("/" + name); err == nil && fi.IsDir() {
			b.Mounts++
			b.Mkdirs += 3 // its upper, work and lower dirs
		}
	}
	return b
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// childrenWith lists the children of ppid whose command line holds arg.
func childrenWith(ppid int, arg string) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		if ppidOf(dir) != ppid {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		if strings.Contains(string(cmd), "\x00"+arg) {
			var pid int
			fmt.Sscan(filepath.Base(dir), &pid)
			out = append(out, pid)
		}
	}
	return out
}

var (
	straceCall = regexp.MustCompile(`^\d+\s+(\w+)\((.*)$`)
	// unixFD is a first argument strace -yy shows as a unix socket.
	unixFD = regexp.MustCompile(`^\d+<UNIX`)
)

// countWork counts createWork's calls in strace -f output. Calls split by
// <unfinished ...> count once, at their start.
func countWork(trace string) createWork {
	var w createWork
	for _, line := range strings.Split(trace, "\n") {
		m := straceCall.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		call, args := m[1], m[2]
		switch call {
		case "execve":
			w.Execs++
			if strings.Contains(args, `"sbx"`) || strings.Contains(args, "/proc/self/fd/") {
				w.GoStarts++
			}
		case "clone", "clone3", "fork", "vfork":
			if !strings.Contains(args, "CLONE_THREAD") {
				w.Processes++
			}
			if strings.Contains(args, "CLONE_NEWNET") {
				w.NetNamespaces++
			}
		case "mount", "open_tree", "move_mount", "mount_setattr":
			w.Mounts++
		case "mkdir", "mkdirat":
			w.Mkdirs++
		case "unshare":
			// "CLONE_NEWNET) = 0", or "CLONE_NEWNET <unfinished ...>" when
			// another thread's call came between.
			flags, _, _ := strings.Cut(args, ")")
			flags, _, _ = strings.Cut(flags, " <")
			if flags == "CLONE_NEWNET" {
				w.NetNamespaces++
			} else {
				w.Unshares++
			}
		case "prctl":
			if strings.HasPrefix(args, "PR_SET_NO_NEW_PRIVS") {
				w.NoNewPrivs++
			}
		case "write", "writev", "sendmsg":
			if unixFD.MatchString(args) {
				w.Replies++
			}
		case "ioctl":
			if strings.Contains(args, "BTRFS_IOC_SUBVOL_CREATE") || strings.Contains(args, "BTRFS_IOC_SNAP_DESTROY") {
				w.Subvolumes++
			}
		}
	}
	return w
}

func TestCountWork(t *testing.T) {
	trace := `100 clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM|CLONE_SETTLS, child_tid=0x1}, 88) = 101
100 clone(child_stack=NULL, flags=CLONE_NEWNS|CLONE_NEWUSER|CLONE_NEWNET|SIGCHLD) = 102
102 execve("/proc/self/fd/9", ["sbx", "__sbx_init", "x"], 0x1 /* 6 vars */) = 0
102 mount("overlay", "root", "overlay", MS_NOSUID|MS_NODEV, "lowerdir=...") = 0
102 open_tree(9, "", OPEN_TREE_CLONE) = 3
102 mkdirat(AT_FDCWD, "upper", 0755 <unfinished ...>
102 <... mkdirat resumed>) = 0
103 execve("/usr/bin/true", ["true"], 0x1 /* 4 vars */) = 0
102 unshare(CLONE_FS) = 0
105 unshare(CLONE_NEWNET <unfinished ...>
105 <... unshare resumed>) = 0
102 prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) = 1
104 prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) = 0
102 write(4<UNIX-STREAM:[81424->81425]>, "HTTP/1.1 200 OK\r\n"..., 194) = 194
102 write(20</proc/9/oom_score_adj>, "500", 3) = 3
102 write(7<pipe:[81430]>, "x", 1) = 1
100 ioctl(5</data/backends/native/disk>, BTRFS_IOC_SUBVOL_CREATE, {fd=0</dev/null<char 1:3>>, name="x"}) = 0
100 ioctl(5</data/backends/native/disk>, BTRFS_IOC_QGROUP_LIMIT, 0x1) = 0
100 ioctl(5</data/backends/native/disk>, BTRFS_IOC_SNAP_DESTROY, {fd=0</dev/null<char 1:3>>, name="x"}) = 0
102 +++ exited with 0 +++`
	got := countWork(trace)
	want := createWork{GoStarts: 1, Processes: 1, Execs: 2, Mounts: 2, Mkdirs: 1, Unshares: 1, NetNamespaces: 2, NoNewPrivs: 1, Replies: 1, Subvolumes: 2}
	if got != want {
		t.Errorf("countWork = %+v, want %+v", got, want)
	}
}

// execBudget is the most work one exec of `true` in a live sandbox may do in
// the sandbox's agent and what it starts, counted like createWork: one
// process (the command) and its exec, and no mkdir (a finished process's
// cgroup is lent to the next) and no mount.
var execBudget = createWork{Processes: 1, Execs: 1, Mkdirs: 0, Mounts: 0, Replies: 2}

// TestExecWork is the regression guard of the exec path's cost inside the
// sandbox: it counts the agent's system calls of a kind, not time.
func TestExecWork(t *testing.T) {
	d := startDaemon(t, "", "SBX_POOL_SIZE=0")
	defer d.cleanup()
	id := d.create(nil)
	run := func() {
		if res := d.exec(id, map[string]any{"argv": []string{"true"}}); res.ExitCode != 0 {
			t.Fatalf("exec true = %+v", res)
		}
	}
	run() // the first makes the group the others reuse
	pids := hostPidsWith(id)
	if len(pids) != 1 {
		t.Fatalf("the sandbox's agent: host pids %v, want one", pids)
	}
	agent, err := strconv.Atoi(pids[0])
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	total := traceWork(t, []int{agent}, n, run)
	per := total.per(n)
	t.Logf("per exec of true: %+v over %d execs (budget %+v); replies in all: %d", per, n, execBudget, total.Replies)
	if total.Execs < n {
		t.Fatalf("strace saw %d execs of %d (%+v): the count is broken, not the agent", total.Execs, n, total)
	}
	checkWork(t, per, execBudget, "exec", "exec")
	// The agent answers an exec in one write, or two when the process
	// outlives the hold of its started event (traced, it may): the event,
	// the stream's end and the body's end leave together. The watch's
	// health check may fall in the window once.
	if total.Replies > execBudget.Replies*n+1 {
		t.Errorf("the agent wrote %d times on the daemon's connections for %d execs of true, want at most %d each: its answers are split again", total.Replies, n, execBudget.Replies)
	}
}

// A sandbox handed out by the warm pool has run the agent's warm-up process
// (sbx-warm-up) through the same path as an exec: its first per-process
// group exists before any exec, while the API lists no process; the exec
// after it is listed alone. A sandbox made on demand (pool off), the
// control, has no such group until its first exec: only the pool asks for
// the warm-up's process.
func TestWarmUp(t *testing.T) {
	groups := func(id string) []string {
		var parents []string
		for _, pat := range []string{"/sys/fs/cgroup/unified/sbx/*/" + id, "/sys/fs/cgroup/freezer/sbx/*/" + id, "/sys/fs/cgroup/sbx/*/" + id + "/work"} {
			m, _ := filepath.Glob(pat)
			parents = append(parents, m...)
		}
		if len(parents) == 0 {
			t.Skip("no per-process cgroups for this sandbox on this host (processes are killed by process group)")
		}
		return parents
	}
	hasFirst := func(id string) bool {
		for _, p := range groups(id) {
			if _, err := os.Stat(filepath.Join(p, "p1")); err == nil {
				return true
			}
		}
		return false
	}
	count := func(d *daemon, id string) int {
		st, b := d.api("GET", "/v1/sandboxes/"+id+"/processes", nil)
		if st != 200 {
			t.Fatalf("list processes = %d %s", st, b)
		}
		var l struct {
			Processes []json.RawMessage `json:"processes"`
		}
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatalf("list processes: %v: %s", err, b)
		}
		return len(l.Processes)
	}
	for _, pool := range []bool{true, false} {
		env := "SBX_POOL_SIZE=0"
		if pool {
			env = "SBX_POOL_SIZE=2"
		}
		d := startDaemon(t, "", env)
		if pool && !waitUntil(time.Minute, func() bool {
			_, b := d.apiQuiet("GET", "/v1/health", nil)
			var h struct{ Pool *struct{ Ready, Size int } }
			return json.Unmarshal(b, &h) == nil && h.Pool != nil && h.Pool.Size > 0 && h.Pool.Ready == h.Pool.Size
		}) {
			t.Fatal("the warm pool did not fill within a minute")
		}
		id := d.create(nil)
		if got := hasFirst(id); got != pool {
			t.Errorf("pool %v: a first process group before any exec: %v, want %v", pool, got, pool)
		}
		if n := count(d, id); n != 0 {
			t.Errorf("pool %v: the API lists %d processes before any exec, want none (the warm-up is the agent's own)", pool, n)
		}
		if res := d.exec(id, map[string]any{"argv": []string{"true"}}); res.ExitCode != 0 {
			t.Fatalf("exec true = %+v", res)
		}
		if n := count(d, id); n != 1 {
			t.Errorf("pool %v: the API lists %d processes after one exec, want it alone", pool, n)
		}
		if !hasFirst(id) {
			t.Errorf("pool %v: no first process group after an exec: the check is broken", pool)
		}
		d.cleanup()
	}
}
