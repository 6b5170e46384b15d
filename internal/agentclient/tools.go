package agentclient

import (
	"context"
	"math"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/internal/sandbox"
)

// ReadOutput reads the output log of process pid (started with
// ExecRequest.OutputLogBytes) from offset since on (0: the oldest byte it
// holds): at most maxBytes (0: 1 MiB; at most 16 MiB), waiting up to wait
// (at most 50 s) when nothing is there yet after since, and, once something
// is, lingering while more follows within linger of the previous chunk. The
// chunk's Cursor is the next read's since; its Start is past since when the
// log dropped what came between.
func (c *Client) ReadOutput(ctx context.Context, pid string, since int64, wait, linger time.Duration, maxBytes int64) (sandbox.OutputChunk, error) {
	resp, err := rpcs().agent.ReadOutput(c.bind(ctx), connect.NewRequest(&pb.ReadOutputRequest{Id: pid, Since: since,
		WaitMs: clampMs(wait), LingerMs: clampMs(linger), MaxBytes: maxBytes}))
	if err != nil {
		return sandbox.OutputChunk{}, c.wrap("read_output", err)
	}
	m := resp.Msg
	out := sandbox.OutputChunk{Data: m.GetData(), Start: m.GetStart(), Cursor: m.GetCursor(), End: m.GetEnd(), Alive: m.GetAlive()}
	if m.GetResult() != nil {
		out.Result = execResult(m.GetResult())
		out.Result.ProcessID = pid
	}
	return out, nil
}

// Changed lists the regular files under root (empty: the workdir) whose
// mtime or ctime is at or after since, sorted, at most limit (0: 1000); the
// bool reports an incomplete list. File timestamps lag the real time by up
// to a jiffy: for what a command wrote, take since just before starting it,
// minus a margin (20 ms).
func (c *Client) Changed(ctx context.Context, root string, since time.Time, limit int) ([]string, bool, error) {
	resp, err := rpcs().agent.Changed(c.bind(ctx), connect.NewRequest(&pb.ChangedRequest{Root: root, Since: timestamppb.New(since),
		Limit: int32(min(limit, math.MaxInt32))}))
	if err != nil {
		return nil, false, c.wrap("changed", err)
	}
	return resp.Msg.GetPaths(), resp.Msg.GetTruncated(), nil
}

// ReadLines reads up to limit lines (0: 2000) of a text file from the
// 0-based line offset on, each cut to maxLineChars characters (0: 2000).
func (c *Client) ReadLines(ctx context.Context, path string, offset, limit int64, maxLineChars int) (sandbox.Lines, error) {
	resp, err := rpcs().agent.ReadLines(c.bind(ctx), connect.NewRequest(&pb.ReadLinesRequest{Path: path, Offset: offset, Limit: limit,
		MaxLineChars: int32(min(maxLineChars, math.MaxInt32))}))
	if err != nil {
		return sandbox.Lines{}, c.wrap("read_lines", err)
	}
	m := resp.Msg
	return sandbox.Lines{Lines: m.GetLines(), FirstLine: m.GetFirstLine(), EOF: m.GetEof(), CutLines: m.GetCutLines(),
		TotalLines: m.GetTotalLines()}, nil
}

// EditFile replaces old with new in a file: exactly, or in the one region
// that matches old closely enough (see EditResult.Strategy).
func (c *Client) EditFile(ctx context.Context, path, old, new string, replaceAll bool) (sandbox.EditResult, error) {
	resp, err := rpcs().agent.EditFile(c.bind(ctx), connect.NewRequest(&pb.EditFileRequest{Path: path, OldString: old, NewString: new,
		ReplaceAll: replaceAll}))
	if err != nil {
		return sandbox.EditResult{}, c.wrap("edit_file", err)
	}
	m := resp.Msg
	return sandbox.EditResult{Replacements: int(m.GetReplacements()), Exact: m.GetExact(), Score: m.GetScore(),
		StartLine: m.GetStartLine(), EndLine: m.GetEndLine(), Strategy: m.GetStrategy()}, nil
}
