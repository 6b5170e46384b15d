package manager

import (
	"bytes"
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

func TestPreviewToken(t *testing.T) {
	secret := bytes.Repeat([]byte{7}, PreviewSecretBytes)
	e := newEnv(t, func(o *Options) { o.PreviewSecret = secret })
	a, b := sandbox.NewID(), sandbox.NewID()
	ta := e.m.preview.token(a)
	if len(ta) != 43 || strings.ContainsAny(ta, "+/=") {
		t.Errorf("token = %q, want 43 characters of unpadded base64url", ta)
	}
	for _, tc := range []struct {
		id    sandbox.ID
		token string
		want  bool
	}{
		{a, ta, true},
		{b, ta, false}, // a token is its sandbox's only
		{a, ta[:42], false},
		{a, "", false},
		{a, newPreviewKey(bytes.Repeat([]byte{8}, PreviewSecretBytes)).token(a), false}, // another daemon's
	} {
		if got := e.m.PreviewTokenValid(tc.id, tc.token); got != tc.want {
			t.Errorf("PreviewTokenValid(%s, %q) = %v, want %v", tc.id, tc.token, got, tc.want)
		}
	}
	// A restart with the same secret keeps every token.
	e.m.Close(t.Context())
	m := e.start(t)
	if !m.PreviewTokenValid(a, ta) {
		t.Errorf("the token of %s is refused after a restart with the same secret", a)
	}
	// Without a secret, each manager makes its own.
	if newPreviewKey(nil).token(a) == newPreviewKey(nil).token(a) {
		t.Errorf("two random preview secrets gave the same token")
	}
}

func TestPortAccessAndPublic(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	owner, other := as(ctx, "key_a"), as(ctx, "key_b")
	sb, err := e.m.Create(owner, sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	acc, err := e.m.PortAccess(owner, sb.ID, 8000)
	if err != nil || acc.Public || !e.m.PreviewTokenValid(sb.ID, acc.Token) {
		t.Fatalf("PortAccess = %+v, %v; want the sandbox's token, not public", acc, err)
	}
	if acc, err := e.m.SetPortPublic(owner, sb.ID, 8000, true); err != nil || !acc.Public {
		t.Fatalf("SetPortPublic(8000, true) = %+v, %v", acc, err)
	}
	if !e.m.PortPublic(ctx, sb.ID, 8000) || e.m.PortPublic(ctx, sb.ID, 8001) {
		t.Errorf("PortPublic(8000), (8001) = %v, %v; want true, false", e.m.PortPublic(ctx, sb.ID, 8000), e.m.PortPublic(ctx, sb.ID, 8001))
	}

	// A foreign key is told what an unknown id tells, on each call.
	unknown := sandbox.NewID()
	for name, call := range map[string]func(context.Context, sandbox.ID) error{
		"preview_url": func(ctx context.Context, id sandbox.ID) error { _, err := e.m.PortAccess(ctx, id, 8000); return err },
		"set_port_public": func(ctx context.Context, id sandbox.ID) error {
			_, err := e.m.SetPortPublic(ctx, id, 8000, false)
			return err
		},
		"dial_port": func(ctx context.Context, id sandbox.ID) error { _, err := e.m.DialPort(ctx, id, 8000); return err },
	} {
		foreign, none := call(other, sb.ID), call(other, unknown)
		if !errors.Is(foreign, sandbox.ErrNotFound) ||
			strings.ReplaceAll(foreign.Error(), string(sb.ID), "ID") != strings.ReplaceAll(none.Error(), string(unknown), "ID") {
			t.Errorf("%s: a foreign sandbox = %v; an unknown one = %v; want the same not found", name, foreign, none)
		}
	}
	if !e.m.PortPublic(ctx, sb.ID, 8000) {
		t.Errorf("a foreign key's SetPortPublic(false) changed the port")
	}
	for _, port := range []int{0, -1, 65536} {
		if _, err := e.m.SetPortPublic(owner, sb.ID, port, true); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "port") {
			t.Errorf("SetPortPublic(port %d) = %v, want invalid naming port", port, err)
		}
	}

	// Public ports outlive a restart, and go with the sandbox.
	e.m.SetPortPublic(owner, sb.ID, 3000, true)
	e.m.Close(ctx)
	m := e.start(t)
	if got, err := m.PublicPorts(ctx, sb.ID); err != nil || !reflect.DeepEqual(got[sb.ID], []int{3000, 8000}) {
		t.Errorf("PublicPorts after a restart = %v, %v; want [3000 8000]", got, err)
	}
	if err := m.Delete(owner, sb.ID); err != nil {
		t.Fatal(err)
	}
	if m.PortPublic(ctx, sb.ID, 8000) {
		t.Errorf("port 8000 of a deleted sandbox is public")
	}

	recs, _ := m.Audit(WithKey(ctx, Key{ID: "admin", Admin: true}), AuditQuery{SandboxID: string(sb.ID)})
	var got []string
	for _, r := range recs {
		if r.Action == "set_port_public" {
			got = append(got, r.KeyID+" "+r.Target+" "+r.Detail+" "+r.Outcome)
		}
	}
	want := []string{"key_a 3000 public=true ok", "key_b 8000 public=false not_found", "key_a 8000 public=true ok"}
	for _, w := range want {
		if !strings.Contains(strings.Join(got, "\n"), w) {
			t.Errorf("audit of set_port_public = %q, missing %q", got, w)
		}
	}
}

func TestDialPort(t *testing.T) {
	e := newEnv(t, nil)
	ctx := t.Context()
	d := e.fakes[0]
	sb := e.create(t, sandbox.CreateRequest{})
	stuck := make(chan struct{})
	defer close(stuck)
	d.ServePorts(sb.ID, func(ctx context.Context, port int) (net.Conn, error) {
		switch port {
		case 8000:
			c, s := net.Pipe()
			go func() { s.Write([]byte("hi")); s.Close() }()
			return c, nil
		case 9000: // a listener that never accepts
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-stuck:
				return nil, errors.New("test over")
			}
		}
		var nd net.Dialer
		return nd.DialContext(ctx, "tcp", "127.0.0.1:1") // refused
	})
	c, err := e.m.DialPort(ctx, sb.ID, 8000)
	if err != nil {
		t.Fatalf("DialPort(8000) = %v", err)
	}
	b := make([]byte, 2)
	if _, err := c.Read(b); err != nil || string(b) != "hi" {
		t.Errorf("read %q, %v through the connection", b, err)
	}
	c.Close()

	_, err = e.m.DialPort(ctx, sb.ID, 3000)
	var pe *PortError
	if !errors.As(err, &pe) || pe.Port != 3000 || pe.Timeout || !errors.Is(err, sandbox.ErrUnavailable) ||
		err.Error() != "dial_port "+string(sb.ID)+": sandbox has nothing listening on port 3000" {
		t.Errorf("DialPort(closed port) = %v, want a PortError naming the sandbox and port 3000", err)
	}

	defer func(d time.Duration) { portDialTimeout = d }(portDialTimeout)
	portDialTimeout = 50 * time.Millisecond
	_, err = e.m.DialPort(ctx, sb.ID, 9000)
	if !errors.As(err, &pe) || !pe.Timeout || !errors.Is(err, sandbox.ErrTimeout) || !strings.Contains(err.Error(), "port 9000 did not accept") {
		t.Errorf("DialPort(a port that never accepts) = %v, want a timeout PortError", err)
	}

	for _, port := range []int{0, 65536} {
		if _, err := e.m.DialPort(ctx, sb.ID, port); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("DialPort(port %d) = %v, want invalid", port, err)
		}
	}
	for _, id := range []sandbox.ID{sandbox.NewID(), "not-an-id"} {
		if _, err := e.m.DialPort(ctx, id, 8000); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("DialPort(%s) = %v, want not found", id, err)
		}
	}
	if err := e.m.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.DialPort(ctx, sb.ID, 8000); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("DialPort after Delete = %v, want not found", err)
	}
}
