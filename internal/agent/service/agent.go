// This file implements sbxagent.Agent: exec and process calls over the shared
// table, and the file calls envd has no RPC for.

package service

import (
	"context"
	"os"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/internal/agent/files"
	"sbx.dev/sbx/internal/agent/process"
)

type agentService struct{ s *Server }

// agentKeepalive is how often a silent exec stream carries a keepalive.
const agentKeepalive = 30 * time.Second

func (a agentService) Health(ctx context.Context, req *connect.Request[pb.HealthRequest]) (*connect.Response[pb.HealthResponse], error) {
	if req.Msg.GetWarm() {
		a.s.Warm()
	}
	return connect.NewResponse(&pb.HealthResponse{
		Version:   a.s.cfg.Version,
		Pid:       uint32(os.Getpid()),
		UptimeMs:  time.Since(a.s.started).Milliseconds(),
		TreeKill:  a.s.table.TreeKill(),
		Processes: int32(a.s.table.Running()),
	}), nil
}

func (a agentService) get(id string) (*process.Proc, error) {
	if p, ok := a.s.table.Get(id); ok {
		return p, nil
	}
	return nil, errNotFound("process %s", id)
}

func (a agentService) Exec(ctx context.Context, req *connect.Request[pb.ExecRequest], stream *connect.ServerStream[pb.ExecEvent]) error {
	m := req.Msg
	spec := process.Spec{Argv: m.GetArgv(), Cwd: m.GetCwd(), Envs: m.GetEnv(), Stdin: len(m.GetStdin()) > 0 || m.GetKeepStdinOpen(),
		Tag: m.GetTag(), Timeout: time.Duration(m.GetTimeoutMs()) * time.Millisecond, OutputLimitBytes: m.GetOutputLimitBytes(),
		NoSpill: m.GetStream() && !m.GetStreamBounded() && !m.GetBackground(), OutputLogBytes: m.GetOutputLogBytes()}
	if n := m.GetOutputLogBytes(); n < 0 || n > process.MaxOutputLog {
		return toConnect(errInvalid("output_log_bytes %d is not between 0 and %d", n, process.MaxOutputLog))
	}
	if m.GetPty() != nil {
		spec.PTY = &process.Size{Cols: uint16(m.GetPty().GetCols()), Rows: uint16(m.GetPty().GetRows())}
	}
	p, err := a.s.start(spec)
	if err != nil {
		return toConnect(err)
	}
	if data := m.GetStdin(); len(data) > 0 {
		go func() { // the process may read its stdin late, or never: stop when it ends
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				select {
				case <-p.Done():
					cancel()
				case <-ctx.Done():
				}
			}()
			p.WriteStdin(ctx, data, !m.GetKeepStdinOpen())
		}()
	}
	var sub *process.Sub
	switch {
	case !m.GetStream() || m.GetBackground():
	case m.GetStreamBounded():
		sub = p.SubscribeBounded(true)
	default:
		sub = p.Subscribe(true)
	}
	return a.follow(ctx, p, sub, stream, m.GetBackground())
}

// follow sends started, output (with sub), and the result unless background.
// A caller that takes no output (no sub) gets started with the result when
// the process ends within startedHold, in one write.
func (a agentService) follow(ctx context.Context, p *process.Proc, sub *process.Sub, stream *connect.ServerStream[pb.ExecEvent], background bool) error {
	collect := sub == nil && !background
	if collect {
		hold(ctx)
	}
	if err := stream.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Started{Started: &pb.Started{Id: p.ID, Pid: uint32(p.Pid)}}}); err != nil || background {
		if sub != nil {
			p.Unsubscribe(sub)
		}
		return err
	}
	if collect {
		t := time.NewTimer(startedHold)
		select {
		case <-p.Done():
		case <-t.C:
			release(ctx)
		case <-ctx.Done():
		}
		t.Stop()
	}
	ended, err := follow(ctx, p, sub, agentKeepalive, func(ev process.Event) error {
		if ev.Dropped > 0 {
			return stream.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Dropped{Dropped: &pb.Dropped{Stream: pb.Stream(ev.Stream), Bytes: ev.Dropped}}})
		}
		return stream.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Output{Output: &pb.Output{Stream: pb.Stream(ev.Stream), Data: ev.Data}}})
	}, func() error {
		return stream.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Keepalive{Keepalive: &pb.Keepalive{}}})
	})
	if err != nil || !ended {
		return err
	}
	hold(ctx) // the result, the stream's end and the body's end in one write
	return stream.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Result{Result: execResult(p.Result())}})
}

func execResult(r *process.Result) *pb.ExecResult {
	return &pb.ExecResult{
		ExitCode: int32(r.ExitCode), Reason: r.Reason, Signal: int32(r.Signal), DurationMs: r.Duration.Milliseconds(),
		Stdout: r.Stdout, Stderr: r.Stderr, Truncated: r.Truncated,
		StdoutDropped: r.StdoutDropped, StderrDropped: r.StderrDropped,
		StdoutPath: r.StdoutPath, StderrPath: r.StderrPath,
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
	}
}

func (a agentService) Attach(ctx context.Context, req *connect.Request[pb.AttachRequest], stream *connect.ServerStream[pb.ExecEvent]) error {
	p, err := a.get(req.Msg.GetId())
	if err != nil {
		return toConnect(err)
	}
	return a.follow(ctx, p, p.Subscribe(req.Msg.GetReplay()), stream, false)
}

