package fake

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"

	"sbx.dev/sbx/internal/sandbox"
)

func TestDialPort(t *testing.T) {
	d := New("fake")
	defer d.Close()
	id := sandbox.NewID()
	if _, err := d.Start(t.Context(), sandbox.Spec{ID: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DialPort(t.Context(), id, 8000); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("DialPort with no port served = %v, want connection refused", err)
	}
	var asked int
	d.ServePorts(id, func(ctx context.Context, port int) (net.Conn, error) {
		asked = port
		c, s := net.Pipe()
		s.Close()
		return c, nil
	})
	c, err := d.DialPort(t.Context(), id, 8000)
	if err != nil || asked != 8000 {
		t.Fatalf("DialPort(8000) = %v, served port %d", err, asked)
	}
	c.Close()
	if _, err := d.DialPort(t.Context(), id, 70000); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("DialPort(70000) = %v, want invalid", err)
	}
	d.Stop(t.Context(), id, 0)
	if _, err := d.DialPort(t.Context(), id, 8000); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("DialPort after Stop = %v, want not found", err)
	}
}
