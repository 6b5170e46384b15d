package local

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/backendtest"
	"sbx.dev/sbx/internal/sandbox"
)

// A local sandbox's ports are the host's loopback ports, reachable while its
// agent runs.
func TestDialPort(t *testing.T) {
	d := openAt(t, t.TempDir())
	pd := d.(backend.PortDialer)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	sp := backendtest.Spec()
	if _, err := d.Start(t.Context(), sp); err != nil {
		t.Fatalf("Start = %v", err)
	}
	defer d.Destroy(context.Background(), sp.ID)

	c, err := pd.DialPort(t.Context(), sp.ID, port)
	if err != nil {
		t.Fatalf("DialPort(%d) = %v", port, err)
	}
	b := make([]byte, 2)
	if _, err := c.Read(b); err != nil || string(b) != "hi" {
		t.Errorf("read %q, %v from the listener", b, err)
	}
	c.Close()

	l2, _ := net.Listen("tcp4", "127.0.0.1:0")
	closed := l2.Addr().(*net.TCPAddr).Port
	l2.Close()
	for _, tc := range []struct {
		name string
		id   sandbox.ID
		port int
		want error
	}{
		{"nothing listening", sp.ID, closed, syscall.ECONNREFUSED},
		{"port 0", sp.ID, 0, sandbox.ErrInvalid},
		{"unknown sandbox", sandbox.NewID(), port, sandbox.ErrNotFound},
	} {
		c, err := pd.DialPort(t.Context(), tc.id, tc.port)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: DialPort(%s, %d) = %v, want %v", tc.name, tc.id, tc.port, err, tc.want)
		}
	}
	if err := d.Destroy(t.Context(), sp.ID); err != nil {
		t.Fatal(err)
	}
	if c, err := pd.DialPort(t.Context(), sp.ID, port); !errors.Is(err, sandbox.ErrNotFound) {
		if err == nil {
			c.Close()
		}
		t.Errorf("DialPort after Destroy = %v, want not found", err)
	}
}
