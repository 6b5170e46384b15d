// This file implements sbxagent.Agent over the remote's envd: health, exec
// and the process calls over the adapter's process table (procs.go); the
// file calls are in files.go, ReadLines and Changed in tools.go. What envd
// offers no way to do exactly is answered unimplemented, naming the method
// and the backend.

package e2b

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	ppb "sbx.dev/sbx/api/agent/process"
	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/ringlog"
)

// agentService serves sbxagent.Agent for the sandbox a request's connection
// was dialled for.
type agentService struct{}

// agentKeepalive is how often a silent exec stream carries a keepalive, as the agent's.
const agentKeepalive = 30 * time.Second

// Bounds the agent applies to a read of the output log.
const (
	maxReadOutputWait = 50 * time.Second
	readOutputMargin  = 100 * time.Millisecond
)

// stdinChunk bounds one SendInput.
const stdinChunk = 256 << 10

// errStdinClosed is the agent's text for a stdin that is closed or absent.
var errStdinClosed = errors.New("stdin not enabled or closed")

func unimplemented(method string) error {
	return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("%s is not implemented by the e2b backend: envd, the only service an E2B server runs in a sandbox, has no call that does it exactly", method))
}

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

func sandboxOf(ctx context.Context) (*remote, error) {
	if r := remoteOf(ctx); r != nil {
		return r, nil
	}
	return nil, connect.NewError(connect.CodeInternal, errors.New("a call on a connection the e2b driver did not dial"))
}

// procOf is the sandbox of ctx's connection and its process id.
func procOf(ctx context.Context, id string) (*remote, *proc, error) {
	r, err := sandboxOf(ctx)
	if err != nil {
		return nil, nil, err
	}
	p, err := r.get(id)
	return r, p, err
}

