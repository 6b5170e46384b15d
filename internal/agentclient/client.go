// Package agentclient is the daemon's side of the agent protocol: typed Connect
// clients over a connection a backend hands out, with agent errors mapped back to
// the sandbox error classes. Everything the agent sends is untrusted: replies are
// bounded in size and time.
package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	fspb "sbx.dev/sbx/api/agent/filesystem"
	"sbx.dev/sbx/api/agent/filesystem/filesystemconnect"
	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/api/agent/sbxagent/sbxagentconnect"
	"sbx.dev/sbx/internal/protocodec"
	"sbx.dev/sbx/internal/sandbox"
)

// maxReplyBytes bounds one message from the agent.
const maxReplyBytes = 64 << 20

const baseURL = "http://agent"

// Client talks to one sandbox's agent. It is safe for concurrent use.
type Client struct {
	id sandbox.ID
	tr *http.Transport
	hc *http.Client
	// lost ends, with the reason as its cause, when Lose is called: every call
	// in flight ends then, and every later one fails at once.
	lost context.Context
	lose context.CancelCauseFunc
}

// rpcs are the Connect clients of the agent's services, one set for every
// sandbox: each call reaches its sandbox's agent through the Client its
// context carries (Client.bind, route). Building them costs a URL parse,
// options and a schema lookup for each of the services' methods, which a
// set per sandbox paid at every create.
var rpcs = sync.OnceValue(func() (r struct {
	agent sbxagentconnect.AgentClient
	fs    filesystemconnect.FilesystemClient
}) {
	hc := &http.Client{Transport: route{}}
	// No compression over a local socket: it costs CPU on every call.
	// protocodec: encoding without reflection; the agent is untrusted, so
	// its replies are decoded with protobuf's own checks.
	opts := []connect.ClientOption{connect.WithReadMaxBytes(maxReplyBytes), connect.WithAcceptCompression("gzip", nil, nil), connect.WithCodec(protocodec.Codec{Untrusted: true})}
	r.agent = sbxagentconnect.NewAgentClient(hc, baseURL, opts...)
	r.fs = filesystemconnect.NewFilesystemClient(hc, baseURL, opts...)
	return r
})

type clientKey struct{}

// bind returns ctx carrying c, for a call through rpcs.
func (c *Client) bind(ctx context.Context) context.Context {
	return context.WithValue(ctx, clientKey{}, c)
}

// route sends each request of rpcs through the HTTP client of the Client its
// context carries.
type route struct{}

func (route) RoundTrip(req *http.Request) (*http.Response, error) {
	c, ok := req.Context().Value(clientKey{}).(*Client)
	if !ok {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errors.New("agentclient: a call without its sandbox's client")
	}
	return c.hc.Transport.RoundTrip(req)
}

// New returns a client for sandbox id that reaches its agent through dial.
func New(id sandbox.ID, dial func(context.Context) (net.Conn, error)) *Client {
	tr := &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConns:        16,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		// Response headers come at once; a silent agent is bounded here. Stream
		// bodies are bounded by the caller's ctx.
		ResponseHeaderTimeout: 60 * time.Second,
	}
	lost, lose := context.WithCancelCause(context.Background())
	hc := &http.Client{Transport: &lossTransport{base: tr, lost: lost}}
	return &Client{id: id, tr: tr, hc: hc, lost: lost, lose: lose}
}

// HTTP returns the client's HTTP client onto the agent: its requests reach
// the agent whatever their URL's host, and end when the agent is lost.
func (c *Client) HTTP() *http.Client { return c.hc }

// Close drops idle connections.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// Lose marks the agent lost for why (a sentence saying how it was lost): calls
// in flight end, and this and every later call fail with sandbox.ErrAgentLost
// naming why. The first reason given stays. Safe to call more than once.
func (c *Client) Lose(why string) {
	c.lose(errors.New(why))
	c.tr.CloseIdleConnections()
}

// lossTransport ends each request, its response body included, when the
// client's agent is declared lost: a hung agent must not hold a call forever.
type lossTransport struct {
	base http.RoundTripper
	lost context.Context
}

func (t *lossTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.lost.Err() != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, context.Cause(t.lost)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	stop := context.AfterFunc(t.lost, func() { cancel(context.Cause(t.lost)) })
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		stop()
		cancel(nil)
		return nil, err
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: func() { stop(); cancel(nil) }}
	return resp, nil
}

// releasingBody runs release once the body is closed.
type releasingBody struct {
	io.ReadCloser
	release func()
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.release()
	return err
}

