package native

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/native/forker"
	"sbx.dev/sbx/internal/isolation/nsinit"
	"sbx.dev/sbx/internal/isolation/quota"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

// TestMain lets the test binary serve as the init stage: the jail tests start
// it in place of sbx and have it exec a shell, or go on as a stand-in agent.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == boot.InitArg {
		fakeAgent(nsinit.Main()) // returns only when the plan has no program
	}
	if len(os.Args) > 1 && os.Args[1] == boot.SpawnerArg {
		SpawnerMain() // the driver's spawner, run from this test binary
	}
	code := m.Run()
	testutil.RemoveBuild()
	os.Exit(code)
}

func requireJail(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireOverlay(t)
	testutil.RequireNamespaces(t)
	for _, c := range []string{"memory", "pids", "cpu"} {
		testutil.RequireCgroup(t, c)
	}
}

// openTest opens a driver on a fresh data dir under a unique instance, with a
// leak audit checked at cleanup; argv replaces the agent.
func openTest(t testing.TB, argv ...string) (*Driver, *testutil.LeakAudit) {
	t.Helper()
	return openTestWith(t, nil, argv...)
}

// openTestWith is openTest with edit applied to the driver's options first.
func openTestWith(t testing.TB, edit func(*backend.Options), argv ...string) (*Driver, *testutil.LeakAudit) {
	t.Helper()
	requireJail(t)
	inst := fmt.Sprintf("t%d", time.Now().UnixNano()%1e9)
	opts := backend.Options{DataDir: t.TempDir(), Instance: inst, Exe: os.Args[0], Log: testutil.Logger(t)}
	if edit != nil {
		edit(&opts)
	}
	d, err := open(t.Context(), opts)
	if err != nil {
		t.Fatalf("open(%+v) = %v", opts, err)
	}
	d.testArgv = argv
	audit := &testutil.LeakAudit{CgroupPrefix: "sbx/" + inst, DataDir: opts.DataDir, Keep: []string{"bin", "layers"}}
	audit.Snapshot(t)
	t.Cleanup(func() {
		audit.Check(t)
		d.layout.DropSpares()               // as Close does
		for _, h := range d.hierarchies() { // the instance group is the test's, not a sandbox's
			os.Remove(filepath.Join(h, "sbx", inst))
		}
		if err := d.pool.Close(); err != nil { // the pool, too: its mount would pin the temp dir
			t.Errorf("closing the disk pool: %v", err)
		}
	})
	return d, audit
}

func spec(id sandbox.ID) sandbox.Spec {
	return sandbox.Spec{ID: id, Template: sandbox.TemplateHost, MemoryBytes: 256 * sandbox.MiB,
		MilliCPUs: 500, Pids: 64, Network: sandbox.NetworkNone}
}

