// This file implements exec and process calls: each is delegated to the
// sandbox's agent. A process belongs to the agent, not to the request: a request
// context ending stops following it, never the process.

package manager

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/sandbox"
)

// client returns the agent client of running sandbox id.
func (m *Manager) client(ctx context.Context, op string, id sandbox.ID) (*agentclient.Client, error) {
	if err := checkID(op, id); err != nil {
		return nil, err
	}
	if err := m.authorize(ctx, op, id); err != nil {
		return nil, err
	}
	m.mu.Lock()
	l := m.live[id]
	var lost string
	if l != nil {
		lost = l.lost
	}
	m.mu.Unlock()
	if lost != "" {
		return nil, lostError(op, id, lost)
	}
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

// Exec takes a token of ctx's key's exec rate and runs req (see exec); its
// start (argv[0] and the process id, or why it did not start) and its end (exit
// code and reason) are audited, never its arguments, environment or stdin.
func (m *Manager) Exec(ctx context.Context, id sandbox.ID, req sandbox.ExecRequest, stream bool, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	argv0 := "/bin/sh" // a shell command's own text may hold secrets
	if req.Shell == "" && len(req.Argv) > 0 {
		argv0 = req.Argv[0]
	}
	named := secretsDetail(req.Secrets) // the secrets' names, never their values
	if err := m.limits.allowExec(keyID(ctx), m.now()); err != nil {
		err = &sandbox.Error{Op: "exec", ID: id, Err: err}
		m.audit(ctx, id, "exec_start", argv0, named, err)
		return nil, err
	}
	if !req.Background { // a background process may run for hours: not a caller waiting
		defer m.pool.calling()()
	}
	var started *sandbox.ProcessInfo
	res, err := m.exec(ctx, id, req, stream, func(ev sandbox.ExecEvent) error {
		if ev.Started != nil && started == nil {
			p := *ev.Started
			started = &p
			m.audit(ctx, id, "exec_start", argv0, strings.TrimSpace(fmt.Sprintf("process_id=%s pid=%d %s", started.ID, started.PID, named)), nil)
		}
		if onEvent == nil {
			return nil
		}
		return onEvent(ev)
	})
	switch {
	case started == nil: // refused, or failed before the process started
		m.audit(ctx, id, "exec_start", argv0, named, err)
	case res != nil:
		m.audit(ctx, id, "exec_end", argv0, fmt.Sprintf("process_id=%s exit_code=%d reason=%s signal=%d",
			res.ProcessID, res.ExitCode, res.Reason, res.Signal), err)
	case err != nil:
		m.audit(ctx, id, "exec_end", argv0, "process_id="+started.ID, err)
	} // started in the background: its end is not this call's
	return res, err
}

// exec admits req through the policy and runs it; see agentclient.Client.Exec.
// When the agent is lost after the process started, the exec ends with a result
// whose reason is agent_lost (killed when the sandbox is being deleted); before
// it started, with an error wrapping sandbox.ErrAgentLost.
func (m *Manager) exec(ctx context.Context, id sandbox.ID, req sandbox.ExecRequest, stream bool, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	const op = "exec"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, err
	}
	req, err = m.policy.AdmitExec(req)
	if err != nil {
		return nil, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	// The secrets it names, opened before anything starts: a name the key
	// has no secret of runs nothing.
	env, err := m.execSecrets(ctx, id, req.Secrets)
	if err != nil {
		return nil, sandbox.Wrap(op, id, err)
	}
	req.Env, req.Secrets = withEnv(req.Env, env), nil
	var started *sandbox.ProcessInfo
	res, err := c.Exec(ctx, req, stream, func(ev sandbox.ExecEvent) error {
		if ev.Started != nil {
			p := *ev.Started
			started = &p
		}
		if onEvent == nil {
			return nil
		}
		return onEvent(ev)
	})
	if err != nil && started != nil && !req.Background {
		if res, ok := m.cutShort(id, *started, err); ok {
			return res, nil
		}
	}
	return res, m.callErr(op, id, err)
}

func (m *Manager) Processes(ctx context.Context, id sandbox.ID) ([]sandbox.ProcessInfo, error) {
	const op = "list_processes"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, err
	}
	ps, err := c.Processes(ctx)
	return ps, m.callErr(op, id, err)
}

