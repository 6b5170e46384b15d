// This file implements the sbxagent calls behind the daemon's agent tools:
// a PTY session read by cursor (ReadOutput, Resize), the files a command
// changed, a page of a file by line, and an edit by search and replace.

package service

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/internal/agent/process"
)

// maxReadOutputWait bounds one ReadOutput's wait: below the daemon's bound
// on an answer's headers (agentclient's 60 s), which a unary answer sends
// last.
const maxReadOutputWait = 50 * time.Second

// readOutputMargin is what a ReadOutput leaves of its caller's deadline for
// the answer to reach the caller.
const readOutputMargin = 100 * time.Millisecond

func (a agentService) ReadOutput(ctx context.Context, req *connect.Request[pb.ReadOutputRequest]) (*connect.Response[pb.ReadOutputResponse], error) {
	m := req.Msg
	p, err := a.get(m.GetId())
	if err != nil {
		return nil, toConnect(err)
	}
	if m.GetSince() < 0 {
		return nil, toConnect(errInvalid("process %s: cursor %d is negative", p.ID, m.GetSince()))
	}
	if m.GetMaxBytes() < 0 {
		return nil, toConnect(errInvalid("max_bytes %d is negative", m.GetMaxBytes()))
	}
	wait := min(time.Duration(m.GetWaitMs())*time.Millisecond, maxReadOutputWait)
	if dl, ok := ctx.Deadline(); ok {
		// A wait the caller's deadline cuts short answers, empty, in time
		// for the answer to reach it, rather than failing at the deadline.
		wait = min(wait, time.Until(dl)-readOutputMargin)
	}
	linger := time.Duration(m.GetLingerMs()) * time.Millisecond
	c, err := p.ReadOutput(ctx, m.GetSince(), wait, linger, m.GetMaxBytes())
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil, connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	if err != nil {
		return nil, toConnect(err)
	}
	resp := &pb.ReadOutputResponse{Data: c.Data, Start: c.Start, Cursor: c.Cursor, End: c.End, Alive: c.Alive}
	if c.Result != nil {
		resp.Result = execResult(c.Result)
	}
	return connect.NewResponse(resp), nil
}

func (a agentService) Resize(ctx context.Context, req *connect.Request[pb.ResizeRequest]) (*connect.Response[pb.ResizeResponse], error) {
	m := req.Msg
	p, err := a.get(m.GetId())
	if err != nil {
		return nil, toConnect(err)
	}
	if m.GetRows() == 0 || m.GetCols() == 0 || m.GetRows() > 0xffff || m.GetCols() > 0xffff {
		return nil, toConnect(errInvalid("terminal size %dx%d (cols x rows) is not between 1 and 65535 each", m.GetCols(), m.GetRows()))
	}
	if !p.PTY {
		return nil, toConnect(errPrecondition("process %s has no terminal: it was not started with a PTY", p.ID))
	}
	if err := p.Resize(process.Size{Cols: uint16(m.GetCols()), Rows: uint16(m.GetRows())}); err != nil {
		return nil, toConnect(errPrecondition("resizing the terminal of process %s: %v", p.ID, err))
	}
	return connect.NewResponse(&pb.ResizeResponse{}), nil
}

func (a agentService) Changed(ctx context.Context, req *connect.Request[pb.ChangedRequest]) (*connect.Response[pb.ChangedResponse], error) {
	m := req.Msg
	if m.GetSince() == nil {
		return nil, toConnect(errInvalid("since is required"))
	}
	if err := m.GetSince().CheckValid(); err != nil {
		return nil, toConnect(errInvalid("since: %v", err))
	}
	paths, truncated, err := a.s.fs.Changed(m.GetRoot(), m.GetSince().AsTime(), int(m.GetLimit()))
	if err != nil {
		return nil, toConnect(err)
	}
	for i, p := range paths {
		paths[i] = validUTF8(p)
	}
	return connect.NewResponse(&pb.ChangedResponse{Paths: paths, Truncated: truncated}), nil
}

func (a agentService) ReadLines(ctx context.Context, req *connect.Request[pb.ReadLinesRequest]) (*connect.Response[pb.ReadLinesResponse], error) {
	m := req.Msg
	l, err := a.s.fs.ReadLines(m.GetPath(), m.GetOffset(), m.GetLimit(), int(m.GetMaxLineChars()))
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.ReadLinesResponse{Lines: l.Lines, FirstLine: l.FirstLine, Eof: l.EOF,
		CutLines: l.CutLines, TotalLines: l.TotalLines}), nil
}

func (a agentService) EditFile(ctx context.Context, req *connect.Request[pb.EditFileRequest]) (*connect.Response[pb.EditFileResponse], error) {
	m := req.Msg
	r, err := a.s.fs.EditFile(m.GetPath(), m.GetOldString(), m.GetNewString(), m.GetReplaceAll())
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(&pb.EditFileResponse{Replacements: int32(r.Replacements), Exact: r.Exact, Score: r.Score,
		StartLine: r.StartLine, EndLine: r.EndLine, Strategy: r.Strategy}), nil
}