// broken reports whether err says the connection to the agent broke (the
// agent's end went away mid-call) rather than the agent answering an error.
func broken(err error) bool {
	for _, e := range []error{io.ErrUnexpectedEOF, syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.EPIPE, syscall.ENOENT, net.ErrClosed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// wrap is the only place an agent error becomes a sandbox error: the Connect
// code picks the class, the agent's message says what.
func (c *Client) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *sandbox.Error
	if errors.As(err, &se) {
		return err
	}
	if c.lost.Err() != nil {
		return &sandbox.Error{Op: op, ID: c.id, Err: fmt.Errorf("%w: %v", sandbox.ErrAgentLost, context.Cause(c.lost))}
	}
	if broken(err) {
		return &sandbox.Error{Op: op, ID: c.id, Err: fmt.Errorf("%w: the connection to the agent broke: %v", sandbox.ErrAgentLost, err)}
	}
	if errors.Is(err, context.Canceled) && connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		return &sandbox.Error{Op: op, ID: c.id, Err: err}
	}
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	var class error
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		class = sandbox.ErrNotFound
	case connect.CodeAlreadyExists:
		class = sandbox.ErrExists
	case connect.CodeInvalidArgument:
		class = sandbox.ErrInvalid
	case connect.CodeFailedPrecondition:
		class = sandbox.ErrWrongState
	case connect.CodePermissionDenied:
		class = sandbox.ErrDenied
	case connect.CodeResourceExhausted:
		class = sandbox.ErrLimit
	case connect.CodeOutOfRange:
		class = sandbox.ErrTooLarge
	case connect.CodeDeadlineExceeded:
		class = sandbox.ErrTimeout
	case connect.CodeUnimplemented:
		class = errors.ErrUnsupported
	case connect.CodeUnauthenticated:
		class = sandbox.ErrUnauthenticated
	case connect.CodeUnavailable:
		class = sandbox.ErrAgentLost // the agent cannot be reached
	default:
		return &sandbox.Error{Op: op, ID: c.id, Err: fmt.Errorf("agent: %s", msg)}
	}
	return &sandbox.Error{Op: op, ID: c.id, Err: fmt.Errorf("%w: %s", class, msg)}
}

// Health returns nil once the agent serves.
func (c *Client) Health(ctx context.Context) error {
	_, err := rpcs().agent.Health(c.bind(ctx), connect.NewRequest(&pb.HealthRequest{}))
	return c.wrap("health", err)
}

// Warm asks the agent to finish its warm-up, a first process included
// (one no caller sees), and returns once it has: for a sandbox kept ahead
// of demand, whose first exec then pays none of it.
func (c *Client) Warm(ctx context.Context) error {
	_, err := rpcs().agent.Health(c.bind(ctx), connect.NewRequest(&pb.HealthRequest{Warm: true}))
	return c.wrap("warm", err)
}

// HealthInfo returns what the agent reports about itself.
func (c *Client) HealthInfo(ctx context.Context) (*pb.HealthResponse, error) {
	resp, err := rpcs().agent.Health(c.bind(ctx), connect.NewRequest(&pb.HealthRequest{}))
	if err != nil {
		return nil, c.wrap("health", err)
	}
	return resp.Msg, nil
}

// WaitReady polls Health until it answers or ctx ends.
func (c *Client) WaitReady(ctx context.Context) error {
	delay := 500 * time.Microsecond
	for {
		err := c.Health(ctx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return &sandbox.Error{Op: "health", ID: c.id, Err: fmt.Errorf("%w: waiting for the agent: %v (last: %v)", sandbox.ErrTimeout, context.Cause(ctx), err)}
		case <-t.C:
		}
		delay = min(delay*2, 50*time.Millisecond)
	}
}

func clampMs(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	return uint32(min(d.Milliseconds(), math.MaxUint32))
}

