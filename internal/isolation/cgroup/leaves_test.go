package cgroup

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
)

// TestMain lets the test binary serve as a stand-in agent (agentStandIn).
func TestMain(m *testing.M) {
	if os.Getenv(standInEnv) != "" {
		agentStandIn(os.Getenv(standInEnv))
	}
	os.Exit(m.Run())
}

// owner is the uid owning path, or -1.
func owner(t *testing.T, path string) int {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Errorf("stat %s: %v", path, err)
		return -1
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

// TestFakeV2Leaves drives a pure v2 sandbox group over a plain directory: which
// file of the group and of its two leaves gets which value, and who owns it.
func TestFakeV2Leaves(t *testing.T) {
	testutil.RequireRoot(t) // Delegate chowns
	root := t.TempDir()
	l, err := NewFakeV2(root)
	if err != nil {
		t.Fatal(err)
	}
	g, err := l.Create("sbx/inst/box")
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	if !g.Leaves() {
		t.Fatalf("Leaves() = false on a pure v2 layout")
	}
	dir, agent, work := g.V2Dir(), filepath.Join(g.V2Dir(), AgentGroup), filepath.Join(g.V2Dir(), WorkGroup)
	if g.WorkDir() != work {
		t.Errorf("WorkDir() = %q, want %q", g.WorkDir(), work)
	}
	if err := g.MakeLeaves(); err != nil {
		t.Fatalf("MakeLeaves = %v", err)
	}
	const uid = 100000
	if err := g.Delegate(uid, uid); err != nil {
		t.Fatalf("Delegate = %v", err)
	}
	for path, want := range map[string]int{
		// The agent's fork into the work leaf needs their common ancestor's
		// cgroup.procs; nothing else of the group is the sandbox's.
		dir + "/cgroup.procs": uid, dir: 0, dir + "/cgroup.subtree_control": 0, dir + "/cgroup.threads": 0,
		dir + "/pids.max": 0, dir + "/memory.max": 0,
		// It makes each process's group under the work leaf, whose limit
		// stays host root's.
		work: uid, work + "/cgroup.procs": uid, work + "/pids.max": 0, work + "/cgroup.subtree_control": 0,
		agent: 0, agent + "/cgroup.procs": 0,
	} {
		if got := owner(t, path); got != want {
			t.Errorf("owner of %s = %d, want %d", strings.TrimPrefix(path, root), got, want)
		}
	}
	if err := g.SetLimits(Limits{MemoryBytes: 64 << 20, Pids: 96, MilliCPUs: 1500}); err != nil {
		t.Fatalf("SetLimits = %v", err)
	}
	if err := g.SettleAgent(4321, 64); err != nil {
		t.Fatalf("SettleAgent = %v", err)
	}
	for path, want := range map[string]string{
		// The group bounds agent and workload together.
		dir + "/memory.max": "67108864", dir + "/memory.swap.max": "0", dir + "/pids.max": "96",
		dir + "/cpu.max": "150000 100000",
		// Its children get the pids controller, once the agent left it.
		dir + "/cgroup.subtree_control": "+pids", dir + "/cgroup.procs": "",
		agent + "/cgroup.procs": "4321", agent + "/pids.max": "max", agent + "/memory.max": "max",
		work + "/pids.max": "64", work + "/memory.max": "max", work + "/cpu.max": "max 100000",
	} {
		if got := readFake(path); got != want {
			t.Errorf("%s = %q, want %q", strings.TrimPrefix(path, root), got, want)
		}
	}
	if err := g.SetWorkPids(80); err != nil || readFake(work+"/pids.max") != "80" {
		t.Errorf("SetWorkPids(80) = %v; work/pids.max = %q, want 80", err, readFake(work+"/pids.max"))
	}
	if p, f := g.OOMFile(); p != dir+"/memory.events" || f != "v2" {
		t.Errorf("OOMFile() = %q, %q; want the group's memory.events", p, f)
	}
	os.WriteFile(dir+"/memory.current", []byte("8192\n"), 0o644)
	os.WriteFile(dir+"/pids.current", []byte("7\n"), 0o644)
	os.WriteFile(work+"/memory.current", []byte("4096\n"), 0o644)
	if st, err := g.Stats(); err != nil || st.MemoryBytes != 8192 || st.Pids != 7 {
		t.Errorf("Stats() = %+v, %v; want the group's own memory.current and pids.current", st, err)
	}
	os.WriteFile(agent+"/cgroup.procs", nil, 0o644)
	if err := g.Kill(); err != nil || readFake(dir+"/cgroup.kill") != "1" {
		t.Errorf("Kill = %v; the group's cgroup.kill = %q, want 1: it kills both leaves", err, readFake(dir+"/cgroup.kill"))
	}
	if err := g.Remove(t.Context()); err != nil {
		t.Fatalf("Remove = %v", err)
	}
	if exists(dir) {
		t.Errorf("the group remains after Remove")
	}
}

// TestFakeV2MissingControllers: a limit whose controller the host lacks is
// passed over, as on v1 (the driver reports the cgroup layer missing), and
// the work leaf gets no pids controller to enable.
func TestFakeV2MissingControllers(t *testing.T) {
	l, err := NewFakeV2(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l.V2Controllers = []string{"memory"}
	g, err := l.Create("sbx/inst/box")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.MakeLeaves(); err != nil {
		t.Fatal(err)
	}
	if err := g.SetLimits(Limits{MemoryBytes: 64 << 20, Pids: 96, MilliCPUs: 1500}); err != nil {
		t.Fatalf("SetLimits = %v", err)
	}
	if err := g.SettleAgent(4321, 64); err != nil {
		t.Fatalf("SettleAgent = %v", err)
	}
	dir := g.V2Dir()
	for file, want := range map[string]string{
		"memory.max": "67108864", "pids.max": "max", "cpu.max": "max 100000", "cgroup.subtree_control": "",
		"agent/cgroup.procs": "4321", "work/pids.max": "max",
	} {
		if got := readFake(filepath.Join(dir, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
}

// TestNoLeavesOutsidePureV2: with v1 controllers beside the unified
// hierarchy the pids split is v1's, and the v2 group has no leaves.
func TestNoLeavesOutsidePureV2(t *testing.T) {
	l := &Layout{V1: map[string]string{"pids": "/sys/fs/cgroup/pids"}, V2: "/sys/fs/cgroup/unified"}
	g, err := l.Group("sbx/inst/box")
	if err != nil {
		t.Fatal(err)
	}
	if g.Leaves() {
		t.Errorf("Leaves() = true on a hybrid layout")
	}
	if g.WorkDir() != g.V2Dir() {
		t.Errorf("WorkDir() = %q, want the group's own %q", g.WorkDir(), g.V2Dir())
	}
	if err := g.MakeLeaves(); err == nil {
		t.Errorf("MakeLeaves on a hybrid layout succeeded")
	}
	if err := g.SettleAgent(1, 1); err == nil {
		t.Errorf("SettleAgent on a hybrid layout succeeded")
	}
}

// standInEnv names, in a stand-in agent's environment, the work leaf it forks
// into.
const standInEnv = "SBX_CGROUP_TEST_WORK_LEAF"

// agentStandIn is what a sandbox's agent does with its groups: once told (a
// line on stdin) it makes a group under the work leaf and forks a process
// into it at birth (CLONE_INTO_CGROUP), which reads /proc/self/cgroup as its
// first act; it prints what that process printed and, after it, its own
// /proc/self/cgroup. Then it forks a sleep there too, and waits to be killed.
func agentStandIn(work string) {
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		fail(err)
	}
	p := filepath.Join(work, "p1")
	if err := os.Mkdir(p, 0o755); err != nil {
		fail(err)
	}
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		fail(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		fail(err)
	}
	pid, err := syscall.ForkExec("/bin/cat", []string{"cat", "/proc/self/cgroup"}, &syscall.ProcAttr{
		Files: []uintptr{0, w.Fd(), 2},
		Sys:   &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd},
	})
	if err != nil {
		fail(err)
	}
	w.Close()
	child, _ := io.ReadAll(r)
	var ws syscall.WaitStatus
	syscall.Wait4(pid, &ws, 0, nil)
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		fail(err)
	}
	fmt.Printf("child %s\nself %s\n", unified(string(child)), unified(string(self)))
	if _, err := syscall.ForkExec("/bin/sleep", []string{"sleep", "1000"}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd},
	}); err != nil {
		fail(err)
	}
	fmt.Println("sleeping")
	in.ReadString('\n') // until killed
	os.Exit(0)
}

