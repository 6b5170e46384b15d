package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/backendtest"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuild()
	os.Exit(code)
}

func openAt(t *testing.T, dataDir string) backend.Driver {
	t.Helper()
	return openWith(t, dataDir, nil)
}

// openWith is openAt with the host git repositories gitRepos listed.
func openWith(t *testing.T, dataDir string, gitRepos []string) backend.Driver {
	t.Helper()
	d, err := Open(t.Context(), backend.Options{DataDir: dataDir, Instance: "t", Exe: testutil.BuildSBX(t),
		Log: testutil.Logger(t), OutputLimitBytes: 1 << 20, SpillLimitBytes: 64 << 20, GitRepos: gitRepos})
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	t.Cleanup(func() { d.(*Driver).Close(context.Background()) })
	return d
}

func TestConformance(t *testing.T) {
	dataDir := t.TempDir()
	backendtest.Run(t, func(t *testing.T) backend.Driver { return openAt(t, dataDir) },
		backendtest.HostAudit(func(t *testing.T) *testutil.LeakAudit { return &testutil.LeakAudit{DataDir: dataDir} }))
}

// agentPids lists the processes running the sbx agent for sandbox id.
func agentPids(id sandbox.ID) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(b), string(id)) {
			out = append(out, pid)
		}
	}
	return out
}

func TestLifecycle(t *testing.T) {
	dataDir := t.TempDir()
	d := openAt(t, dataDir)
	sp := backendtest.Spec()
	inst, err := d.Start(t.Context(), sp)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	if inst.Applied.Sandbox || inst.Applied.Level != "none" || inst.Applied.Warning == "" {
		t.Errorf("Applied = %+v, want not a sandbox, level none, a warning", inst.Applied)
	}
	// As root, its commands run in a group of their own with its limits.
	if os.Geteuid() == 0 {
		b, _ := d.(*Driver).boxes.Get(sp.ID)
		if inst.Applied.Layers["cgroup"] != sandbox.Applied || b.group == nil {
			t.Errorf("Applied = %+v: want the cgroup layer", inst.Applied)
		} else if mem := b.group.Dir("memory"); mem != "" {
			if v, _ := os.ReadFile(filepath.Join(mem, "memory.limit_in_bytes")); strings.TrimSpace(string(v)) != strconv.FormatInt(sp.MemoryBytes, 10) {
				t.Errorf("the local sandbox's memory limit = %q, want %d", v, sp.MemoryBytes)
			}
		}
	}
	if inst.Applied.Layers["landlock"] != sandbox.Applied || inst.Applied.Layers["seccomp"] != sandbox.Applied ||
		inst.Applied.LandlockABI < 1 || !strings.HasPrefix(inst.Applied.SeccompProfile, "default@") {
		t.Errorf("Applied = %+v, want Landlock and seccomp applied", inst.Applied)
	}
	cl := agentclient.New(inst.ID, inst.Dial)
	pidfile := filepath.Join(dataDir, string(sp.ID), "workspace", "pid")
	res, err := cl.Exec(t.Context(), sandbox.ExecRequest{Shell: "pwd; setsid sh -c 'sleep 1000 & echo $! > " + pidfile + "; wait' >/dev/null 2>&1 </dev/null &", Timeout: time.Minute}, false, nil)
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != filepath.Join(dataDir, string(sp.ID), "workspace")+"\n" {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	if _, err := cl.WriteFile(t.Context(), "/f.txt", []byte("x"), 0, false); err != nil {
		t.Errorf("WriteFile = %v", err)
	}
	cl.Close()

	// A restarted daemon: a new driver over the same data dir recovers it.
	d2 := openAt(t, dataDir)
	got, err := d2.Recover(t.Context(), sp.ID, inst.Saved)
	if err != nil {
		t.Fatalf("Recover = %v", err)
	}
	cl2 := agentclient.New(got.ID, got.Dial)
	defer cl2.Close()
	if r, err := cl2.ReadFile(t.Context(), "/f.txt", 0, 0); err != nil || string(r.Content) != "x" {
		t.Errorf("ReadFile after Recover = %+v, %v", r, err)
	}
	// The grandchild writes its pid in the background: wait for it before the
	// Destroy that must kill it (a hang guard, not a timing assertion).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(pidfile); len(strings.TrimSpace(string(b))) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the setsid'd grandchild never wrote its pid")
		}
	}
	b, _ := os.ReadFile(pidfile)
	pids := agentPids(sp.ID)
	if len(pids) == 0 {
		t.Fatal("no agent process found")
	}
	for i := range 2 {
		if err := d2.Destroy(t.Context(), sp.ID); err != nil {
			t.Errorf("Destroy #%d = %v", i+1, err)
		}
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("agent pid %d survived Destroy", pid)
		}
	}
	if _, err := os.Stat(filepath.Join(dataDir, string(sp.ID))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox directory left behind: %v", err)
	}
	if gpid, _ := strconv.Atoi(strings.TrimSpace(string(b))); gpid == 0 || !goneSoon(gpid) {
		t.Errorf("setsid'd grandchild %q survived Destroy", b)
	}
	if _, err := d2.Recover(t.Context(), sp.ID, inst.Saved); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Recover after Destroy = %v, want ErrNotFound", err)
	}
}

func TestRequireLayers(t *testing.T) {
	d := openAt(t, t.TempDir())
	sp := backendtest.Spec()
	sp.RequireLayers = []string{sandbox.LayerSeccomp, sandbox.LayerUserNS}
	_, err := d.Start(t.Context(), sp)
	if !errors.Is(err, sandbox.ErrIsolation) || !strings.Contains(err.Error(), "seccomp, userns") {
		t.Errorf("Start(RequireLayers) = %v, want ErrIsolation naming the layers", err)
	}
	if err := d.Destroy(context.Background(), sp.ID); err != nil {
		t.Errorf("Destroy after a failed Start = %v", err)
	}
}

// The local backend is no sandbox, but its commands are confined: they write
// only their workspace and scratch directory and read neither the daemon's
// data dir nor files outside the system directories.
func TestConfined(t *testing.T) {
	dataDir := t.TempDir()
	d := openAt(t, dataDir)
	sp := backendtest.Spec()
	inst, err := d.Start(t.Context(), sp)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	defer d.Destroy(context.Background(), sp.ID)
	secret := filepath.Join(dataDir, "admin.key")
	if err := os.WriteFile(secret, []byte("canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	cl := agentclient.New(inst.ID, inst.Dial)
	defer cl.Close()
	sh := func(cmd string) int {
		res, err := cl.Exec(t.Context(), sandbox.ExecRequest{Shell: cmd, Timeout: time.Minute}, false, nil)
		if err != nil {
			t.Fatalf("Exec(%q) = %v", cmd, err)
		}
		return res.ExitCode
	}
	for _, c := range []struct {
		cmd  string
		want bool
	}{
		{"echo x > ./in-workspace", true},                   // control
		{"echo x > \"$TMPDIR\"/scratch", true},              // control
		{"cat /etc/hostname /usr/bin/env >/dev/null", true}, // control
		{"echo x > " + outside + "/f", false},
		{"cat " + secret, false},
		{"ls " + dataDir, false},
		{"cat /etc/shadow", false},
		{"ls " + os.Getenv("HOME"), false},
	} {
		if got := sh(c.cmd) == 0; got != c.want {
			t.Errorf("%q succeeded = %v, want %v", c.cmd, got, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "f")); err == nil {
		t.Errorf("a local command wrote outside its workspace")
	}
}