// Exec runs req (already admitted) and blocks until it ends, calling onEvent (may
// be nil) for each event, output included when stream is set. With req.Background
// it returns after the start event with a nil result and the process info in
// the Started event. A failing onEvent stops following; the process goes on.
func (c *Client) Exec(ctx context.Context, req sandbox.ExecRequest, stream bool, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	const op = "exec"
	msg := &pb.ExecRequest{Argv: req.Command(), Cwd: req.Cwd, Env: req.Env, Stdin: req.Stdin,
		KeepStdinOpen: req.KeepStdinOpen, TimeoutMs: clampMs(req.Timeout), Background: req.Background,
		Stream: stream, StreamBounded: req.StreamBounded, OutputLimitBytes: req.OutputLimitBytes, Tag: req.Tag,
		OutputLogBytes: req.OutputLogBytes}
	if req.Pty != nil {
		msg.Pty = &pb.PtySize{Rows: uint32(req.Pty.Rows), Cols: uint32(req.Pty.Cols)}
	}
	if req.Timeout > 0 && msg.TimeoutMs == 0 {
		msg.TimeoutMs = 1
	}
	st, err := rpcs().agent.Exec(c.bind(ctx), connect.NewRequest(msg))
	if err != nil {
		return nil, c.wrap(op, err)
	}
	info := sandbox.ProcessInfo{Argv: msg.Argv, Cwd: req.Cwd, Tag: req.Tag, Running: true}
	return c.follow(op, st, info, req.Background, onEvent)
}

// Attach follows process pid (an agent process id), replaying buffered output
// first when replay is set, until it exits; it returns the result.
func (c *Client) Attach(ctx context.Context, pid string, replay bool, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	const op = "attach"
	st, err := rpcs().agent.Attach(c.bind(ctx), connect.NewRequest(&pb.AttachRequest{Id: pid, Replay: replay}))
	if err != nil {
		return nil, c.wrap(op, err)
	}
	return c.follow(op, st, sandbox.ProcessInfo{Running: true}, false, onEvent)
}

func (c *Client) follow(op string, st *connect.ServerStreamForClient[pb.ExecEvent], info sandbox.ProcessInfo, background bool, onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error) {
	defer st.Close()
	emit := func(ev sandbox.ExecEvent) error {
		if onEvent == nil {
			return nil
		}
		return onEvent(ev)
	}
	conn, err := st.Conn()
	if err != nil {
		return nil, c.wrap(op, err)
	}
	events := eventReader{conn: conn}
	started := false
	for {
		msg, err := events.next()
		if errEnd(err) {
			break
		}
		if err != nil {
			return nil, c.wrap(op, err)
		}
		switch ev := msg.GetEvent().(type) {
		case *pb.ExecEvent_Started:
			started = true
			info.ID, info.PID, info.StartedAt = ev.Started.GetId(), int(ev.Started.GetPid()), time.Now()
			if err := emit(sandbox.ExecEvent{Started: &info}); err != nil {
				return nil, err
			}
			if background {
				return nil, nil
			}
		case *pb.ExecEvent_Output:
			e := sandbox.ExecEvent{Stdout: ev.Output.GetData()}
			if ev.Output.GetStream() == pb.Stream_STREAM_STDERR {
				e = sandbox.ExecEvent{Stderr: ev.Output.GetData()}
			}
			if err := emit(e); err != nil {
				return nil, err
			}
		case *pb.ExecEvent_Dropped:
			d := &sandbox.Dropped{Stream: "stdout", Bytes: ev.Dropped.GetBytes()}
			if ev.Dropped.GetStream() == pb.Stream_STREAM_STDERR {
				d.Stream = "stderr"
			}
			if err := emit(sandbox.ExecEvent{Dropped: d}); err != nil {
				return nil, err
			}
		case *pb.ExecEvent_Result:
			if !started {
				return nil, &sandbox.Error{Op: op, ID: c.id, Err: fmt.Errorf("%w: the agent sent a result before the start event", sandbox.ErrAgentLost)}
			}
			res := execResult(ev.Result)
			res.ProcessID, res.PID = info.ID, info.PID
			drain(st)
			if err := emit(sandbox.ExecEvent{Result: res}); err != nil {
				return nil, err
			}
			return res, nil
		}
	}
	return nil, &sandbox.Error{Op: op, ID: c.id, Err: fmt.Errorf("%w: the agent ended the stream without a result", sandbox.ErrAgentLost)}
}

// drain reads the end of a stream whose last message came, so its connection
// goes back to the pool instead of being closed mid-body. An agent that keeps
// sending is cut off after a few messages.
func drain[T any](st *connect.ServerStreamForClient[T]) {
	for range 4 {
		if !st.Receive() {
			return
		}
	}
}