func (r *remote) get(id string) (*proc, error) {
	if p, ok := r.table.get(id); ok {
		return p, nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process %s", id))
}

func (agentService) Health(ctx context.Context, _ *connect.Request[pb.HealthRequest]) (*connect.Response[pb.HealthResponse], error) {
	r, err := sandboxOf(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.health(ctx); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.HealthResponse{Version: "e2b-adapter", Processes: int32(r.table.running()),
		UptimeMs: time.Since(r.d.opened).Milliseconds()}), nil
}

func (agentService) Exec(ctx context.Context, req *connect.Request[pb.ExecRequest], stream *connect.ServerStream[pb.ExecEvent]) error {
	r, err := sandboxOf(ctx)
	if err != nil {
		return err
	}
	m := req.Msg
	argv := m.GetArgv()
	if len(argv) == 0 || argv[0] == "" {
		return invalid("no command: argv is empty")
	}
	if n := m.GetOutputLogBytes(); n < 0 || n > maxOutputLog {
		return invalid("output_log_bytes %d is not between 0 and %d", n, maxOutputLog)
	}
	limit := m.GetOutputLimitBytes()
	if limit <= 0 {
		limit = r.d.outputLimit
	}
	p := &proc{id: newProcID(), argv: argv, cwd: m.GetCwd(), tag: m.GetTag(), pty: m.GetPty() != nil,
		timeout: time.Duration(m.GetTimeoutMs()) * time.Millisecond, r: r, done: make(chan struct{}),
		out: [2]*capture{newCapture(limit), newCapture(limit)}}
	if n := m.GetOutputLogBytes(); n > 0 {
		p.log = ringlog.New(n)
	}
	// The remote's tag of the process is the adapter's id: the remote's list
	// then says which of its processes are the adapter's.
	sreq := &ppb.StartRequest{Process: &ppb.ProcessConfig{Cmd: argv[0], Args: argv[1:], Envs: m.GetEnv()}, Tag: &p.id}
	if m.GetCwd() != "" {
		cwd := m.GetCwd()
		sreq.Process.Cwd = &cwd
	}
	if m.GetPty() != nil {
		sreq.Pty = &ppb.PTY{Size: &ppb.PTY_Size{Cols: m.GetPty().GetCols(), Rows: m.GetPty().GetRows()}}
	} else {
		p.stdin = len(m.GetStdin()) > 0 || m.GetKeepStdinOpen()
		sreq.Stdin = &p.stdin
	}
	// Subscribed before the start, so a streamed exec misses nothing.
	var s *sub
	switch {
	case !m.GetStream() || m.GetBackground():
	case m.GetStreamBounded():
		s = p.subscribe(false, true)
	default:
		s = p.subscribe(false, false)
	}
	// Written once it started, whether or not this call is still there.
	switch {
	case p.pty:
		p.feed = m.GetStdin() // a terminal stays open
	case p.stdin:
		p.feed, p.feedEOF = m.GetStdin(), !m.GetKeepStdinOpen()
	}
	started := make(chan error, 1)
	r.launch(sreq, p, started)
	select {
	case err = <-started:
	case <-ctx.Done():
		if s != nil {
			p.unsubscribe(s)
		}
		return connect.NewError(connect.CodeCanceled, context.Cause(ctx))
	}
	if err != nil {
		if s != nil {
			p.unsubscribe(s)
		}
		return err
	}
	return follow(ctx, p, s, stream, m.GetBackground())
}

// feed writes a process's stdin from its exec request, then closes it
// unless it is to stay open; it ends with the process.
func (r *remote) feed(p *proc, data []byte, eof bool) {
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := r.writeStdin(ctx, p, data, eof); err != nil && p.resultOrNil() == nil && ctx.Err() == nil {
		r.d.log.Debug("writing a process's stdin", logkey.SandboxID, r.id, logkey.Process, p.id, logkey.Err, err)
	}
}

// writeStdin writes data to p's stdin (its terminal for a PTY) and closes
// it when eof is set (a terminal stays open).
func (r *remote) writeStdin(ctx context.Context, p *proc, data []byte, eof bool) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if (!p.stdin && !p.pty) || p.stdinClosed || p.resultOrNil() != nil {
		return connect.NewError(connect.CodeInternal, errStdinClosed)
	}
	for len(data) > 0 {
		chunk := data[:min(len(data), stdinChunk)]
		data = data[len(chunk):]
		in := &ppb.ProcessInput{Input: &ppb.ProcessInput_Stdin{Stdin: chunk}}
		if p.pty {
			in.Input = &ppb.ProcessInput_Pty{Pty: chunk}
		}
		_, err := r.proc.SendInput(ctx, connect.NewRequest(&ppb.SendInputRequest{Process: pidSelector(p.pid), Input: in}))
		if err != nil {
			return stdinErr(r, p, err)
		}
	}
	if eof && !p.pty {
		_, err := r.proc.CloseStdin(ctx, connect.NewRequest(&ppb.CloseStdinRequest{Process: pidSelector(p.pid)}))
		// The agent writes and closes in one step; here the process may
		// read what was written and exit before the close: its stdin is
		// closed then all the same.
		if c := connect.CodeOf(err); err != nil && c != connect.CodeNotFound && !(c == connect.CodeInternal && strings.Contains(err.Error(), "closed")) {
			return stdinErr(r, p, err)
		}
		p.stdinClosed = true
	}
	return nil
}

// stdinErr is a failed write to a process's stdin: the process gone
// meanwhile is the agent's closed stdin.
func stdinErr(r *remote, p *proc, err error) error {
	if connect.CodeOf(err) == connect.CodeNotFound {
		return connect.NewError(connect.CodeInternal, errStdinClosed)
	}
	return r.remoteErr(err)
}