func (m *Manager) Process(ctx context.Context, id sandbox.ID, pid string) (sandbox.ProcessInfo, error) {
	const op = "get_process"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.ProcessInfo{}, err
	}
	p, err := c.Process(ctx, pid)
	return p, m.callErr(op, id, err)
}

// Attach follows process pid of sandbox id; see agentclient.Client.Attach. When
// the agent is lost meanwhile, it ends with a result whose reason is agent_lost
// (killed when the sandbox is being deleted).
func (m *Manager) Attach(ctx context.Context, id sandbox.ID, pid string, replay bool, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	const op = "attach"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return nil, err
	}
	res, err := c.Attach(ctx, pid, replay, onEvent)
	if err != nil {
		// The process existed when the agent was reached: its end is a result.
		if res, ok := m.cutShort(id, sandbox.ProcessInfo{ID: pid}, err); ok {
			return res, nil
		}
	}
	return res, m.callErr(op, id, err)
}

func (m *Manager) WaitProcess(ctx context.Context, id sandbox.ID, pid string, timeout time.Duration) (sandbox.ProcessInfo, error) {
	const op = "wait_process"
	c, err := m.client(ctx, op, id)
	if err != nil {
		return sandbox.ProcessInfo{}, err
	}
	p, err := c.Wait(ctx, pid, timeout)
	return p, m.callErr(op, id, err)
}

func (m *Manager) WriteStdin(ctx context.Context, id sandbox.ID, pid string, data []byte, eof bool) (retErr error) {
	const op = "write_stdin"
	defer func() { m.audit(ctx, id, op, pid, fmt.Sprintf("bytes=%d eof=%t", len(data), eof), retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return err
	}
	return m.callErr(op, id, c.WriteStdin(ctx, pid, data, eof))
}

func (m *Manager) Signal(ctx context.Context, id sandbox.ID, pid string, sig int) (outcome string, retErr error) {
	const op = "signal"
	defer func() { m.audit(ctx, id, op, pid, fmt.Sprintf("signal=%d %s", sig, outcome), retErr) }()
	c, err := m.client(ctx, op, id)
	if err != nil {
		return "", err
	}
	out, err := c.Signal(ctx, pid, sig)
	return out, m.callErr(op, id, err)
}

// callErr is the error of call op on sandbox id that returned err. A call cut
// short because the sandbox was deleted or expired meanwhile (its agent
// connection closed under it) fails as not found, saying so, rather than as a
// lost agent: the end was deliberate.
func (m *Manager) callErr(op string, id sandbox.ID, err error) error {
	if errors.Is(err, sandbox.ErrAgentLost) {
		m.mu.Lock()
		_, live := m.live[id]
		deleting := m.deleting[id]
		m.mu.Unlock()
		if deleting || !live {
			return &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("sandbox %w: it was deleted or expired while the call ran", sandbox.ErrNotFound)}
		}
	}
	return sandbox.Wrap(op, id, err)
}

// Call runs fn with the agent client of running sandbox id: the way for
// layers above the manager (the tools) to reach agent calls the manager has
// no method for. fn's error is reported like every call's, named op.
func (m *Manager) Call(ctx context.Context, op string, id sandbox.ID, fn func(*agentclient.Client) error) error {
	c, err := m.client(ctx, op, id)
	if err != nil {
		return err
	}
	return m.callErr(op, id, fn(c))
}

// Policy returns the policy every sandbox and exec is admitted under.
func (m *Manager) Policy() sandbox.Policy { return m.policy }

// Record adds an audit record of action on sandbox id by ctx's key: for
// layers above the manager whose calls the manager's own records do not name
// (a tool call names its tool).
func (m *Manager) Record(ctx context.Context, id sandbox.ID, action, target, detail string, err error) {
	m.audit(ctx, id, action, target, detail, err)
}