// jailScript prints key=value lines about the jail as seen from inside.
const jailScript = `
exec 2>/dev/null
echo pid=$$
echo procs=$(ls /proc | grep -c '^[0-9]*$')
echo hostname=$(cat /proc/sys/kernel/hostname)
echo etc_hostname=$(cat /etc/hostname)
echo cwd=$(pwd)
echo uid=$(id -u)
echo hello > /workspace/hello && echo workspace=rw
echo x > /usr/sbx-jail-marker && echo usr=rw
grep -q '[$]' /etc/shadow && echo shadow=hashes || echo shadow=locked
test -e /etc/passwd && echo passwd=present
echo 1 > /proc/sys/kernel/ns_last_pid && echo procsys=rw || echo procsys=ro
echo sys=$(ls -A /sys | wc -l)
echo keys=$(wc -c < /proc/keys)
echo masked=$(cat /proc/kpageflags /proc/kpagecount /proc/slabinfo /proc/vmallocinfo /proc/pagetypeinfo /proc/kallsyms /proc/timer_list 2>&1 | wc -c)
echo acpi=$(ls -A /proc/acpi 2>&1 | wc -l)
echo acpi_ro=$(touch /proc/acpi/x 2>/dev/null && echo rw || echo ro)
echo ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ,)
python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));s.listen();socket.create_connection(s.getsockname());print('lo=up')" || echo lo=down
grep CapBnd /proc/self/status | tr -d '\t' | sed 's/:/=/'
grep CapEff /proc/self/status | tr -d '\t' | sed 's/:/=/'
grep NoNewPrivs /proc/self/status | tr -d '\t' | sed 's/:/=/'
echo fds=$(ls /proc/self/fd | tr '\n' ,)
echo tmp=$(stat -f -c %T /tmp)
echo dev=$(ls /dev | tr '\n' ,)
echo x > /dev/null && echo devnull=ok
mount -t tmpfs x /mnt && echo mount=allowed || echo mount=denied
echo cgroup=$(cat /proc/self/cgroup | tr '\n' ' ')
unshare -U -r true && echo nested_userns=allowed || echo nested_userns=denied
chroot / true && echo chroot=allowed || echo chroot=denied
mknod /tmp/sda b 8 0 && echo mknod=allowed || echo mknod=denied
echo max_userns=$(cat /proc/sys/user/max_user_namespaces)
echo uid_map=$(cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //')
echo nobody=$(setpriv --reuid=65534 --regid=65534 --clear-groups id -u)
echo usr_owner=$(stat -c %u:%g /usr/bin/env)
echo x > /usr/local/sbx-owned && chown 1000:1000 /usr/local/sbx-owned && echo chown=ok
echo nofile=$(ulimit -n)
echo tw_buckets=$(cat /proc/sys/net/ipv4/tcp_max_tw_buckets)
(i=0; while [ $i -lt 120 ]; do sleep 60 & i=$((i+1)); done); echo bomb=done
sleep 0.2
`