// follow sends started, then (with s) the output and the result, with
// keepalives, unless background: the agent's event stream.
func follow(ctx context.Context, p *proc, s *sub, stream *connect.ServerStream[pb.ExecEvent], background bool) error {
	if s != nil {
		defer p.unsubscribe(s)
	}
	if err := stream.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Started{Started: &pb.Started{Id: p.id, Pid: p.pid}}}); err != nil || background {
		return err
	}
	var ready <-chan struct{}
	if s != nil {
		ready = s.ready
	}
	drain := func() error {
		if s == nil {
			return nil
		}
		for _, ev := range s.drain() {
			var msg *pb.ExecEvent
			if ev.dropped > 0 {
				msg = &pb.ExecEvent{Event: &pb.ExecEvent_Dropped{Dropped: &pb.Dropped{Stream: pb.Stream(ev.stream), Bytes: ev.dropped}}}
			} else {
				msg = &pb.ExecEvent{Event: &pb.ExecEvent_Output{Output: &pb.Output{Stream: pb.Stream(ev.stream), Data: ev.data}}}
			}
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
		return nil
	}
	ka := time.NewTimer(agentKeepalive)
	defer ka.Stop()
	for {
		select {
		case <-ready:
			if err := drain(); err != nil {
				return err
			}
			ka.Reset(agentKeepalive)
		case <-p.done:
			if err := drain(); err != nil {
				return err
			}
			return stream.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Result{Result: p.result}})
		case <-ka.C:
			if err := stream.Send(&pb.ExecEvent{Event: &pb.ExecEvent_Keepalive{Keepalive: &pb.Keepalive{}}}); err != nil {
				return err
			}
			ka.Reset(agentKeepalive)
		case <-ctx.Done():
			return nil // the caller went; the process goes on
		}
	}
}

func (agentService) Attach(ctx context.Context, req *connect.Request[pb.AttachRequest], stream *connect.ServerStream[pb.ExecEvent]) error {
	_, p, err := procOf(ctx, req.Msg.GetId())
	if err != nil {
		return err
	}
	return follow(ctx, p, p.subscribe(req.Msg.GetReplay(), false), stream, false)
}