func execResult(r *pb.ExecResult) *sandbox.ExecResult {
	if r == nil {
		return nil
	}
	return &sandbox.ExecResult{
		ExitCode: int(r.GetExitCode()), Reason: r.GetReason(), Signal: int(r.GetSignal()),
		Duration: time.Duration(r.GetDurationMs()) * time.Millisecond,
		Stdout:   r.GetStdout(), Stderr: r.GetStderr(), Truncated: r.GetTruncated(),
		StdoutDropped: r.GetStdoutDropped(), StderrDropped: r.GetStderrDropped(),
		StdoutPath: r.GetStdoutPath(), StderrPath: r.GetStderrPath(),
		StdoutBytes: r.GetStdoutBytes(), StderrBytes: r.GetStderrBytes(),
	}
}

func processInfo(st *pb.ProcessStatus) sandbox.ProcessInfo {
	p := sandbox.ProcessInfo{ID: st.GetId(), PID: int(st.GetPid()), Argv: st.GetArgv(), Cwd: st.GetCwd(),
		Tag: st.GetTag(), Running: st.GetState() == "running", Result: execResult(st.GetResult())}
	if st.GetStartedAt() != nil {
		p.StartedAt = st.GetStartedAt().AsTime()
	}
	if p.Result != nil {
		p.Result.ProcessID, p.Result.PID = p.ID, p.PID
	}
	return p
}

// Wait blocks until process pid exits or timeout passes; Running tells which.
func (c *Client) Wait(ctx context.Context, pid string, timeout time.Duration) (sandbox.ProcessInfo, error) {
	resp, err := rpcs().agent.Wait(c.bind(ctx), connect.NewRequest(&pb.WaitRequest{Id: pid, TimeoutMs: max(clampMs(timeout), 1)}))
	if err != nil {
		return sandbox.ProcessInfo{}, c.wrap("wait_process", err)
	}
	return processInfo(resp.Msg), nil
}

func (c *Client) Process(ctx context.Context, pid string) (sandbox.ProcessInfo, error) {
	resp, err := rpcs().agent.GetProcess(c.bind(ctx), connect.NewRequest(&pb.GetProcessRequest{Id: pid}))
	if err != nil {
		return sandbox.ProcessInfo{}, c.wrap("get_process", err)
	}
	return processInfo(resp.Msg), nil
}

func (c *Client) Processes(ctx context.Context) ([]sandbox.ProcessInfo, error) {
	resp, err := rpcs().agent.ListProcesses(c.bind(ctx), connect.NewRequest(&pb.ListProcessesRequest{}))
	if err != nil {
		return nil, c.wrap("list_processes", err)
	}
	out := make([]sandbox.ProcessInfo, 0, len(resp.Msg.GetProcesses()))
	for _, st := range resp.Msg.GetProcesses() {
		out = append(out, processInfo(st))
	}
	return out, nil
}

func (c *Client) WriteStdin(ctx context.Context, pid string, data []byte, eof bool) error {
	_, err := rpcs().agent.WriteStdin(c.bind(ctx), connect.NewRequest(&pb.WriteStdinRequest{Id: pid, Data: data, Eof: eof}))
	return c.wrap("write_stdin", err)
}

// Signal sends sig to process pid (9 ends its whole tree) and reports the outcome:
// sandbox.OutcomeStopped, OutcomeSignaled or OutcomeAlreadyExited.
func (c *Client) Signal(ctx context.Context, pid string, sig int) (string, error) {
	resp, err := rpcs().agent.Signal(c.bind(ctx), connect.NewRequest(&pb.SignalRequest{Id: pid, Signal: int32(sig)}))
	if err != nil {
		return "", c.wrap("signal", err)
	}
	switch o := resp.Msg.GetOutcome(); o {
	case sandbox.OutcomeStopped, sandbox.OutcomeSignaled, sandbox.OutcomeAlreadyExited:
		return o, nil
	default:
		return "", &sandbox.Error{Op: "signal", ID: c.id, Err: fmt.Errorf("agent: unknown signal outcome %.40q", o)}
	}
}

func (c *Client) ReadFile(ctx context.Context, path string, offset, limit int64) (sandbox.ReadResult, error) {
	resp, err := rpcs().agent.ReadFile(c.bind(ctx), connect.NewRequest(&pb.ReadFileRequest{Path: path, Offset: offset, Limit: limit}))
	if err != nil {
		return sandbox.ReadResult{}, c.wrap("read_file", err)
	}
	m := resp.Msg
	return sandbox.ReadResult{Path: m.GetPath(), Content: m.GetContent(), Offset: offset, Size: m.GetSize(), EOF: m.GetEof()}, nil
}

