package agentclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/api/agent/sbxagent/sbxagentconnect"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

// stuckAgent answers Health, and Exec with a started event and then nothing
// until the call ends.
type stuckAgent struct {
	sbxagentconnect.UnimplementedAgentHandler
}

func (stuckAgent) Health(context.Context, *connect.Request[pb.HealthRequest]) (*connect.Response[pb.HealthResponse], error) {
	return connect.NewResponse(&pb.HealthResponse{Version: "test"}), nil
}

func (stuckAgent) Exec(ctx context.Context, _ *connect.Request[pb.ExecRequest], out *connect.ServerStream[pb.ExecEvent]) error {
	if err := out.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Started{Started: &pb.Started{Id: "p1", Pid: 7}}}); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

// connTracker remembers the server's connections, so a test can drop them all
// as the kernel does when the agent's process dies.
type connTracker struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *connTracker) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *connTracker) dropAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

// serve runs a stuck agent on a unix socket and returns a client for it.
func serve(t *testing.T, id sandbox.ID) (*Client, *connTracker, *http.Server) {
	return serveB(t, id)
}

func serveB(t testing.TB, id sandbox.ID) (*Client, *connTracker, *http.Server) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	tl := &connTracker{Listener: ln}
	mux := http.NewServeMux()
	mux.Handle(sbxagentconnect.NewAgentHandler(stuckAgent{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(tl)
	t.Cleanup(func() { srv.Close() })
	c := New(id, func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	t.Cleanup(c.Close)
	return c, tl, srv
}

// execUntil runs a stuck exec and calls cut once it started; it returns the
// exec's error, or fails t if the exec does not end within a minute (a hang,
// not a slow machine).
func execUntil(t *testing.T, c *Client, cut func()) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(context.Background(), sandbox.ExecRequest{Shell: "sleep 1000", Timeout: time.Hour}, true,
			func(ev sandbox.ExecEvent) error {
				if ev.Started != nil {
					go cut()
				}
				return nil
			})
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the exec did not end after its agent was cut off")
		return nil
	}
}

// An agent whose process dies mid-exec breaks the stream: the exec fails with
// ErrAgentLost naming the sandbox, not an internal error.
func TestBrokenStreamIsAgentLost(t *testing.T) {
	testutil.CheckLeaks(t)
	id := sandbox.NewID()
	c, tl, srv := serve(t, id)
	if err := c.Health(t.Context()); err != nil {
		t.Fatalf("control: Health = %v", err)
	}
	err := execUntil(t, c, func() {
		srv.Close() // no new connections: the process is gone
		tl.dropAll()
	})
	if !errors.Is(err, sandbox.ErrAgentLost) || !strings.Contains(err.Error(), string(id)) {
		t.Errorf("Exec cut by a dying agent = %v, want ErrAgentLost naming %s", err, id)
	}
	if err := c.Health(t.Context()); !errors.Is(err, sandbox.ErrAgentLost) {
		t.Errorf("Health of a dead agent = %v, want ErrAgentLost", err)
	}
}

// Lose ends a call the agent never answers, and makes later calls fail at once,
// with the reason given.
func TestLoseEndsCallsInFlight(t *testing.T) {
	testutil.CheckLeaks(t)
	id := sandbox.NewID()
	c, _, _ := serve(t, id)
	const why = "the agent did not answer 3 health checks in a row"
	err := execUntil(t, c, func() { c.Lose(why) })
	if !errors.Is(err, sandbox.ErrAgentLost) || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), string(id)) {
		t.Errorf("Exec after Lose = %v, want ErrAgentLost naming %s and the reason", err, id)
	}
	for _, call := range []struct {
		name string
		err  error
	}{
		{"Health", c.Health(t.Context())},
		{"WriteStdin", c.WriteStdin(t.Context(), "p1", []byte("x"), false)},
	} {
		if !errors.Is(call.err, sandbox.ErrAgentLost) || !strings.Contains(call.err.Error(), why) {
			t.Errorf("%s after Lose = %v, want ErrAgentLost with the reason", call.name, call.err)
		}
	}
	c.Lose("a second reason") // the first stays
	if err := c.Health(t.Context()); err == nil || strings.Contains(err.Error(), "second") {
		t.Errorf("Health after a second Lose = %v, want the first reason", err)
	}
}

// Control: without Lose, a call that ends by its caller's context is not a loss.
func TestCallerCancelIsNotAgentLost(t *testing.T) {
	c, _, _ := serve(t, sandbox.NewID())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, sandbox.ExecRequest{Shell: "sleep 1000", Timeout: time.Hour}, true, func(ev sandbox.ExecEvent) error {
			if ev.Started != nil {
				cancel()
			}
			return nil
		})
		done <- err
	}()
	select {
	case err := <-done:
		if errors.Is(err, sandbox.ErrAgentLost) {
			t.Errorf("Exec cancelled by its caller = %v, want no ErrAgentLost", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the exec did not end when its caller cancelled")
	}
	if err := c.Health(t.Context()); err != nil {
		t.Errorf("control: Health after a cancelled exec = %v", err)
	}
}

// versionAgent answers Health with its own version.
type versionAgent struct {
	sbxagentconnect.UnimplementedAgentHandler
	version string
}

func (a versionAgent) Health(context.Context, *connect.Request[pb.HealthRequest]) (*connect.Response[pb.HealthResponse], error) {
	return connect.NewResponse(&pb.HealthResponse{Version: a.version}), nil
}

// TestCallsReachTheirOwnAgent: the Connect clients are one set for every
// sandbox; each call goes to the agent of the Client it was made through,
// with many clients calling at once.
func TestCallsReachTheirOwnAgent(t *testing.T) {
	var clients []*Client
	for i := range 8 {
		sock := filepath.Join(t.TempDir(), "agent.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle(sbxagentconnect.NewAgentHandler(versionAgent{version: fmt.Sprint("agent-", i)}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		c := New(sandbox.NewID(), func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		})
		t.Cleanup(c.Close)
		clients = append(clients, c)
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		for range 20 {
			wg.Go(func() {
				info, err := c.HealthInfo(t.Context())
				if err != nil {
					t.Errorf("client %d: HealthInfo = %v", i, err)
					return
				}
				if want := fmt.Sprint("agent-", i); info.Version != want {
					t.Errorf("client %d reached %q, want %q", i, info.Version, want)
				}
			})
		}
	}
	wg.Wait()
	// A lost client fails at once; the others still answer.
	clients[0].Lose("test: gone")
	if err := clients[0].Health(t.Context()); !errors.Is(err, sandbox.ErrAgentLost) {
		t.Errorf("Health of a lost client = %v, want ErrAgentLost", err)
	}
	if err := clients[1].Health(t.Context()); err != nil {
		t.Errorf("Health of another client after a loss = %v", err)
	}
}

// A request of the shared clients without a Client in its context is refused,
// its body closed.
func TestRouteWithoutClient(t *testing.T) {
	req, _ := http.NewRequest("POST", baseURL+"/x", strings.NewReader("body"))
	if _, err := (route{}).RoundTrip(req); err == nil {
		t.Error("RoundTrip without a Client succeeded")
	}
}