func TestJail(t *testing.T) {
	hostEhash, ehashErr := os.ReadFile("/proc/sys/net/ipv4/tcp_child_ehash_entries")
	d, _ := openTest(t, "/bin/sh", "-c", "exec > /workspace/out\n"+jailScript)
	id := sandbox.NewID()
	sp := spec(id)
	inst, err := d.Start(t.Context(), sp)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	defer func() {
		if err := d.Destroy(context.Background(), id); err != nil {
			t.Errorf("Destroy = %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ex, err := d.Wait(ctx, id)
	if err != nil {
		t.Fatalf("Wait = %v", err)
	}
	if ex.Code != 0 {
		t.Errorf("Wait = %+v, want code 0", ex)
	}
	// Host-side checks, before Destroy removes the groups.
	b, _ := d.boxes.Get(id)
	g := b.group
	mem, _ := os.ReadFile(filepath.Join(g.Dir("memory"), "memory.limit_in_bytes"))
	if strings.TrimSpace(string(mem)) != strconv.FormatInt(sp.MemoryBytes, 10) {
		t.Errorf("memory.limit_in_bytes = %s, want %d", mem, sp.MemoryBytes)
	}
	pmax, _ := os.ReadFile(filepath.Join(g.Dir("pids"), "pids.max"))
	if strings.TrimSpace(string(pmax)) != strconv.Itoa(64+agentPids) {
		t.Errorf("pids.max = %s, want 64 and the agent's room", pmax)
	}
	pev, _ := os.ReadFile(filepath.Join(g.Dir("pids"), "pids.events"))
	if strings.TrimSpace(string(pev)) == "max 0" {
		t.Errorf("pids.events = %q: the bomb never hit pids.max", pev)
	}
	quota, _ := os.ReadFile(filepath.Join(g.Dir("cpu"), "cpu.cfs_quota_us"))
	if strings.TrimSpace(string(quota)) != "50000" {
		t.Errorf("cpu.cfs_quota_us = %s, want 50000", quota)
	}
	if _, err := os.Stat("/usr/sbx-jail-marker"); err == nil {
		t.Errorf("/usr/sbx-jail-marker exists on the host: a /usr write escaped the overlay")
		os.Remove("/usr/sbx-jail-marker")
	}
	if _, err := os.Stat(filepath.Join(d.dir(id), "upper/usr/sbx-jail-marker")); err != nil {
		t.Errorf("the /usr write is not in the sandbox's upper layer: %v", err)
	}
	// On the host, what the sandbox wrote belongs to its own id range.
	for path, uid := range map[string]uint64{"upper/usr/sbx-jail-marker": b.uid, "workspace/out": b.uid,
		"upper/usr/local/sbx-owned": b.uid + 1000} {
		fi, err := os.Lstat(filepath.Join(d.dir(id), path))
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if st := fi.Sys().(*syscall.Stat_t); uint64(st.Uid) != uid || uint64(st.Gid) != uid {
			t.Errorf("%s is owned by %d:%d on the host, want %d:%d", path, st.Uid, st.Gid, uid, uid)
		}
	}
	if b.uid < autoStart || b.uid%UIDSlot != 0 {
		t.Errorf("the sandbox's root is host uid %d, want a slot of the automatic range", b.uid)
	}
	out, err := os.ReadFile(filepath.Join(d.dir(id), "workspace/out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("inside:\n%s", out)
	got := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			got[k] = v
		}
	}
	mask, _ := nsinit.CapMask(nsinit.DefaultCaps)
	want := map[string]string{
		"pid": "1", "hostname": string(id), "etc_hostname": string(id), "cwd": "/workspace", "uid": "0",
		"workspace": "rw", "usr": "rw", "shadow": "locked", "passwd": "present", "procsys": "ro",
		"sys": "0", "keys": "0", "masked": "0", "acpi": "0", "acpi_ro": "ro", "ifaces": "lo,", "lo": "up", "CapBnd": fmt.Sprintf("%016x", mask),
		"CapEff": fmt.Sprintf("%016x", mask), "NoNewPrivs": "1", "tmp": "tmpfs",
		"devnull": "ok", "mount": "denied", "bomb": "done",
		"nested_userns": "denied", "chroot": "denied", "mknod": "denied", "max_userns": "0",
		"uid_map": fmt.Sprintf("0 %d 65536", b.uid), "nobody": "65534", "usr_owner": "0:0", "chown": "ok",
		"dev": "fd,full,null,ptmx,pts,random,shm,stderr,stdin,stdout,tty,urandom,zero,",
		// 0-2, ls's own directory, the declared listening socket, cgroup directory, OOM and pids files.
		"fds":    "0,1,10,2,3,5,6,7,", // ls sorts by name
		"nofile": "20000",
	}
	if lim := hardNoFile(t); lim < 1<<20 {
		want["nofile"] = strconv.FormatUint(lim, 10)
	}
	if ehashErr == nil {
		// The sandbox's TCP connections have a hash of their own, sized in
		// the spawner's network namespace; the host's setting is untouched,
		// and its own limit is another.
		want["tw_buckets"] = strconv.Itoa(forker.ChildEhashEntries / 2)
		if after, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_child_ehash_entries"); string(after) != string(hostEhash) {
			t.Errorf("the host's tcp_child_ehash_entries went from %q to %q", hostEhash, after)
		}
		if host, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_max_tw_buckets"); strings.TrimSpace(string(host)) == want["tw_buckets"] {
			t.Errorf("the host's tcp_max_tw_buckets is %s too: the check tells nothing", host)
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("inside the jail %s = %q, want %q", k, got[k], v)
		}
	}
	if n, _ := strconv.Atoi(got["procs"]); n < 1 || n > 8 {
		t.Errorf("inside the jail /proc lists %s processes, want only the sandbox's few", got["procs"])
	}
	if strings.Contains(got["cgroup"], "sbx/") || strings.Contains(got["cgroup"], "process_api") {
		t.Errorf("inside the jail /proc/self/cgroup = %q: host cgroup paths show", got["cgroup"])
	}
	if inst.Applied.Backend != "native" || inst.Applied.Cgroup != "hybrid" && inst.Applied.Cgroup != "v1" && inst.Applied.Cgroup != "v2" {
		t.Errorf("Applied = %+v", inst.Applied)
	}
}

func hardNoFile(t *testing.T) uint64 {
	b, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Max open files") {
			f := strings.Fields(l)
			n, _ := strconv.ParseUint(f[4], 10, 64)
			return n
		}
	}
	return 0
}