func (c *Client) WriteFile(ctx context.Context, path string, content []byte, mode uint32, appendTo bool) (sandbox.FileInfo, error) {
	resp, err := rpcs().agent.WriteFile(c.bind(ctx), connect.NewRequest(&pb.WriteFileRequest{Path: path, Content: content, Mode: mode, Append: appendTo}))
	if err != nil {
		return sandbox.FileInfo{}, c.wrap("write_file", err)
	}
	return fileInfo(resp.Msg.GetEntry()), nil
}

// fileInfo maps an envd entry: a symlink carries its target's type there, and
// is a symlink here.
func fileInfo(e *fspb.EntryInfo) sandbox.FileInfo {
	if e == nil {
		return sandbox.FileInfo{}
	}
	fi := sandbox.FileInfo{Name: e.GetName(), Path: e.GetPath(), Size: e.GetSize(), Mode: fs.FileMode(e.GetMode()).Perm(),
		Permissions: e.GetPermissions(), Owner: e.GetOwner(), Group: e.GetGroup(), SymlinkTarget: e.GetSymlinkTarget()}
	if e.GetModifiedTime() != nil {
		fi.ModTime = e.GetModifiedTime().AsTime()
	}
	switch {
	case e.SymlinkTarget != nil:
		fi.Type = "symlink"
	case e.GetType() == fspb.FileType_FILE_TYPE_FILE:
		fi.Type = "file"
	case e.GetType() == fspb.FileType_FILE_TYPE_DIRECTORY:
		fi.Type = "dir"
	default:
		fi.Type = "other"
	}
	return fi
}

func (c *Client) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	resp, err := rpcs().fs.Stat(c.bind(ctx), connect.NewRequest(&fspb.StatRequest{Path: path}))
	if err != nil {
		return sandbox.FileInfo{}, c.wrap("stat", err)
	}
	return fileInfo(resp.Msg.GetEntry()), nil
}

func (c *Client) List(ctx context.Context, path string, depth int) ([]sandbox.FileInfo, error) {
	resp, err := rpcs().fs.ListDir(c.bind(ctx), connect.NewRequest(&fspb.ListDirRequest{Path: path, Depth: uint32(max(depth, 1))}))
	if err != nil {
		return nil, c.wrap("list_dir", err)
	}
	out := make([]sandbox.FileInfo, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		out = append(out, fileInfo(e))
	}
	return out, nil
}

func (c *Client) MakeDir(ctx context.Context, path string) (sandbox.FileInfo, error) {
	resp, err := rpcs().fs.MakeDir(c.bind(ctx), connect.NewRequest(&fspb.MakeDirRequest{Path: path}))
	if err != nil {
		return sandbox.FileInfo{}, c.wrap("make_dir", err)
	}
	return fileInfo(resp.Msg.GetEntry()), nil
}

func (c *Client) Move(ctx context.Context, src, dst string) (sandbox.FileInfo, error) {
	resp, err := rpcs().fs.Move(c.bind(ctx), connect.NewRequest(&fspb.MoveRequest{Source: src, Destination: dst}))
	if err != nil {
		return sandbox.FileInfo{}, c.wrap("move", err)
	}
	return fileInfo(resp.Msg.GetEntry()), nil
}

func (c *Client) Remove(ctx context.Context, path string) error {
	_, err := rpcs().fs.Remove(c.bind(ctx), connect.NewRequest(&fspb.RemoveRequest{Path: path}))
	return c.wrap("remove", err)
}

func (c *Client) Glob(ctx context.Context, pattern, dir string, limit int) ([]string, bool, error) {
	resp, err := rpcs().agent.Glob(c.bind(ctx), connect.NewRequest(&pb.GlobRequest{Pattern: pattern, Path: dir, Limit: int32(min(limit, math.MaxInt32))}))
	if err != nil {
		return nil, false, c.wrap("glob", err)
	}
	return resp.Msg.GetPaths(), resp.Msg.GetTruncated(), nil
}

// GrepRequest selects lines to find.
type GrepRequest struct {
	Pattern    string
	Path       string
	Include    string // base-name glob
	IgnoreCase bool
	Fixed      bool
	// Limit bounds the matches: lines in content mode, files in the others.
	Limit int
	// Mode is "content" (the default: each matching line), "files" (the
	// paths of the files with a match) or "count" (each such file and its
	// number of matching lines).
	Mode string
	// Glob keeps the files whose path relative to Path matches it, with **
	// for any number of directories: **/*.py, src/*.ts.
	Glob string
}