func (agentService) Wait(ctx context.Context, req *connect.Request[pb.WaitRequest]) (*connect.Response[pb.ProcessStatus], error) {
	_, p, err := procOf(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	var timeout <-chan time.Time
	if ms := req.Msg.GetTimeoutMs(); ms > 0 {
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-p.done:
	case <-timeout:
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	return connect.NewResponse(p.status()), nil
}

func (agentService) GetProcess(ctx context.Context, req *connect.Request[pb.GetProcessRequest]) (*connect.Response[pb.ProcessStatus], error) {
	_, p, err := procOf(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(p.status()), nil
}

func (agentService) ListProcesses(ctx context.Context, _ *connect.Request[pb.ListProcessesRequest]) (*connect.Response[pb.ListProcessesResponse], error) {
	r, err := sandboxOf(ctx)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListProcessesResponse{}
	for _, p := range r.table.list() {
		resp.Processes = append(resp.Processes, p.status())
	}
	return connect.NewResponse(resp), nil
}

func (agentService) WriteStdin(ctx context.Context, req *connect.Request[pb.WriteStdinRequest]) (*connect.Response[pb.WriteStdinResponse], error) {
	r, p, err := procOf(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	if err := r.writeStdin(ctx, p, req.Msg.GetData(), req.Msg.GetEof()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.WriteStdinResponse{}), nil
}

// Signal outcomes, the agent's.
const (
	outcomeStopped       = "stopped"
	outcomeSignaled      = "signaled"
	outcomeAlreadyExited = "already_exited"
)

// Signal sends SIGKILL or SIGTERM, the signals envd can send. Unlike the
// agent, which kills a process's whole tree on SIGKILL and signals its
// group otherwise, envd signals the process alone.
func (agentService) Signal(ctx context.Context, req *connect.Request[pb.SignalRequest]) (*connect.Response[pb.SignalResponse], error) {
	r, p, err := procOf(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	sig := syscall.Signal(req.Msg.GetSignal())
	switch {
	case sig <= 0 || sig > 64:
		return nil, invalid("signal %d is not a signal number", sig)
	case sig != syscall.SIGKILL && sig != syscall.SIGTERM:
		return nil, connect.NewError(connect.CodeUnimplemented, fmt.Errorf("Signal %d is not implemented by the e2b backend: envd sends SIGTERM (15) and SIGKILL (9) only", sig))
	}
	if p.resultOrNil() != nil {
		return connect.NewResponse(&pb.SignalResponse{Outcome: outcomeAlreadyExited}), nil
	}
	if sig == syscall.SIGKILL {
		p.setKillReason(reasonKilled)
	}
	if err := r.signal(ctx, p.pid, sig); err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			return connect.NewResponse(&pb.SignalResponse{Outcome: outcomeAlreadyExited}), nil
		}
		return nil, r.remoteErr(err)
	}
	out := outcomeSignaled
	if sig == syscall.SIGKILL {
		out = outcomeStopped
	}
	return connect.NewResponse(&pb.SignalResponse{Outcome: out}), nil
}

func (agentService) ReadOutput(ctx context.Context, req *connect.Request[pb.ReadOutputRequest]) (*connect.Response[pb.ReadOutputResponse], error) {
	m := req.Msg
	_, p, err := procOf(ctx, m.GetId())
	if err != nil {
		return nil, err
	}
	if m.GetSince() < 0 {
		return nil, invalid("process %s: cursor %d is negative", p.id, m.GetSince())
	}
	if m.GetMaxBytes() < 0 {
		return nil, invalid("max_bytes %d is negative", m.GetMaxBytes())
	}
	wait := min(time.Duration(m.GetWaitMs())*time.Millisecond, maxReadOutputWait)
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)-readOutputMargin)
	}
	resp, err := p.readOutput(ctx, m.GetSince(), wait, time.Duration(m.GetLingerMs())*time.Millisecond, m.GetMaxBytes())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// readOutput is the agent's ReadOutput over p's output log.
func (p *proc) readOutput(ctx context.Context, since int64, wait, linger time.Duration, maxBytes int64) (*pb.ReadOutputResponse, error) {
	deadline := time.Now().Add(max(wait, 0))
	if maxBytes <= 0 {
		maxBytes = defaultReadOutput
	}
	maxBytes = min(maxBytes, maxReadOutput)
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.log
	if l == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %s: not started with an output log", p.id))
	}
	if since > l.End() {
		return nil, invalid("process %s: cursor %d is past the end of the output (%d)", p.id, since, l.End())
	}
	ch, err := l.Next(ctx, &p.mu, since, maxBytes, linger, deadline, func(err error) error {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	})
	if err != nil {
		return nil, err
	}
	resp := &pb.ReadOutputResponse{Data: ch.Data, Start: ch.Start, End: ch.End, Alive: ch.Alive}
	resp.Cursor = resp.Start + int64(len(resp.Data))
	if !ch.Alive {
		resp.Result = p.result
	}
	return resp, nil
}

func (agentService) Resize(ctx context.Context, req *connect.Request[pb.ResizeRequest]) (*connect.Response[pb.ResizeResponse], error) {
	m := req.Msg
	r, p, err := procOf(ctx, m.GetId())
	if err != nil {
		return nil, err
	}
	if m.GetRows() == 0 || m.GetCols() == 0 || m.GetRows() > 0xffff || m.GetCols() > 0xffff {
		return nil, invalid("terminal size %dx%d (cols x rows) is not between 1 and 65535 each", m.GetCols(), m.GetRows())
	}
	if !p.pty {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %s has no terminal: it was not started with a PTY", p.id))
	}
	if p.resultOrNil() != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("resizing the terminal of process %s: process has exited", p.id))
	}
	_, err = r.proc.Update(ctx, connect.NewRequest(&ppb.UpdateRequest{Process: pidSelector(p.pid),
		Pty: &ppb.PTY{Size: &ppb.PTY_Size{Cols: m.GetCols(), Rows: m.GetRows()}}}))
	if err != nil {
		return nil, r.remoteErr(err)
	}
	return connect.NewResponse(&pb.ResizeResponse{}), nil
}

func (agentService) Glob(context.Context, *connect.Request[pb.GlobRequest]) (*connect.Response[pb.GlobResponse], error) {
	return nil, unimplemented("Glob")
}

func (agentService) Grep(context.Context, *connect.Request[pb.GrepRequest]) (*connect.Response[pb.GrepResponse], error) {
	return nil, unimplemented("Grep")
}
