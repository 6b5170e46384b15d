package native

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/backendtest"
	"sbx.dev/sbx/internal/isolation/cgroup"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

// TestLimitsLeaves: on a pure v2 host the sandbox's group holds the agent's
// room above the workload's pids limit, as v1's pids group does; the work
// leaf gets the limit itself (cgroup.Group.SettleAgent).
func TestLimitsLeaves(t *testing.T) {
	l, err := cgroup.NewFakeV2(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	g, err := l.Group("sbx/inst/box")
	if err != nil {
		t.Fatal(err)
	}
	d := &Driver{layout: l}
	sp := sandbox.Spec{MemoryBytes: 256 * sandbox.MiB, Pids: 64, MilliCPUs: 500}
	want := cgroup.Limits{MemoryBytes: 256 * sandbox.MiB, Pids: 64 + agentPids, MilliCPUs: 500}
	if got := d.limits(g, sp); got != want {
		t.Errorf("limits(pure v2, %+v) = %+v, want %+v", sp, got, want)
	}
}

// unifiedPaths returns the unified hierarchy's path in each /proc/<pid>/cgroup
// listing of out, in order.
func unifiedPaths(out string) []string {
	var paths []string
	for _, line := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			paths = append(paths, p)
		}
	}
	return paths
}

// procsUnder lists the pids in the cgroup directory dir and its descendants.
func procsUnder(t *testing.T, dir string) []string {
	t.Helper()
	var pids []string
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			pids = append(pids, strings.Fields(string(b))...)
		}
		return nil
	})
	return pids
}

// TestPureV2Leaves runs a sandbox, with the real agent, with the driver's
// cgroups forced into pure v2 mode on this host's unified hierarchy (on a
// hybrid host that is v1's controllers hidden: its v2 groups then have no
// memory, pids or cpu limit, and the cgroup layer is reported missing). The
// agent lives in the agent leaf, with a cgroup namespace rooted at the
// sandbox's group; each process it starts is born in a group under the work
// leaf; an exec's tree kill takes the work processes only; Destroy removes
// both leaves. That the work leaf's pids.max holds a fork bomb while the
// agent forks on needs a host with the pids controller in v2.
func TestPureV2Leaves(t *testing.T) {
	requireJail(t)
	exe := testutil.BuildSBX(t)
	inst := fmt.Sprintf("v%d", time.Now().UnixNano()%1e9)
	opts := backend.Options{DataDir: t.TempDir(), Instance: inst, Exe: exe, Log: testutil.Logger(t),
		OutputLimitBytes: 1 << 20, SpillLimitBytes: 64 << 20}
	d, err := open(t.Context(), opts)
	if err != nil {
		t.Fatalf("open = %v", err)
	}
	host := d.layout
	if host.V2 == "" {
		t.Skip("requires a unified (v2) cgroup hierarchy")
	}
	d.layout = &cgroup.Layout{V1: map[string]string{}, V2: host.V2, V2Controllers: host.V2Controllers}
	audit := &testutil.LeakAudit{CgroupPrefix: "sbx/" + inst, DataDir: opts.DataDir, Keep: []string{"bin", "layers"}}
	audit.Snapshot(t)
	t.Cleanup(func() {
		audit.Check(t)
		os.Remove(filepath.Join(host.V2, "sbx", inst))
		if err := d.pool.Close(); err != nil {
			t.Errorf("closing the disk pool: %v", err)
		}
	})

	sp := backendtest.Spec()
	in, err := d.Start(t.Context(), sp)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			d.Destroy(context.Background(), sp.ID)
		}
	})
	if in.Applied.Cgroup != "v2" {
		t.Errorf("Applied.Cgroup = %q, want v2", in.Applied.Cgroup)
	}
	var s saved
	if err := json.Unmarshal(in.Saved, &s); err != nil {
		t.Fatal(err)
	}
	group := filepath.Join(host.V2, d.cgroupPath(sp.ID))
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.Pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := unifiedPaths(string(b)), "/"+d.cgroupPath(sp.ID)+"/"+cgroup.AgentGroup; len(got) != 1 || got[0] != want {
		t.Errorf("the agent's cgroup, seen from the host = %q, want [%s]", got, want)
	}
	if pids := procsUnder(t, group); len(pids) != 1 || pids[0] != strconv.Itoa(s.Pid) {
		t.Errorf("processes in the sandbox's group = %v, want the agent %d alone", pids, s.Pid)
	}

	cl := agentclient.New(in.ID, in.Dial)
	defer cl.Close()
	exec := func(req sandbox.ExecRequest) *sandbox.ExecResult {
		t.Helper()
		req.OutputLimitBytes = 1 << 20
		res, err := cl.Exec(t.Context(), req, false, nil)
		if err != nil {
			t.Fatalf("Exec(%+v) = %v", req, err)
		}
		return res
	}
	// Inside, the namespace is rooted at the sandbox's group: the process
	// sees itself under the work leaf, and the agent (PID 1) in its own.
	res := exec(sandbox.ExecRequest{Argv: []string{"cat", "/proc/self/cgroup", "/proc/1/cgroup"}, Timeout: 30 * time.Second})
	got := unifiedPaths(string(res.Stdout))
	if res.ExitCode != 0 || len(got) != 2 || !strings.HasPrefix(got[0], "/"+cgroup.WorkGroup+"/") || got[1] != "/"+cgroup.AgentGroup {
		t.Errorf("cat /proc/self/cgroup /proc/1/cgroup: exit %d, unified paths %q (stderr %q); want [/work/<its group> /agent]",
			res.ExitCode, got, res.Stderr)
	}

	// A tree kill (the exec's timeout) takes its setsid'd grandchild in the
	// work leaf, and leaves the agent serving.
	res = exec(sandbox.ExecRequest{Shell: "setsid sleep 1000 </dev/null >/dev/null 2>&1 & sleep 1000", Timeout: time.Second})
	if res.Reason != "timeout" {
		t.Errorf("exec with a setsid'd grandchild ended %q (exit %d), want timeout", res.Reason, res.ExitCode)
	}
	work := filepath.Join(group, cgroup.WorkGroup)
	for deadline := time.Now().Add(10 * time.Second); len(procsUnder(t, work)) > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if pids := procsUnder(t, work); len(pids) > 0 {
		t.Errorf("after the tree kill the work leaf still holds %v", pids)
	}
	if err := backendtest.Health(t.Context(), in); err != nil {
		t.Errorf("agent after the tree kill: %v", err)
	}

	// Destroy kills both leaves and removes them with the group.
	res = exec(sandbox.ExecRequest{Shell: "sleep 1000", Background: true, Timeout: time.Hour})
	if pids := procsUnder(t, work); len(pids) == 0 {
		t.Errorf("a background exec: the work leaf holds no process")
	}
	destroyed = true
	if err := d.Destroy(t.Context(), sp.ID); err != nil {
		t.Fatalf("Destroy = %v", err)
	}
	if _, err := os.Stat(group); !os.IsNotExist(err) {
		t.Errorf("the sandbox's group remains after Destroy (%v)", err)
	}
}
