// This file implements DialPort for tests of preview URLs: a test serves a
// sandbox's ports with a dial function of its own (ServePorts).

package fake

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/sandbox"
)

var _ backend.PortDialer = (*Driver)(nil)

// PortDial reaches port in a fake sandbox; it stands for the sandbox's network.
type PortDial func(ctx context.Context, port int) (net.Conn, error)

// ServePorts makes dial serve sandbox id's ports; nil removes it. Without
// one, every port of a running sandbox refuses connections.
func (d *Driver) ServePorts(id sandbox.ID, dial PortDial) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ports == nil {
		d.ports = map[sandbox.ID]PortDial{}
	}
	if dial == nil {
		delete(d.ports, id)
		return
	}
	d.ports[id] = dial
}

// DialPort implements backend.PortDialer; it records the call.
func (d *Driver) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	const op = "dial_port"
	if err := backend.CheckPort(op, id, port); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.record("DialPort", id)
	running := d.running[id]
	dial := d.ports[id]
	d.mu.Unlock()
	switch {
	case !running:
		return nil, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("sandbox %w: it is not running", sandbox.ErrNotFound)}
	case dial == nil:
		return nil, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("dialing port %d: %w", port, syscall.ECONNREFUSED)}
	}
	c, err := dial(ctx, port)
	if err != nil {
		return nil, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	return c, nil
}