func TestStopKillsSetsidGrandchild(t *testing.T) {
	d, _ := openTest(t, "/bin/sh", "-c", "setsid sh -c 'trap \"\" TERM HUP; sleep 1000' & sleep 1000")
	id := sandbox.NewID()
	if _, err := d.Start(t.Context(), spec(id)); err != nil {
		t.Fatalf("Start = %v", err)
	}
	defer d.Destroy(context.Background(), id)
	if err := d.Stop(t.Context(), id, 50*time.Millisecond); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	b, _ := d.boxes.Get(id)
	pids, err := b.group.Procs()
	if err != nil || len(pids) != 0 {
		t.Errorf("after Stop the cgroup holds %v (%v), want none", pids, err)
	}
	ex, err := d.Wait(t.Context(), id)
	if err != nil || ex.Signal != 9 {
		t.Errorf("Wait = %+v, %v; want killed by signal 9", ex, err)
	}
}

func TestDestroyIdempotent(t *testing.T) {
	d, _ := openTest(t, "/bin/sleep", "1000")
	id := sandbox.NewID()
	if _, err := d.Start(t.Context(), spec(id)); err != nil {
		t.Fatalf("Start = %v", err)
	}
	for i := range 2 {
		if err := d.Destroy(t.Context(), id); err != nil {
			t.Errorf("Destroy #%d = %v", i+1, err)
		}
	}
	if err := d.Destroy(t.Context(), sandbox.NewID()); err != nil {
		t.Errorf("Destroy(unknown id) = %v, want nil", err)
	}
}

