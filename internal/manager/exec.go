// This file implements exec and process calls: each is delegated to the
// sandbox's agent. A process belongs to the agent, not to the request: a request
// context ending stops following it, never the process.

package manager

import (
	"context"
	"errors"
	"time"

	"sbx/internal/agentclient"
	"sbx/internal/sandbox"
)

// client returns the agent client of running sandbox id.
func (m *Manager) client(ctx context.Context, op string, id sandbox.ID) (*agentclient.Client, error) {
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if l != nil {
		return l.client, nil
	}
	sb, err := m.store.GetSandbox(ctx, id)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, notFound(op, id)
	}
	if err != nil {
		return nil, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	if sb.State != sandbox.StateRunning {
		return nil, &sandbox.Error{Op: op, ID: id, Err: wrongState(sb.State)}
	}
	// Running in the store but not reachable here: being deleted, or its
	// recovery failed in a way that left the record.
	return nil, &sandbox.Error{Op: op, ID: id, Err: sandbox.ErrAgentLost}
}

// Exec admits req through the policy and runs it; see agentclient.Client.Exec.
func (m *Manager) Exec(ctx context.Context, id sandbox.ID, req sandbox.ExecRequest, stream bool, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	const op = "exec"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, err
	}
	req, err = m.policy.AdmitExec(req)
	if err != nil {
		return nil, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	res, err := c.Exec(ctx, req, stream, onEvent)
	return res, sandbox.Wrap(op, id, err)
}

func (m *Manager) Processes(ctx context.Context, id sandbox.ID) ([]sandbox.ProcessInfo, error) {
	const op = "list_processes"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, err
	}
	ps, err := c.Processes(ctx)
	return ps, sandbox.Wrap(op, id, err)
}

func (m *Manager) Process(ctx context.Context, id sandbox.ID, pid string) (sandbox.ProcessInfo, error) {
	const op = "get_process"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.ProcessInfo{}, err
	}
	p, err := c.Process(ctx, pid)
	return p, sandbox.Wrap(op, id, err)
}

func (m *Manager) Attach(ctx context.Context, id sandbox.ID, pid string, replay bool, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	const op = "attach"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, err
	}
	res, err := c.Attach(ctx, pid, replay, onEvent)
	return res, sandbox.Wrap(op, id, err)
}

func (m *Manager) WaitProcess(ctx context.Context, id sandbox.ID, pid string, timeout time.Duration) (sandbox.ProcessInfo, error) {
	const op = "wait_process"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.ProcessInfo{}, err
	}
	p, err := c.Wait(ctx, pid, timeout)
	return p, sandbox.Wrap(op, id, err)
}

func (m *Manager) WriteStdin(ctx context.Context, id sandbox.ID, pid string, data []byte, eof bool) error {
	const op = "write_stdin"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return err
	}
	return sandbox.Wrap(op, id, c.WriteStdin(ctx, pid, data, eof))
}

func (m *Manager) Signal(ctx context.Context, id sandbox.ID, pid string, sig int) (string, error) {
	const op = "signal"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return "", err
	}
	out, err := c.Signal(ctx, pid, sig)
	return out, sandbox.Wrap(op, id, err)
}