// unified is the unified hierarchy's path in a /proc/<pid>/cgroup listing.
func unified(listing string) string {
	for _, line := range strings.Split(listing, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return "(none)"
}

// TestHostLeaves runs the pure v2 mechanism on this host's unified hierarchy,
// whatever else is mounted: a stand-in agent born in the group itself with a
// new cgroup namespace, as the native driver's spawner starts the init stage;
// SettleAgent moves it into the agent leaf; the process it then forks into a
// group under the work leaf is there from birth, while it stays in the agent
// leaf; kill and remove take both leaves. (Whether pids.max is enforced
// depends on the host having the pids controller in v2.)
func TestHostLeaves(t *testing.T) {
	testutil.RequireRoot(t)
	host, err := Detect()
	if err != nil {
		t.Fatal(err)
	}
	if host.V2 == "" {
		t.Skip("requires a unified (v2) cgroup hierarchy")
	}
	l := &Layout{V1: map[string]string{}, V2: host.V2, V2Controllers: host.V2Controllers} // pure v2, forced
	parent := fmt.Sprintf("sbx/test-leaves%d", time.Now().UnixNano()%1e9)
	t.Cleanup(func() { os.Remove(filepath.Join(host.V2, parent)) })
	g, err := l.Create(parent + "/g")
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	t.Cleanup(func() { g.Kill(); g.Remove(t.Context()) })
	if !exists(filepath.Join(g.V2Dir(), "cgroup.kill")) {
		t.Skip("requires cgroup.kill (Linux 5.14)")
	}
	if err := g.MakeLeaves(); err != nil {
		t.Fatalf("MakeLeaves = %v", err)
	}
	if err := g.SetLimits(Limits{MemoryBytes: 64 << 20, Pids: 96, MilliCPUs: 500}); err != nil {
		t.Fatalf("SetLimits = %v", err)
	}

	fd, err := syscall.Open(g.V2Dir(), syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdinW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := syscall.ForkExec(exe, []string{exe}, &syscall.ProcAttr{
		Env:   append(os.Environ(), standInEnv+"="+g.WorkDir()),
		Files: []uintptr{stdinR.Fd(), outW.Fd(), 2},
		Sys:   &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Cloneflags: syscall.CLONE_NEWCGROUP},
	})
	stdinR.Close()
	outW.Close()
	if err != nil {
		t.Fatalf("starting the stand-in agent: %v", err)
	}
	waited := make(chan syscall.WaitStatus, 1)
	go func() {
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
		waited <- ws
	}()
	hostView := func() string {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		return unified(string(b))
	}
	rel := strings.TrimPrefix(g.V2Dir(), host.V2)
	if got := hostView(); got != rel {
		t.Errorf("the stand-in agent is born in %q, want the group %q", got, rel)
	}
	// A pid that is not there fails the settling (and so the start).
	if err := g.SettleAgent(1<<30, 64); err == nil {
		t.Errorf("SettleAgent of a pid that does not exist succeeded")
	}
	if err := g.SettleAgent(pid, 64); err != nil {
		t.Fatalf("SettleAgent = %v", err)
	}
	if got, want := hostView(), rel+"/"+AgentGroup; got != want {
		t.Errorf("after SettleAgent the stand-in agent is in %q, want %q", got, want)
	}
	if l.Has("pids") {
		if got := readFake(filepath.Join(g.WorkDir(), "pids.max")); got != "64" {
			t.Errorf("work leaf pids.max = %q, want 64", got)
		}
	} else {
		t.Logf("this host's unified hierarchy has no pids controller (%v): pids.max is not set or enforced here", host.V2Controllers)
	}
	stdinW.Write([]byte("go\n"))
	out := bufio.NewReader(outR)
	var lines []string
	for range 3 {
		line, err := out.ReadString('\n')
		lines = append(lines, line)
		if err != nil {
			t.Fatalf("stand-in agent printed %q: %v", lines, err)
		}
	}
	// Its cgroup namespace is rooted at the group: it sees both leaves.
	if got, want := strings.Join(lines, ""), "child /work/p1\nself /agent\nsleeping\n"; got != want {
		t.Errorf("stand-in agent printed %q, want %q", got, want)
	}
	if pids, err := g.Procs(); err != nil || len(pids) != 2 {
		t.Errorf("Procs() = %v, %v; want the stand-in agent and its sleep", pids, err)
	}
	if err := g.Kill(); err != nil {
		t.Errorf("Kill = %v", err)
	}
	if err := g.WaitEmpty(t.Context()); err != nil {
		t.Errorf("WaitEmpty = %v", err)
	}
	if ws := <-waited; !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("stand-in agent ended %v, want killed by the group's kill", ws)
	}
	if err := g.Remove(t.Context()); err != nil {
		t.Errorf("Remove = %v", err)
	}
	for _, d := range []string{filepath.Join(g.WorkDir(), "p1"), g.WorkDir(), filepath.Join(g.V2Dir(), AgentGroup), g.V2Dir()} {
		if exists(d) {
			t.Errorf("%s remains after Remove", d)
		}
	}
}
