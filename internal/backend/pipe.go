package backend

import (
	"context"
	"net"
	"sync"
)

// PipeListener is a net.Listener over in-memory connections, for drivers
// whose agent is served in the daemon's own process (fake, e2b): a dial
// makes a net.Pipe and hands its server end to the listener's Accept.
type PipeListener struct {
	name  string
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

// NewPipeListener returns an open listener; name is its address's.
func NewPipeListener(name string) *PipeListener {
	return &PipeListener{name: name, conns: make(chan net.Conn), done: make(chan struct{})}
}

// Hand gives server, the server end of a connection, to Accept. It fails
// with net.ErrClosed once the listener is closed, or with ctx's cause; the
// caller then closes both ends.
func (l *PipeListener) Hand(ctx context.Context, server net.Conn) error {
	select {
	case l.conns <- server:
		return nil
	case <-l.done:
		return net.ErrClosed
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Accept implements net.Listener.
func (l *PipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener; it is idempotent.
func (l *PipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *PipeListener) Addr() net.Addr { return pipeAddr(l.name) }

type pipeAddr string

func (pipeAddr) Network() string  { return "pipe" }
func (a pipeAddr) String() string { return string(a) }
