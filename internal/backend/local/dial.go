// This file implements DialPort. A local sandbox's processes share the
// host's network, so its ports are the host's loopback ports.

package local

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/sandbox"
)

var _ backend.PortDialer = (*Driver)(nil)

// DialPort implements backend.PortDialer: 127.0.0.1:port on the host, while
// the sandbox's agent runs. Local is not a sandbox: the port need not be one
// the sandbox's processes opened.
func (d *Driver) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	const op = "dial_port"
	if err := backend.CheckPort(op, id, port); err != nil {
		return nil, err
	}
	b, held, err := d.lookup(op, id)
	if err != nil {
		return nil, err
	}
	if !held || b.proc.Exited() {
		return nil, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("sandbox %w: it is not running", sandbox.ErrNotFound)}
	}
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	return c, nil
}
