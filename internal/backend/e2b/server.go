// This file implements the adapter's server: one http.Server in the daemon's
// process serves the agent of every remote sandbox over in-memory
// connections (net.Pipe); a request finds its sandbox by the connection it
// came on, which Dial made for that sandbox.

package e2b

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"sbx.dev/sbx/api/agent/sbxagent/sbxagentconnect"
	"sbx.dev/sbx/internal/sandbox"
)

// maxRequestBytes bounds one request of the agent protocol, as the agent does.
const maxRequestBytes = 64 << 20

type remoteKey struct{}

// remoteOf returns the sandbox whose connection ctx's request came on.
func remoteOf(ctx context.Context) *remote {
	r, _ := ctx.Value(remoteKey{}).(*remote)
	return r
}

// newServer returns the adapter's server over lis.
func (d *Driver) newServer() *http.Server {
	mux := http.NewServeMux()
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(maxRequestBytes), connect.WithCompressMinBytes(math.MaxInt32)}
	mux.Handle(sbxagentconnect.NewAgentHandler(agentService{}, opts...))
	mux.HandleFunc("/process.Process/", forward)
	mux.HandleFunc("/filesystem.Filesystem/", forward)
	mux.HandleFunc("GET /health", forward)
	mux.HandleFunc("GET /files", forward)
	mux.HandleFunc("POST /files", upload)
	mux.HandleFunc("/files/archive", archive)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{Handler: mux, Protocols: &p, ReadHeaderTimeout: 10 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if sc, ok := c.(*serverConn); ok {
				return context.WithValue(ctx, remoteKey{}, sc.r)
			}
			return ctx
		}}
}

// dial opens a connection to r's adapter.
func (d *Driver) dial(ctx context.Context, r *remote) (net.Conn, error) {
	d.serveOnce.Do(func() {
		d.wg.Go(func() { d.srv.Serve(d.lis) })
	})
	client, server := net.Pipe()
	sc := &serverConn{Conn: server, r: r}
	if !r.track(sc) {
		client.Close()
		server.Close()
		return nil, &sandbox.Error{Op: "dial", ID: r.id, Err: fmt.Errorf("dialing the agent adapter: %w", syscall.ECONNREFUSED)}
	}
	if err := d.lis.Hand(ctx, sc); err != nil {
		client.Close()
		sc.Close()
		if errors.Is(err, net.ErrClosed) {
			return nil, &sandbox.Error{Op: "dial", ID: r.id, Err: fmt.Errorf("dialing the agent adapter: %w", err)}
		}
		return nil, err
	}
	return client, nil
}

// serverConn is the adapter's end of a connection, naming its sandbox.
type serverConn struct {
	net.Conn
	r    *remote
	once sync.Once
}

func (c *serverConn) Close() error {
	c.once.Do(func() { c.r.untrack(c) })
	return c.Conn.Close()
}
