package fake

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	"sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/api/agent/sbxagent/sbxagentconnect"
	"sbx.dev/sbx/internal/sandbox"
)

func TestStartDialHealthDestroy(t *testing.T) {
	d := New("fake")
	defer d.Close()
	ctx := t.Context()
	id := sandbox.NewID()
	inst, err := d.Start(ctx, sandbox.Spec{ID: id})
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return inst.Dial(ctx) },
	}}
	defer hc.CloseIdleConnections()
	c := sbxagentconnect.NewAgentClient(hc, "http://agent")
	if _, err := c.Health(ctx, connect.NewRequest(&sbxagent.HealthRequest{})); err != nil {
		t.Errorf("Health = %v", err)
	}
	if _, err := c.ReadFile(ctx, connect.NewRequest(&sbxagent.ReadFileRequest{Path: "/etc/passwd"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("ReadFile(a file never written) = %v, want not found", err)
	}
	if _, err := c.Glob(ctx, connect.NewRequest(&sbxagent.GlobRequest{})); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("Glob = %v, want unimplemented", err)
	}
	if _, err := d.Recover(ctx, id, inst.Saved); err != nil {
		t.Errorf("Recover(saved) = %v", err)
	}
	if _, err := d.Recover(ctx, id, []byte("other")); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Recover(wrong saved) = %v, want ErrNotFound", err)
	}
	if err := d.Destroy(ctx, id); err != nil || len(d.Held()) != 0 {
		t.Errorf("Destroy = %v, held %v", err, d.Held())
	}
	if err := d.Destroy(ctx, id); err != nil {
		t.Errorf("Destroy twice = %v, want nil (idempotent)", err)
	}
	boom := errors.New("boom")
	d.FailNextStart(boom)
	if _, err := d.Start(ctx, sandbox.Spec{ID: sandbox.NewID()}); err != boom {
		t.Errorf("Start after FailNextStart = %v, want %v", err, boom)
	}
	if d.Called("Start", "") != 2 || d.Called("Destroy", id) != 2 {
		t.Errorf("Calls = %v", d.Calls())
	}
}

func TestStartHonorsContext(t *testing.T) {
	d := New("fake")
	defer d.Close()
	d.SetStartDelay(1 << 62)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := d.Start(ctx, sandbox.Spec{ID: sandbox.NewID()}); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a cancelled ctx = %v, want context.Canceled", err)
	}
	if held := d.Held(); len(held) != 0 {
		t.Errorf("a cancelled Start left %v", held)
	}
}
