// This file implements the calls behind interactive terminals: a terminal is
// a process the agent runs in a PTY, started with Exec (ExecRequest.Pty) or
// already running, which a person or a browser drives by its input, its size
// and signals.

package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// TerminalTimeout is the timeout of a terminal started without one: the
// policy's longest, since a person at a prompt is idle most of the time and
// the exec default (a command's) would cut a session short.
func (m *Manager) TerminalTimeout() time.Duration { return m.policy.MaxExecTimeout }

// Terminal returns process pid of sandbox id when it runs in a terminal; one
// with pipes for stdio is ErrInvalid.
func (m *Manager) Terminal(ctx context.Context, id sandbox.ID, pid string) (sandbox.ProcessInfo, error) {
	const op = "get_process"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.ProcessInfo{}, err
	}
	p, err := c.Terminal(ctx, pid)
	return p, m.callErr(op, id, err)
}

// ErrDetached is what a terminal's onEvent returns to stop following it
// while its process goes on (its viewer went away): AttachTerminal records
// that as a detach, not a failure.
var ErrDetached = errors.New("detached from the terminal; its process goes on")

// AttachTerminal follows terminal process pid of sandbox id, replaying what
// the agent still buffers, as Attach does. Unlike following output, a
// terminal takes input, so who attached and when it ended are audited: a
// detach (ErrDetached, or ctx ending) as such, with outcome ok.
func (m *Manager) AttachTerminal(ctx context.Context, id sandbox.ID, pid string, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	m.audit(ctx, id, "pty_attach", pid, "", nil)
	res, err := m.Attach(ctx, id, pid, true, onEvent)
	detail, auditErr := "detached; the process goes on", err
	switch {
	case res != nil:
		detail = fmt.Sprintf("exit_code=%d reason=%s signal=%d", res.ExitCode, res.Reason, res.Signal)
	case errors.Is(err, ErrDetached), ctx.Err() != nil:
		auditErr = nil
	}
	m.audit(ctx, id, "pty_detach", pid, detail, auditErr)
	return res, err
}

// TerminalInput writes data to terminal process pid of sandbox id, waiting
// until the terminal took it: a sender faster than the program reads is
// held back, never buffered here. Unlike WriteStdin it is not audited per
// call: a terminal's input is keystrokes, and its start (exec_start or
// pty_attach) and end are audited instead.
func (m *Manager) TerminalInput(ctx context.Context, id sandbox.ID, pid string, data []byte) error {
	const op = "write_stdin"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return err
	}
	return m.callErr(op, id, c.WriteStdin(ctx, pid, data, false))
}

// Resize sets the size of terminal process pid of sandbox id to rows × cols;
// the program in it gets SIGWINCH.
func (m *Manager) Resize(ctx context.Context, id sandbox.ID, pid string, rows, cols uint16) (retErr error) {
	const op = "resize"
	defer func() { m.audit(ctx, id, op, pid, fmt.Sprintf("rows=%d cols=%d", rows, cols), retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return err
	}
	return m.callErr(op, id, c.Resize(ctx, pid, rows, cols))
}