func (c *Client) Grep(ctx context.Context, req GrepRequest) ([]sandbox.GrepMatch, bool, error) {
	resp, err := rpcs().agent.Grep(c.bind(ctx), connect.NewRequest(&pb.GrepRequest{Pattern: req.Pattern, Path: req.Path, Include: req.Include,
		IgnoreCase: req.IgnoreCase, Fixed: req.Fixed, Limit: int32(min(req.Limit, math.MaxInt32)), Mode: req.Mode, Glob: req.Glob}))
	if err != nil {
		return nil, false, c.wrap("grep", err)
	}
	out := make([]sandbox.GrepMatch, 0, len(resp.Msg.GetMatches()))
	for _, m := range resp.Msg.GetMatches() {
		out = append(out, sandbox.GrepMatch{Path: m.GetPath(), Line: m.GetLine(), Text: m.GetText(), Count: m.GetCount()})
	}
	return out, resp.Msg.GetTruncated(), nil
}

// httpErr maps an error answer of the agent's /files routes.
func (c *Client) httpErr(op string, resp *http.Response) error {
	var body struct {
		Message string `json:"message"`
	}
	json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body)
	msg := body.Message
	if msg == "" {
		msg = resp.Status
	}
	code := connect.CodeUnknown
	switch resp.StatusCode {
	case http.StatusBadRequest:
		code = connect.CodeInvalidArgument
	case http.StatusNotFound:
		code = connect.CodeNotFound
	case http.StatusConflict:
		code = connect.CodeAlreadyExists
	case http.StatusForbidden:
		code = connect.CodePermissionDenied
	case http.StatusRequestEntityTooLarge:
		code = connect.CodeOutOfRange // a cap hit
	case http.StatusInsufficientStorage, http.StatusTooManyRequests:
		code = connect.CodeResourceExhausted
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		code = connect.CodeUnavailable
	case http.StatusNotImplemented: // a route the sandbox's backend does not have (e2b: the archive routes)
		code = connect.CodeUnimplemented
	}
	return c.wrap(op, connect.NewError(code, errors.New(msg)))
}

// do sends one request of the agent's plain-HTTP file routes (route and query
// q; body, of type ctype, streamed when not nil) and returns its 200 answer,
// whose body the caller closes; any other answer, or no answer, is an error.
func (c *Client) do(ctx context.Context, op, method, route string, q url.Values, body io.Reader, ctype string) (*http.Response, error) {
	var rd io.ReadCloser
	if body != nil {
		rd = io.NopCloser(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, baseURL+route+"?"+q.Encode(), rd)
	if err != nil {
		return nil, &sandbox.Error{Op: op, ID: c.id, Err: err}
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, c.wrap(op, ctx.Err())
		}
		return nil, c.wrap(op, connect.NewError(connect.CodeUnavailable, err))
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, c.httpErr(op, resp)
	}
	return resp, nil
}

// Download streams a file out of the sandbox; the caller closes the reader.
func (c *Client) Download(ctx context.Context, path string) (io.ReadCloser, sandbox.FileInfo, error) {
	const op = "download"
	resp, err := c.do(ctx, op, http.MethodGet, "/files", url.Values{"path": {path}}, nil, "")
	if err != nil {
		return nil, sandbox.FileInfo{}, err
	}
	wire := resp.Header.Get("X-Sbx-Path")
	if wire == "" {
		wire = path
	}
	fi, err := c.Stat(ctx, wire)
	if err != nil {
		fi = sandbox.FileInfo{Path: wire, Type: "file"}
	}
	fi.Size = resp.ContentLength
	body := resp.Body
	if resp.ContentLength >= 0 { // never more than announced
		body = readCloser{io.LimitReader(resp.Body, resp.ContentLength), resp.Body}
	}
	return body, fi, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// Upload streams r into a file in the sandbox, creating parents, replacing it.
func (c *Client) Upload(ctx context.Context, path string, r io.Reader, mode uint32) (sandbox.FileInfo, error) {
	const op = "upload"
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", strconv.FormatUint(uint64(mode&0o7777), 8))
	}
	resp, err := c.do(ctx, op, http.MethodPost, "/files", q, r, "application/octet-stream")
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	defer resp.Body.Close()
	var out []struct {
		Path string `json:"path"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil || len(out) != 1 {
		return sandbox.FileInfo{}, &sandbox.Error{Op: op, ID: c.id, Err: fmt.Errorf("%w: malformed upload answer", sandbox.ErrAgentLost)}
	}
	return c.Stat(ctx, out[0].Path)
}