// TestCloseRemovesInstanceGroups checks Close keeps the instance's groups while
// a sandbox runs in them, and removes them once none does.
func TestCloseRemovesInstanceGroups(t *testing.T) {
	d, _ := openTest(t, "/bin/sleep", "1000")
	id := sandbox.NewID()
	if _, err := d.Start(t.Context(), spec(id)); err != nil {
		t.Fatalf("Start = %v", err)
	}
	if err := d.Close(t.Context()); err != nil {
		t.Fatalf("Close with a running sandbox = %v", err)
	}
	for _, h := range d.hierarchies() {
		if d.layout.NoFreezer && h == d.layout.V1["freezer"] || d.layout.NoCPUAcct && h == d.layout.V1["cpuacct"] {
			continue // no group is made there (cgroup.Layout.NoFreezer, NoCPUAcct)
		}
		if _, err := os.Stat(filepath.Join(h, d.cgroupPath(id))); err != nil {
			t.Errorf("Close removed a running sandbox's group in %s: %v", h, err)
		}
	}
	if err := d.Destroy(t.Context(), id); err != nil {
		t.Fatalf("Destroy = %v", err)
	}
	if err := d.Close(t.Context()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	for _, h := range d.hierarchies() {
		if _, err := os.Stat(filepath.Join(h, "sbx", d.opts.Instance)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("instance group in %s after Close: %v", h, err)
		}
	}
}

func TestFailedStartLeavesNothing(t *testing.T) {
	d, _ := openTest(t, "/nonexistent/program")
	d.unsupported = map[string]string{sandbox.LayerSeccomp: "disabled by the test"}
	for _, tc := range []struct {
		name string
		edit func(*sandbox.Spec)
		want error
	}{
		{"bad template", func(s *sandbox.Spec) { s.Template = "ubuntu" }, sandbox.ErrInvalid},
		{"missing layer required", func(s *sandbox.Spec) { s.RequireLayers = []string{sandbox.LayerSeccomp} }, sandbox.ErrIsolation},
		{"exec fails in init", func(*sandbox.Spec) {}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := sandbox.NewID()
			sp := spec(id)
			tc.edit(&sp)
			_, err := d.Start(t.Context(), sp)
			if err == nil {
				t.Fatal("Start succeeded, want an error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("Start = %v, want %v", err, tc.want)
			}
			t.Logf("Start = %v", err)
			if tc.name == "missing layer required" && !strings.Contains(err.Error(), "seccomp") {
				t.Errorf("Start = %v, want the layer named", err)
			}
			if err := d.Destroy(t.Context(), id); err != nil {
				t.Errorf("Destroy after a failed start = %v", err)
			}
		})
	}
}

func TestCancelMidStart(t *testing.T) {
	d, _ := openTest(t, "/bin/sleep", "1000")
	for _, after := range []time.Duration{0, 200 * time.Microsecond, time.Millisecond, 3 * time.Millisecond} {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(after, cancel)
		id := sandbox.NewID()
		_, err := d.Start(ctx, spec(id))
		cancel()
		if err == nil {
			d.Destroy(t.Context(), id) // finished before the cancel: fine
		}
	}
}

// netOwner returns the inodes of the user namespace that owns pid's
// network namespace and of pid's own user namespace.
func netOwner(t *testing.T, pid int) (owner, own uint64) {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		t.Fatalf("NS_GET_USERNS: %v", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	var us unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/user", &us); err != nil {
		t.Fatal(err)
	}
	return st.Ino, us.Ino
}

// TestPooledNet: a sandbox of the default capability profile starts in a
// network namespace the spawner made ahead, owned by the spawner's user
// namespace, not the sandbox's: its loopback is up and its root binds port
// 80 all the same. A profile keeping NET_RAW gets a namespace of its own
// user namespace (the control).
func TestPooledNet(t *testing.T) {
	const script = `exec > /workspace/out 2>&1
python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 80)); print('bind80=ok')" || echo bind80=fail
python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); socket.create_connection(s.getsockname()); print('lo=up')" || echo lo=down
echo done=1
sleep 30`
	d, _ := openTest(t, "/bin/sh", "-c", script)
	run := func(sp sandbox.Spec) (pooled bool, out map[string]string) {
		t.Helper()
		if _, err := d.Start(t.Context(), sp); err != nil {
			t.Fatalf("Start = %v", err)
		}
		defer func() {
			if err := d.Destroy(context.Background(), sp.ID); err != nil {
				t.Errorf("Destroy = %v", err)
			}
		}()
		b, _ := d.boxes.Get(sp.ID)
		owner, own := netOwner(t, b.proc.Pid)
		var host unix.Stat_t
		if err := unix.Stat("/proc/self/ns/user", &host); err != nil {
			t.Fatal(err)
		}
		switch owner {
		case host.Ino:
			pooled = true
		case own:
		default:
			t.Fatalf("the sandbox's network namespace belongs to user namespace %d: neither the host's (%d) nor its own (%d)", owner, host.Ino, own)
		}
		out = map[string]string{}
		for deadline := time.Now().Add(20 * time.Second); out["done"] == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			b, _ := os.ReadFile(filepath.Join(d.dir(sp.ID), "workspace/out"))
			for _, l := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(l, "="); ok {
					out[k] = v
				}
			}
		}
		return pooled, out
	}
	// The pool fills as the spawner starts; a start that finds it empty
	// makes its namespace at the clone, as before.
	var out map[string]string
	pooled := false
	for i := 0; i < 10 && !pooled; i++ {
		pooled, out = run(spec(sandbox.NewID()))
	}
	if !pooled {
		t.Fatal("10 starts, none in a network namespace made ahead")
	}
	for k, v := range map[string]string{"bind80": "ok", "lo": "up"} {
		if out[k] != v {
			t.Errorf("in a pooled namespace %s = %q, want %q (all: %v)", k, out[k], v, out)
		}
	}
	sp := spec(sandbox.NewID())
	sp.CapProfile = "docker"
	if pooled, out := run(sp); pooled {
		t.Errorf("a sandbox keeping NET_RAW started in a namespace it has no capability over")
	} else if out["bind80"] != "ok" || out["lo"] != "up" {
		t.Errorf("in a namespace of its own: %v, want bind80=ok lo=up", out)
	}
}

