package agent_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/agent"
	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

// TestMain makes the test process a subreaper, as the local backend's agent is:
// orphans of the commands the in-process agent starts are reparented to it and
// reaped by the agent's reaper.
func TestMain(m *testing.M) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

type testAgent struct {
	cl   *agentclient.Client
	sock string
	root string // host path of the root
	dial func(context.Context) (net.Conn, error)
}

// startAgent serves an agent in this process with cfg (Root defaults to a
// fresh directory) on a socket in a temporary directory.
func startAgent(t *testing.T, cfg boot.AgentConfig) *testAgent {
	t.Helper()
	return startAgentTB(t, cfg)
}

func startAgentTB(t testing.TB, cfg boot.AgentConfig) *testAgent {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	if cfg.Workdir == "" {
		cfg.Workdir = "/"
	}
	if cfg.OutputDir == "" {
		cfg.OutputDir = "/.sbx/output"
	}
	if cfg.Env == nil {
		cfg.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root", "LANG=C.UTF-8"}
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Serve(ctx, cfg, ln, testutil.Logger(t)) }()
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	cl := agentclient.New(sandbox.ID("testsandbox"), dial)
	t.Cleanup(func() {
		cl.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
	if err := cl.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	return &testAgent{cl: cl, sock: sock, root: cfg.Root, dial: dial}
}