func status(p *process.Proc) *pb.ProcessStatus {
	st := &pb.ProcessStatus{Id: p.ID, Pid: uint32(p.Pid), Argv: p.Argv, Cwd: p.Cwd, State: "running",
		StartedAt: timestamppb.New(p.StartedAt), Tag: p.Tag, Pty: p.PTY}
	if r := p.Result(); r != nil {
		st.State, st.Result = "exited", execResult(r)
	}
	return st
}

func (a agentService) Wait(ctx context.Context, req *connect.Request[pb.WaitRequest]) (*connect.Response[pb.ProcessStatus], error) {
	p, err := a.get(req.Msg.GetId())
	if err != nil {
		return nil, toConnect(err)
	}
	var timeout <-chan time.Time
	if ms := req.Msg.GetTimeoutMs(); ms > 0 {
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-p.Done():
	case <-timeout:
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	return connect.NewResponse(status(p)), nil
}

func (a agentService) GetProcess(ctx context.Context, req *connect.Request[pb.GetProcessRequest]) (*connect.Response[pb.ProcessStatus], error) {
	p, err := a.get(req.Msg.GetId())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(status(p)), nil
}

func (a agentService) ListProcesses(ctx context.Context, _ *connect.Request[pb.ListProcessesRequest]) (*connect.Response[pb.ListProcessesResponse], error) {
	resp := &pb.ListProcessesResponse{}
	for _, p := range a.s.table.List() {
		resp.Processes = append(resp.Processes, status(p))
	}
	return connect.NewResponse(resp), nil
}

func (a agentService) WriteStdin(ctx context.Context, req *connect.Request[pb.WriteStdinRequest]) (*connect.Response[pb.WriteStdinResponse], error) {
	p, err := a.get(req.Msg.GetId())
	if err != nil {
		return nil, toConnect(err)
	}
	if err := p.WriteStdin(ctx, req.Msg.GetData(), req.Msg.GetEof()); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.WriteStdinResponse{}), nil
}

// Signal outcomes.
const (
	outcomeStopped       = "stopped"
	outcomeSignaled      = "signaled"
	outcomeAlreadyExited = "already_exited"
)

func (a agentService) Signal(ctx context.Context, req *connect.Request[pb.SignalRequest]) (*connect.Response[pb.SignalResponse], error) {
	p, err := a.get(req.Msg.GetId())
	if err != nil {
		return nil, toConnect(err)
	}
	sig := syscall.Signal(req.Msg.GetSignal())
	if sig <= 0 || sig > 64 {
		return nil, toConnect(errInvalid("signal %d is not a signal number", sig))
	}
	already, err := p.Signal(sig)
	if err != nil {
		return nil, toConnect(err)
	}
	out := outcomeSignaled
	switch {
	case already:
		out = outcomeAlreadyExited
	case sig == syscall.SIGKILL:
		out = outcomeStopped
	}
	return connect.NewResponse(&pb.SignalResponse{Outcome: out}), nil
}

func (a agentService) ReadFile(ctx context.Context, req *connect.Request[pb.ReadFileRequest]) (*connect.Response[pb.ReadFileResponse], error) {
	r, err := a.s.fs.ReadFile(req.Msg.GetPath(), req.Msg.GetOffset(), req.Msg.GetLimit())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.ReadFileResponse{Path: r.Path, Content: r.Content, Size: r.Size, Eof: r.EOF}), nil
}

func (a agentService) WriteFile(ctx context.Context, req *connect.Request[pb.WriteFileRequest]) (*connect.Response[pb.WriteFileResponse], error) {
	in, err := a.s.fs.WriteFile(req.Msg.GetPath(), req.Msg.GetContent(), os.FileMode(req.Msg.GetMode()&0o7777), req.Msg.GetAppend())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.WriteFileResponse{Entry: entry(in)}), nil
}

func (a agentService) Glob(ctx context.Context, req *connect.Request[pb.GlobRequest]) (*connect.Response[pb.GlobResponse], error) {
	paths, truncated, err := a.s.fs.Glob(req.Msg.GetPattern(), req.Msg.GetPath(), int(req.Msg.GetLimit()))
	if err != nil {
		return nil, toConnect(err)
	}
	for i, p := range paths {
		paths[i] = validUTF8(p)
	}
	return connect.NewResponse(&pb.GlobResponse{Paths: paths, Truncated: truncated}), nil
}

func (a agentService) Grep(ctx context.Context, req *connect.Request[pb.GrepRequest]) (*connect.Response[pb.GrepResponse], error) {
	m := req.Msg
	matches, truncated, err := a.s.fs.Grep(files.GrepRequest{Pattern: m.GetPattern(), Path: m.GetPath(), Include: m.GetInclude(),
		IgnoreCase: m.GetIgnoreCase(), Fixed: m.GetFixed(), Limit: int(m.GetLimit()), Mode: m.GetMode(), Glob: m.GetGlob()})
	if err != nil {
		return nil, toConnect(err)
	}
	resp := &pb.GrepResponse{Truncated: truncated, Matches: make([]*pb.GrepMatch, 0, len(matches))}
	for _, mt := range matches {
		resp.Matches = append(resp.Matches, &pb.GrepMatch{Path: validUTF8(mt.Path), Line: mt.Line, Text: mt.Text, Count: mt.Count})
	}
	return connect.NewResponse(resp), nil
}
