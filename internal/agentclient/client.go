// Package agentclient is the daemon's side of the agent protocol: typed Connect
// clients over a connection a backend hands out, with agent errors mapped back to
// the sandbox error classes. Everything the agent sends is untrusted: replies are
// bounded in size and time.
package agentclient

import (
	"context"
	"io"
	"net"
	"time"

	"sbx/internal/sandbox"
)

// Client talks to one sandbox's agent. It is safe for concurrent use.
type Client struct {
	id sandbox.ID
}

// New returns a client for sandbox id that reaches its agent through dial.
func New(id sandbox.ID, dial func(context.Context) (net.Conn, error)) *Client {
	panic("unimplemented")
}

// Close drops idle connections.
func (c *Client) Close() { panic("unimplemented") }

// Health returns nil once the agent serves.
func (c *Client) Health(ctx context.Context) error { panic("unimplemented") }

// WaitReady polls Health until it answers or ctx ends.
func (c *Client) WaitReady(ctx context.Context) error { panic("unimplemented") }

// Exec runs req (already admitted) and blocks until it ends, calling onEvent (may
// be nil) for each event, output included when stream is set. With req.Background
// it returns after the start event with a nil result and the process info in
// the Started event. A failing onEvent stops following; the process goes on.
func (c *Client) Exec(ctx context.Context, req sandbox.ExecRequest, stream bool, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	panic("unimplemented")
}

// Attach follows process pid (an agent process id), replaying buffered output
// first when replay is set, until it exits; it returns the result.
func (c *Client) Attach(ctx context.Context, pid string, replay bool, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	panic("unimplemented")
}

// Wait blocks until process pid exits or timeout passes; Running tells which.
func (c *Client) Wait(ctx context.Context, pid string, timeout time.Duration) (sandbox.ProcessInfo, error) {
	panic("unimplemented")
}

func (c *Client) Process(ctx context.Context, pid string) (sandbox.ProcessInfo, error) {
	panic("unimplemented")
}

func (c *Client) Processes(ctx context.Context) ([]sandbox.ProcessInfo, error) {
	panic("unimplemented")
}

func (c *Client) WriteStdin(ctx context.Context, pid string, data []byte, eof bool) error {
	panic("unimplemented")
}

// Signal sends sig to process pid (9 ends its whole tree) and reports the outcome:
// sandbox.OutcomeStopped, OutcomeSignaled or OutcomeAlreadyExited.
func (c *Client) Signal(ctx context.Context, pid string, sig int) (string, error) {
	panic("unimplemented")
}

func (c *Client) ReadFile(ctx context.Context, path string, offset, limit int64) (sandbox.ReadResult, error) {
	panic("unimplemented")
}

func (c *Client) WriteFile(ctx context.Context, path string, content []byte, mode uint32, appendTo bool) (sandbox.FileInfo, error) {
	panic("unimplemented")
}

func (c *Client) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	panic("unimplemented")
}

func (c *Client) List(ctx context.Context, path string, depth int) ([]sandbox.FileInfo, error) {
	panic("unimplemented")
}

func (c *Client) MakeDir(ctx context.Context, path string) (sandbox.FileInfo, error) {
	panic("unimplemented")
}

func (c *Client) Move(ctx context.Context, src, dst string) (sandbox.FileInfo, error) {
	panic("unimplemented")
}

func (c *Client) Remove(ctx context.Context, path string) error { panic("unimplemented") }

func (c *Client) Glob(ctx context.Context, pattern, dir string, limit int) ([]string, bool, error) {
	panic("unimplemented")
}

// GrepRequest selects lines to find.
type GrepRequest struct {
	Pattern    string
	Path       string
	Include    string
	IgnoreCase bool
	Fixed      bool
	Limit      int
}

func (c *Client) Grep(ctx context.Context, req GrepRequest) ([]sandbox.GrepMatch, bool, error) {
	panic("unimplemented")
}

// Download streams a file out of the sandbox; the caller closes the reader.
func (c *Client) Download(ctx context.Context, path string) (io.ReadCloser, sandbox.FileInfo, error) {
	panic("unimplemented")
}

// Upload streams r into a file in the sandbox, creating parents, replacing it.
func (c *Client) Upload(ctx context.Context, path string, r io.Reader, mode uint32) (sandbox.FileInfo, error) {
	panic("unimplemented")
}
