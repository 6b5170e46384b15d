// This file implements the fake agent's health, exec and process calls; its
// file calls are in files.go.

package fake

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"sbx.dev/sbx/api/agent/filesystem/filesystemconnect"
	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/api/agent/sbxagent/sbxagentconnect"
	"sbx.dev/sbx/internal/sandbox"
)

// agent serves the agents of every sandbox of d: a call finds the state of its
// sandbox's agent by the connection it came on.
type agent struct {
	sbxagentconnect.UnimplementedAgentHandler
	filesystemconnect.UnimplementedFilesystemHandler
	d *Driver
}

type agentKey struct{}

// state returns the agent that ctx's call reached, and records the call as method.
func (g *agent) state(ctx context.Context, method string) *agentState {
	a, ok := ctx.Value(agentKey{}).(*agentState)
	if !ok {
		panic("fake: a call on a connection dial did not make")
	}
	g.d.mu.Lock()
	defer g.d.mu.Unlock()
	g.d.record(method, a.id)
	return a
}

// Run is what a scripted command does: it writes Output in order, runs for
// Delay, and exits with ExitCode.
type Run struct {
	Output   []Output
	Delay    time.Duration
	ExitCode int
}

// Output is one write of a scripted command.
type Output struct {
	Stderr bool // else stdout
	Data   []byte
}

// Script makes every agent of d run command as run when it is executed in the
// foreground; command is the exec's shell text, or its argv joined by spaces.
// Stdin, when given, comes back on stdout after the script's output, as from
// cat. Commands without a script, and every command run in the background,
// start and run until signal 9 ends them or the agent ends.
func (d *Driver) Script(command string, run Run) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.scripts[command] = run
}

// process is one process of a fake agent.
type process struct {
	id    string
	pid   uint32
	argv  []string
	ended chan struct{}  // closed when it exits
	res   *pb.ExecResult // set, under Driver.mu, before ended closes
}

// exit ends p with res unless it has ended; Driver.mu must be held.
func (p *process) exit(res *pb.ExecResult) {
	if p.res == nil {
		p.res = res
		close(p.ended)
	}
}

func (g *agent) Health(context.Context, *connect.Request[pb.HealthRequest]) (*connect.Response[pb.HealthResponse], error) {
	return connect.NewResponse(&pb.HealthResponse{Version: "fake"}), nil
}

// Exec starts a process, numbered in its sandbox from fake-1 (pid 42), and
// sends its start. In the foreground it then plays the command's script
// (output events only when streaming) and sends the result; see Script.
func (g *agent) Exec(ctx context.Context, req *connect.Request[pb.ExecRequest], out *connect.ServerStream[pb.ExecEvent]) error {
	a := g.state(ctx, "Exec")
	m := req.Msg
	argv := m.GetArgv()
	command := strings.Join(argv, " ")
	if len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c" {
		command = argv[2] // a shell command: its script is keyed by its text
	}
	g.d.mu.Lock()
	run, scripted := g.d.scripts[command]
	a.started++
	p := &process{id: fmt.Sprintf("fake-%d", a.started), pid: uint32(41 + a.started), argv: argv, ended: make(chan struct{})}
	a.procs[p.id] = p
	g.d.mu.Unlock()
	if err := out.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Started{Started: &pb.Started{Id: p.id, Pid: p.pid}}}); err != nil {
		return err
	}
	if m.GetBackground() {
		return nil
	}
	if !scripted {
		run.Delay = 1<<63 - 1 // until killed
	}
	writes := run.Output
	if len(m.GetStdin()) > 0 {
		writes = append(slices.Clone(writes), Output{Data: m.GetStdin()})
	}
	res := &pb.ExecResult{ExitCode: int32(run.ExitCode), Reason: sandbox.ReasonExited}
	for _, w := range writes {
		stream := pb.Stream_STREAM_STDOUT
		if w.Stderr {
			stream, res.Stderr = pb.Stream_STREAM_STDERR, append(res.Stderr, w.Data...)
		} else {
			res.Stdout = append(res.Stdout, w.Data...)
		}
		if m.GetStream() {
			err := out.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Output{Output: &pb.Output{Stream: stream, Data: w.Data}}})
			if err != nil {
				return err
			}
		}
	}
	t := time.NewTimer(run.Delay)
	defer t.Stop()
	select {
	case <-t.C:
		g.d.mu.Lock()
		p.exit(res)
		g.d.mu.Unlock()
	case <-p.ended: // killed meanwhile
	case <-ctx.Done():
		return ctx.Err()
	}
	return out.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Result{Result: p.res}})
}

func (g *agent) GetProcess(ctx context.Context, req *connect.Request[pb.GetProcessRequest]) (*connect.Response[pb.ProcessStatus], error) {
	a := g.state(ctx, "GetProcess")
	g.d.mu.Lock()
	defer g.d.mu.Unlock()
	p := a.procs[req.Msg.GetId()]
	if p == nil {
		return nil, noProcess(req.Msg.GetId())
	}
	st := &pb.ProcessStatus{Id: p.id, Pid: p.pid, Argv: p.argv, State: "running"}
	if p.res != nil {
		st.State, st.Result = "exited", p.res
	}
	return connect.NewResponse(st), nil
}

// Signal ends the process on signal 9, as the kill of its tree does; the fake's
// processes ignore every other signal.
func (g *agent) Signal(ctx context.Context, req *connect.Request[pb.SignalRequest]) (*connect.Response[pb.SignalResponse], error) {
	a := g.state(ctx, "Signal")
	g.d.mu.Lock()
	defer g.d.mu.Unlock()
	p := a.procs[req.Msg.GetId()]
	if p == nil {
		return nil, noProcess(req.Msg.GetId())
	}
	outcome := sandbox.OutcomeSignaled
	switch {
	case p.res != nil:
		outcome = sandbox.OutcomeAlreadyExited
	case req.Msg.GetSignal() == int32(syscall.SIGKILL):
		p.exit(&pb.ExecResult{ExitCode: 128 + int32(syscall.SIGKILL), Reason: sandbox.ReasonSignaled, Signal: int32(syscall.SIGKILL)})
		outcome = sandbox.OutcomeStopped
	}
	return connect.NewResponse(&pb.SignalResponse{Outcome: outcome}), nil
}

func noProcess(id string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("process %q not found", id))
}
