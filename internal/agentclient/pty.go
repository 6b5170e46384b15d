// This file implements the terminal calls the sbx agent service has no RPC
// for: a terminal's size is changed through envd's process service, which
// the same agent serves on the same connection.

package agentclient

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	procpb "sbx/api/agent/process"
	"sbx/api/agent/process/processconnect"
	pb "sbx/api/agent/sbxagent"
	"sbx/internal/sandbox"
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

// Resize sets the terminal size of process pid (an agent process id). envd's
// Update selects a process by its pid in the sandbox, not the agent's id, so
// the agent is asked for that pid first; a process that exited meanwhile is
// refused by the agent (its terminal is gone), never another one resized.
func (c *Client) Resize(ctx context.Context, pid string, rows, cols uint16) error {
	const op = "resize"
	if rows == 0 || cols == 0 {
		return &sandbox.Error{Op: op, ID: c.id, Err: fmt.Errorf("%w: a terminal of %d rows and %d columns: both must be at least 1", sandbox.ErrInvalid, rows, cols)}
	}
	st, err := c.status(ctx, op, pid)
	if err != nil {
		return err
	}
	switch {
	case !st.GetPty():
		return &sandbox.Error{Op: op, ID: c.id, Err: fmt.Errorf("%w: process %s has no terminal to resize", sandbox.ErrInvalid, pid)}
	case st.GetState() != "running" || st.GetPid() == 0:
		return &sandbox.Error{Op: op, ID: c.id, Err: fmt.Errorf("%w: process %s has exited: its terminal is gone", sandbox.ErrWrongState, pid)}
	}
	// Built per call: a resize is rare (a window's size changing), and the
	// client's own fields are the agent service's.
	envd := processconnect.NewProcessClient(c.hc, baseURL, connect.WithReadMaxBytes(maxReplyBytes))
	_, err = envd.Update(ctx, connect.NewRequest(&procpb.UpdateRequest{
		Process: &procpb.ProcessSelector{Selector: &procpb.ProcessSelector_Pid{Pid: st.GetPid()}},
		Pty:     &procpb.PTY{Size: &procpb.PTY_Size{Rows: uint32(rows), Cols: uint32(cols)}},
	}))
	return c.wrap(op, err)
}

// status is the agent's own record of process pid, terminal flag included.
func (c *Client) status(ctx context.Context, op, pid string) (*pb.ProcessStatus, error) {
	resp, err := c.agent.GetProcess(ctx, connect.NewRequest(&pb.GetProcessRequest{Id: pid}))
	if err != nil {
		return nil, c.wrap(op, err)
	}
	return resp.Msg, nil
}
