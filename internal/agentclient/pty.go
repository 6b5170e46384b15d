// This file implements the terminal calls: a process's terminal, and its size.

package agentclient

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/internal/sandbox"
)

// Terminal returns process pid (an agent process id) when it runs in a
// terminal; a process with pipes for stdio is ErrInvalid, since neither its
// size nor its line discipline exist to drive.
func (c *Client) Terminal(ctx context.Context, pid string) (sandbox.ProcessInfo, error) {
	const op = "get_process"
	st, err := c.status(ctx, op, pid)
	if err != nil {
		return sandbox.ProcessInfo{}, err
	}
	if !st.GetPty() {
		return sandbox.ProcessInfo{}, &sandbox.Error{Op: op, ID: c.id,
			Err: fmt.Errorf("%w: process %s runs without a terminal (it was started without pty); follow its output with GET …/processes/%s/output", sandbox.ErrInvalid, pid, pid)}
	}
	return processInfo(st), nil
}

// Resize sets the terminal size of process pid (an agent process id),
// selected by that id, so a process that exited meanwhile is refused, never
// another one resized.
func (c *Client) Resize(ctx context.Context, pid string, rows, cols uint16) error {
	const op = "resize"
	if rows == 0 || cols == 0 {
		return &sandbox.Error{Op: op, ID: c.id, Err: fmt.Errorf("%w: a terminal of %d rows and %d columns: both must be at least 1", sandbox.ErrInvalid, rows, cols)}
	}
	_, err := rpcs().agent.Resize(c.bind(ctx), connect.NewRequest(&pb.ResizeRequest{Id: pid, Rows: uint32(rows), Cols: uint32(cols)}))
	return c.wrap(op, err)
}

// status is the agent's own record of process pid, terminal flag included.
func (c *Client) status(ctx context.Context, op, pid string) (*pb.ProcessStatus, error) {
	resp, err := rpcs().agent.GetProcess(c.bind(ctx), connect.NewRequest(&pb.GetProcessRequest{Id: pid}))
	if err != nil {
		return nil, c.wrap(op, err)
	}
	return resp.Msg, nil
}