// TestSpareDirs: a destroyed sandbox's directory is emptied and kept as a
// spare subvolume, the next start takes it, and a driver opened on the data
// dir again (a restarted daemon) removes what an earlier one kept.
func TestSpareDirs(t *testing.T) {
	d, _ := openTest(t, "/bin/sleep", "1000")
	pooled := func() []string { return testutil.DirNames(t, d.pool.Dir()) }
	a := sandbox.NewID()
	if _, err := d.Start(t.Context(), spec(a)); err != nil {
		t.Fatalf("Start = %v", err)
	}
	if err := d.Destroy(t.Context(), a); err != nil {
		t.Fatalf("Destroy = %v", err)
	}
	if got := pooled(); !slices.Equal(got, []string{quota.SparePrefix + "0"}) {
		t.Fatalf("after a destroy the pool holds %v, want one spare", got)
	}
	b := sandbox.NewID()
	if _, err := d.Start(t.Context(), spec(b)); err != nil {
		t.Fatalf("Start = %v", err)
	}
	if got := pooled(); !slices.Equal(got, []string{string(b)}) {
		t.Errorf("after a start the pool holds %v, want only %s: the spare not taken", got, b)
	}
	if err := d.Destroy(t.Context(), b); err != nil {
		t.Fatalf("Destroy = %v", err)
	}
	if got := pooled(); len(got) != 1 || !quota.IsSpare(got[0]) {
		t.Fatalf("after the second destroy the pool holds %v, want one spare (the control)", got)
	}
	d2, err := open(t.Context(), d.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d2.layout.DropSpares) // d2 is not closed
	if got := pooled(); len(got) != 0 {
		t.Errorf("a driver opened again left %v", got)
	}
}

func TestRecoverAfterRestart(t *testing.T) {
	d, _ := openTest(t, "/bin/sleep", "1000")
	id := sandbox.NewID()
	inst, err := d.Start(t.Context(), spec(id))
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	d2, err := open(t.Context(), d.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d2.layout.DropSpares) // d2 is not closed
	got, err := d2.Recover(t.Context(), id, inst.Saved)
	if err != nil {
		t.Fatalf("Recover = %v", err)
	}
	conn, err := got.Dial(t.Context())
	if err != nil {
		t.Fatalf("Dial after Recover = %v", err)
	}
	conn.Close()
	if held, _ := d2.ListHeld(t.Context()); len(held) != 1 || held[0] != id {
		t.Errorf("ListHeld = %v, want [%s]", held, id)
	}
	if _, err := d2.Stats(t.Context(), id); err != nil {
		t.Errorf("Stats = %v", err)
	}
	if err := d2.Stop(t.Context(), id, 0); err != nil {
		t.Errorf("Stop = %v", err)
	}
	if _, err := d2.Wait(t.Context(), id); err != nil {
		t.Errorf("Wait after Recover = %v", err)
	}
	if err := d2.Destroy(t.Context(), id); err != nil {
		t.Errorf("Destroy = %v", err)
	}
	b, _ := d.boxes.Get(id)
	<-b.proc.Done() // the first driver's reaper
	if err := d.Destroy(t.Context(), id); err != nil {
		t.Errorf("Destroy by the first driver = %v", err)
	}
	// A pid that is gone is not recovered.
	if _, err := d2.Recover(t.Context(), id, inst.Saved); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Recover of a destroyed sandbox = %v, want ErrNotFound", err)
	}
}

func TestProbe(t *testing.T) {
	d, _ := openTest(t)
	rep, err := d.Probe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Available {
		t.Errorf("Probe: not available: %v", rep.Reasons())
	}
	if rep.Level != "native" {
		t.Errorf("Probe level = %q", rep.Level)
	}
}

// Stats reads the sandbox's cgroup and its disk quota group: bytes the
// workload writes show as DiskBytes.
func TestStatsDisk(t *testing.T) {
	d, _ := openTest(t, "/bin/sh", "-c", "head -c 3145728 /dev/zero > /workspace/f && sync && sleep 1000")
	id := sandbox.NewID()
	sp := spec(id)
	sp.DiskBytes = 64 * sandbox.MiB
	if _, err := d.Start(t.Context(), sp); err != nil {
		t.Fatalf("Start = %v", err)
	}
	defer d.Destroy(context.Background(), id)
	var st backend.Stats
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if st, err = d.Stats(t.Context(), id); err == nil && st.DiskBytes >= 3<<20 {
			break
		}
	}
	if err != nil || st.DiskBytes < 3<<20 || st.DiskBytes > 8<<20 || st.Pids < 1 {
		t.Errorf("Stats = %+v, %v; want ~3 MiB of disk and a process", st, err)
	}
}
