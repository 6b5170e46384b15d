// This file implements DialPort: a TCP connection from the daemon to a port
// inside a sandbox's network namespace, for preview URLs. A socket keeps the
// namespace it was made in, so only its creation happens inside: on a thread
// of its own, thrown away afterwards, that entered the namespace with setns.

package native

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/osthread"
	"sbx.dev/sbx/internal/sandbox"
)

var _ backend.PortDialer = (*Driver)(nil)

// DialPort implements backend.PortDialer.
func (d *Driver) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	const op = "dial_port"
	if err := backend.CheckPort(op, id, port); err != nil {
		return nil, err
	}
	b, held, err := d.lookup(op, id)
	if err != nil {
		return nil, err
	}
	if !held || b.proc.Exited() || b.proc.PidFD == nil {
		return nil, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("sandbox %w: it is not running", sandbox.ErrNotFound)}
	}
	ns, err := openNetNS(b.proc)
	if err != nil {
		return nil, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	defer ns.Close()
	c, err := dialIn(ctx, ns, port)
	if err != nil {
		return nil, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	return c, nil
}

// openNetNS opens the network namespace of p, the sandbox's init. The pid
// could name another process once the init is gone, so the pidfd is checked
// after the open: if the init still runs then, the pid was its all along and
// the namespace opened is the sandbox's.
func openNetNS(p *backend.Proc) (*os.File, error) {
	ns, err := os.Open("/proc/" + strconv.Itoa(p.Pid) + "/ns/net")
	if err != nil {
		return nil, fmt.Errorf("sandbox %w: opening its network namespace: %v", sandbox.ErrNotFound, err)
	}
	alive, err := running(p.PidFD)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("checking the sandbox's init pid %d: %w", p.Pid, err)
	}
	if !alive {
		ns.Close()
		return nil, fmt.Errorf("sandbox %w: its init pid %d has exited", sandbox.ErrNotFound, p.Pid)
	}
	return ns, nil
}

// running reports whether the process of pidfd has not exited: a pidfd
// polls readable once it has.
func running(pidfd *os.File) (bool, error) {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return false, err
	}
	var n int
	var perr error
	err = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, perr = unix.Poll(fds, 0)
			if perr != unix.EINTR {
				return
			}
		}
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return false, err
	}
	return n == 0, nil
}

// dialIn connects to 127.0.0.1:port in network namespace ns. The dial runs on
// a discarded thread that entered ns: the socket is made there and keeps ns;
// waiting for the connect parks only that thread. The connection is then
// used from any thread.
func dialIn(ctx context.Context, ns *os.File, port int) (net.Conn, error) {
	var c net.Conn
	err := osthread.Discarded(func() error {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("entering the sandbox's network namespace: %w", err)
		}
		var nd net.Dialer
		var err error
		c, err = nd.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		return err
	})
	return c, err
}
