// This file implements envd's process.Process over the agent's table.

package service

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"connectrpc.com/connect"

	pb "sbx.dev/sbx/api/agent/process"
	"sbx.dev/sbx/internal/agent/process"
)

type envdProcess struct{ s *Server }

// envdKeepalive is envd's keepalive interval when the client names none.
const envdKeepalive = 90 * time.Second

func (e envdProcess) lookup(sel *pb.ProcessSelector) (*process.Proc, error) {
	switch {
	case sel == nil:
		return nil, errInvalid("process selector is required")
	case sel.GetTag() != "":
		if p, ok := e.s.table.ByTag(sel.GetTag()); ok {
			return p, nil
		}
		return nil, errNotFound("process with tag %s not found", sel.GetTag())
	default:
		if p, ok := e.s.table.ByPid(int(sel.GetPid())); ok {
			return p, nil
		}
		return nil, errNotFound("process with pid %d not found", sel.GetPid())
	}
}

func (e envdProcess) List(ctx context.Context, _ *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	resp := &pb.ListResponse{}
	for _, p := range e.s.table.List() {
		if !p.Running() || p.Pid == 0 {
			continue
		}
		resp.Processes = append(resp.Processes, processInfo(p))
	}
	return connect.NewResponse(resp), nil
}

func processInfo(p *process.Proc) *pb.ProcessInfo {
	cwd := p.Cwd
	info := &pb.ProcessInfo{Pid: uint32(p.Pid), Config: &pb.ProcessConfig{Cmd: p.Argv[0], Args: p.Argv[1:], Envs: p.Envs, Cwd: &cwd}}
	if p.Tag != "" {
		tag := p.Tag
		info.Tag = &tag
	}
	return info
}

func (e envdProcess) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	cfg := req.Msg.GetProcess()
	if cfg == nil || cfg.GetCmd() == "" {
		return toConnect(errInvalid("process.cmd is required"))
	}
	// Followed from the start, completely: no spill file.
	spec := process.Spec{Argv: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Cwd: cfg.GetCwd(), Envs: cfg.GetEnvs(),
		Stdin: req.Msg.Stdin == nil || req.Msg.GetStdin(), Tag: req.Msg.GetTag(), NoSpill: true}
	if req.Msg.Pty != nil {
		sz := req.Msg.GetPty().GetSize()
		spec.PTY = &process.Size{Cols: uint16(sz.GetCols()), Rows: uint16(sz.GetRows())}
	}
	if dl, ok := ctx.Deadline(); ok { // Connect-Timeout-Ms is the process's lifetime
		spec.Timeout = max(time.Until(dl), time.Millisecond)
	}
	p, err := e.s.start(spec)
	if err != nil {
		return toConnect(err)
	}
	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.StartResponse{Event: ev}) }
	return e.follow(ctx, p, p.Subscribe(true), send, keepaliveInterval(req.Header(), envdKeepalive))
}

func (e envdProcess) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := e.lookup(req.Msg.GetProcess())
	if err != nil {
		return toConnect(err)
	}
	var sub *process.Sub
	if p.Running() {
		sub = p.Subscribe(false) // envd replays nothing: new output only
	}
	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.ConnectResponse{Event: ev}) }
	return e.follow(ctx, p, sub, send, keepaliveInterval(req.Header(), envdKeepalive))
}

// follow sends start, data, and exactly one end event, with keepalives.
func (e envdProcess) follow(ctx context.Context, p *process.Proc, sub *process.Sub, send func(*pb.ProcessEvent) error, interval time.Duration) error {
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: uint32(p.Pid)}}}); err != nil {
		if sub != nil {
			p.Unsubscribe(sub)
		}
		return err
	}
	ended, err := follow(ctx, p, sub, interval, func(ev process.Event) error {
		if ev.Dropped > 0 { // envd has no such event: said in the stream itself
			ev.Data = fmt.Appendf(nil, "\n[sbx: %d bytes dropped]\n", ev.Dropped)
		}
		d := &pb.ProcessEvent_DataEvent{}
		switch {
		case p.PTY:
			d.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: ev.Data}
		case ev.Stream == process.Stderr:
			d.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: ev.Data}
		default:
			d.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: ev.Data}
		}
		return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}})
	}, func() error {
		return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}})
	})
	if err != nil || !ended {
		return err
	}
	hold(ctx) // the end event, the stream's end and the body's end in one write
	return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: endEvent(p.Result())}})
}

// endEvent renders a result as envd does, from Go's ProcessState strings.
func endEvent(r *process.Result) *pb.ProcessEvent_EndEvent {
	if r.Signal != 0 {
		status := "signal: " + syscall.Signal(r.Signal).String()
		return &pb.ProcessEvent_EndEvent{ExitCode: -1, Exited: false, Status: status, Error: &status}
	}
	status := fmt.Sprintf("exit status %d", r.ExitCode)
	end := &pb.ProcessEvent_EndEvent{ExitCode: int32(r.ExitCode), Exited: true, Status: status}
	if r.ExitCode != 0 {
		end.Error = &status
	}
	return end
}

func (e envdProcess) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := e.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, toConnect(err)
	}
	if req.Msg.Pty != nil {
		sz := req.Msg.GetPty().GetSize()
		if err := p.Resize(process.Size{Cols: uint16(sz.GetCols()), Rows: uint16(sz.GetRows())}); err != nil {
			return nil, toConnect(errInvalid("resizing process %d: %v", p.Pid, err))
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

func (e envdProcess) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *process.Proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			found, err := e.lookup(ev.Start.GetProcess())
			if err != nil {
				return nil, toConnect(err)
			}
			p = found
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, toConnect(errInvalid("data before start"))
			}
			if err := writeInput(ctx, p, ev.Data.GetInput()); err != nil {
				return nil, toConnect(err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func writeInput(ctx context.Context, p *process.Proc, in *pb.ProcessInput) error {
	switch {
	case in.GetPty() != nil:
		if !p.PTY {
			return process.ErrStdinClosed
		}
		return p.WriteStdin(ctx, in.GetPty(), false)
	default:
		if p.PTY {
			return process.ErrStdinClosed
		}
		return p.WriteStdin(ctx, in.GetStdin(), false)
	}
}

func (e envdProcess) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := e.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, toConnect(err)
	}
	if err := writeInput(ctx, p, req.Msg.GetInput()); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func (e envdProcess) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	p, err := e.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, toConnect(err)
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("signal %s is not supported", req.Msg.GetSignal()))
	}
	exited, err := p.Signal(sig)
	if err != nil {
		return nil, toConnect(err)
	}
	if exited { // envd forgets a process once it has exited: kill() answers false
		return nil, toConnect(errNotFound("process with pid %d not found: it has exited", p.Pid))
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

func (e envdProcess) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := e.lookup(req.Msg.GetProcess())
	if err != nil {
		return nil, toConnect(err)
	}
	if err := p.CloseStdin(); err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}
