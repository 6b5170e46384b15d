// This file implements GET /v1/sandboxes/{id}/pty: an interactive terminal
// over a WebSocket. The request either starts a process in a terminal (cmd or
// argv; by default the sandbox's login shell) or attaches to a terminal
// process already running (process). Binary frames carry the terminal's
// bytes both ways; text frames carry openapi.PtyMessage control messages.
//
// Everything that can be refused is refused before the upgrade, as the API's
// JSON error: the query, the handshake, the sandbox, the process and its
// start. A terminal this route started is killed when its socket closes, so
// a closed tab leaves nothing running; one it attached to goes on (an agent's
// session must survive a viewer). Neither direction buffers without bound:
// output is written frame by frame as the agent delivers it (the agent's
// follower is complete, so a slow socket slows the program), and input is
// written to the terminal before the next frame is read.

package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
)

// ptyOp is the terminal route's operation: the one route that also takes
// its API key from the WebSocket subprotocol list.
const ptyOp = "pty"

const (
	// ptyWriteTimeout bounds one frame's write: a client that stops reading
	// for this long loses its socket (and a terminal the route started, its
	// process) instead of holding the program's output for ever.
	ptyWriteTimeout = 60 * time.Second
	// ptyPingInterval and ptyPingTimeout find a peer that vanished without
	// closing (a laptop shut, a network gone), whose terminal would
	// otherwise run until its timeout.
	ptyPingInterval = 30 * time.Second
	ptyPingTimeout  = 60 * time.Second
	// ptyKillGrace bounds killing a terminal whose socket closed, and
	// waiting for the agent to report its end.
	ptyKillGrace = 10 * time.Second
	// ptyInputChunk is the most of one binary frame written to the terminal
	// at once: a paste of any size streams through in pieces.
	ptyInputChunk = 32 << 10
	// ptyControlMax bounds one text frame; no control message comes near.
	ptyControlMax = 4 << 10
)

// ptyLoginShell is the terminal started when the request names no command:
// the sandbox's login shell, bash when the sandbox has it, else sh. One
// exec, so the choice costs no round trip.
const ptyLoginShell = `if [ -x /bin/bash ]; then exec /bin/bash -l; fi; exec /bin/sh`

// ptyShell runs the command given as its $0 with bash -c when the sandbox has
// bash, else sh -c. bash runs a lone program in its own place, so ^C (SIGINT
// to the terminal's foreground group) reaches that program only; dash stays
// as its parent and dies of the ^C a REPL catches.
const ptyShell = `if [ -x /bin/bash ]; then exec /bin/bash -c "$0"; fi; exec /bin/sh -c "$0"`

// ptyParams is what the query asks for: a terminal to start (exec) or one to
// attach to (process), and its size.
type ptyParams struct {
	exec    sandbox.ExecRequest
	process string
	size    sandbox.PtySize
	// sized is set when rows or cols were given: an attached terminal is
	// resized to them (a started one begins at size anyway).
	sized bool
}

// ptyParamsOf reads the query; every problem names its parameter.
func ptyParamsOf(r *http.Request) (ptyParams, error) {
	q := newQuery(r)
	p := ptyParams{process: q.str("process", false)}
	rows := q.int("rows", 24, 1, openapi.PtyMaxSize)
	cols := q.int("cols", 80, 1, openapi.PtyMaxSize)
	p.size = sandbox.PtySize{Rows: uint16(rows), Cols: uint16(cols)}
	_, rowsGiven := q.v["rows"]
	_, colsGiven := q.v["cols"]
	p.sized = rowsGiven || colsGiven
	cmd := q.str("cmd", false)
	cwd := q.path("cwd", false)
	timeout := q.int("timeout", 0, 1, 1<<31)
	if q.err != nil {
		return p, q.err
	}
	argv := q.v["argv"]
	env, err := ptyEnv(q.v["env"])
	if err != nil {
		return p, err
	}
	if p.process != "" {
		if len(p.process) > 128 {
			return p, sandbox.Invalid("process", "%q… is not a process id", truncate(p.process, 40))
		}
		if cmd != "" || len(argv) > 0 || cwd != "" || len(env) > 0 || timeout != 0 {
			return p, sandbox.Invalid("process", "attaches to a running terminal; cmd, argv, cwd, env and timeout start a new one: give one or the other")
		}
		return p, nil
	}
	if cmd != "" && len(argv) > 0 {
		return p, sandbox.Invalid("cmd", "give cmd (run by a shell) or argv (run as is), not both")
	}
	switch {
	case cmd != "":
		argv = []string{"/bin/sh", "-c", ptyShell, cmd}
	case len(argv) == 0:
		argv = []string{"/bin/sh", "-c", ptyLoginShell}
	}
	size := p.size
	p.exec = sandbox.ExecRequest{Argv: argv, Cwd: cwd, Env: env, Pty: &size, Timeout: time.Duration(timeout) * time.Second}
	return p, nil
}

// ptyEnv parses the repeatable env=K=V parameters.
func ptyEnv(pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	env := make(map[string]string, len(pairs))
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, sandbox.Invalid("env", "%q is not K=V", truncate(kv, 40))
		}
		if strings.IndexByte(kv, 0) >= 0 {
			return nil, sandbox.Invalid("env", "%q contains a NUL byte", truncate(k, 40))
		}
		env[k] = v
	}
	return env, nil
}

// ptySize checks a terminal size; field prefixes the names in errors ("pty."
// for an exec request's).
func ptySize(field string, rows, cols int64) (*sandbox.PtySize, error) {
	for _, d := range []struct {
		name string
		n    int64
	}{{"rows", rows}, {"cols", cols}} {
		if d.n < 1 || d.n > openapi.PtyMaxSize {
			return nil, sandbox.Invalid(strings.TrimPrefix(field+"."+d.name, "."), "%d is outside [1, %d]", d.n, openapi.PtyMaxSize)
		}
	}
	return &sandbox.PtySize{Rows: uint16(rows), Cols: uint16(cols)}, nil
}

// headerTokens returns the comma-separated tokens of header name.
func headerTokens(h http.Header, name string) []string {
	var out []string
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

func hasToken(h http.Header, name, token string) bool {
	return slices.ContainsFunc(headerTokens(h, name), func(t string) bool { return strings.EqualFold(t, token) })
}

// protocolBearer returns "Bearer <key>" for the first bearer.<key> the client
// offers as a subprotocol, else "": a browser cannot set headers on a
// WebSocket, and a key in the URL would end up in logs and history.
func protocolBearer(r *http.Request) string {
	for _, p := range headerTokens(r.Header, "Sec-WebSocket-Protocol") {
		if key, ok := strings.CutPrefix(p, openapi.PtyBearerPrefix); ok && key != "" {
			return "Bearer " + key
		}
	}
	return ""
}

// checkUpgrade refuses, before anything starts, a request that is not a
// WebSocket handshake this route can complete.
func checkUpgrade(r *http.Request) error {
	switch {
	case !hasToken(r.Header, "Connection", "upgrade") || !hasToken(r.Header, "Upgrade", "websocket"):
		return sandbox.Invalid("Upgrade", "this route is a WebSocket: send Connection: Upgrade and Upgrade: websocket (with Sec-WebSocket-Version: 13 and a Sec-WebSocket-Key)")
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		return sandbox.Invalid("Sec-WebSocket-Version", "%q is not 13", truncate(r.Header.Get("Sec-WebSocket-Version"), 20))
	case len(r.Header.Values("Sec-WebSocket-Key")) != 1:
		return sandbox.Invalid("Sec-WebSocket-Key", "give exactly one")
	}
	if protocolBearer(r) != "" && !slices.Contains(headerTokens(r.Header, "Sec-WebSocket-Protocol"), openapi.PtySubprotocol) {
		return sandbox.Invalid("Sec-WebSocket-Protocol", "offer %s alongside %s<API key>: it is the only subprotocol the daemon answers with", openapi.PtySubprotocol, openapi.PtyBearerPrefix)
	}
	return nil
}

// errSocketGone stops following an attached terminal whose socket is gone.
var errSocketGone = fmt.Errorf("the terminal's WebSocket closed: %w", manager.ErrDetached)

// followed is how following a terminal ended.
type followed struct {
	res *sandbox.ExecResult
	err error
}

// terminal is one terminal over one WebSocket.
type terminal struct {
	s     *server
	r     *http.Request
	id    sandbox.ID
	owned bool // started by this request: killed when the socket closes
	// ctx carries the caller's key (audit) and ends following and input
	// when the request is done.
	ctx    context.Context
	cancel context.CancelFunc

	started   chan sandbox.ProcessInfo // the start event
	ready     chan struct{}            // closed once conn is set, or never will be
	readyOnce sync.Once
	conn      *websocket.Conn // set before ready closes; nil if the upgrade failed
	pid       string          // the agent's process id

	gone      chan struct{} // closed once the socket closed or broke
	goneOnce  sync.Once
	inputBusy atomic.Bool // a write to the terminal is waiting for it
	lastSize  sandbox.PtySize
	wg        sync.WaitGroup
}

func (s *server) newTerminal(r *http.Request, owned bool) *terminal {
	ctx, cancel := context.WithCancel(r.Context())
	return &terminal{s: s, r: r, id: sandboxID(r), owned: owned, ctx: ctx, cancel: cancel,
		started: make(chan sandbox.ProcessInfo, 1), ready: make(chan struct{}), gone: make(chan struct{})}
}

func (s *server) pty(w http.ResponseWriter, r *http.Request) error {
	p, err := ptyParamsOf(r)
	if err != nil {
		return err
	}
	if err := checkUpgrade(r); err != nil {
		return err
	}
	if err := checkOrigin(r.Header.Get("Origin"), r.Host, s.origins); err != nil {
		return &sandbox.Error{Op: ptyOp, ID: sandboxID(r), Err: err}
	}
	if !s.terms.enter() {
		return &sandbox.Error{Op: ptyOp, ID: sandboxID(r), Err: fmt.Errorf("%w: the daemon is shutting down", sandbox.ErrUnavailable)}
	}
	defer s.terms.wg.Done()
	t := s.newTerminal(r, p.process == "")
	defer t.release()
	if t.owned && p.exec.Timeout == 0 {
		p.exec.Timeout = s.m.TerminalTimeout()
	}
	if !t.owned {
		if _, err := s.m.Terminal(t.ctx, t.id, p.process); err != nil {
			return err
		}
	}
	done := make(chan followed, 1)
	go func() {
		res, err := t.follow(p)
		done <- followed{res, err}
	}()
	info, err := t.waitStart(done)
	if err != nil {
		return err // nothing started, or nothing attached: an ordinary error
	}
	if !t.upgrade(w, info) {
		t.drop(done)
		return nil // Accept answered the request
	}
	switch {
	case t.owned:
		t.lastSize = p.size // started at it
	case p.sized:
		t.resize(p.size)
	}
	t.wg.Go(t.readInput)
	t.wg.Go(t.keepalive)
	select {
	case f := <-done:
		t.finish(f)
	case <-t.gone:
		t.drop(done)
	case <-s.terms.closing:
		t.drop(done)
		t.conn.Close(websocket.StatusGoingAway, "the daemon is shutting down")
	}
	return nil
}

// follow starts the terminal or attaches to it, and follows it to its end.
func (t *terminal) follow(p ptyParams) (*sandbox.ExecResult, error) {
	if t.owned {
		return t.s.m.Exec(t.ctx, t.id, p.exec, true, t.onEvent)
	}
	return t.s.m.AttachTerminal(t.ctx, t.id, p.process, t.onEvent)
}

// waitStart waits for the process's start event, or for following to end
// without one (the start refused, the process gone).
func (t *terminal) waitStart(done <-chan followed) (sandbox.ProcessInfo, error) {
	select {
	case info := <-t.started:
		return info, nil
	case f := <-done:
		if f.err != nil {
			return sandbox.ProcessInfo{}, f.err
		}
		return sandbox.ProcessInfo{}, &sandbox.Error{Op: ptyOp, ID: t.id, Err: errors.New("the agent sent no start event")}
	}
}

// upgrade completes the handshake and sends the started message; it reports
// whether the socket is up. Until it returns, following waits at the start
// event, so started is the first message and nothing is lost before it.
func (t *terminal) upgrade(w http.ResponseWriter, info sandbox.ProcessInfo) bool {
	defer t.readyOnce.Do(func() { close(t.ready) })
	t.pid = info.ID // set first: a failed upgrade kills the process by it
	conn, err := websocket.Accept(w, t.r, &websocket.AcceptOptions{
		Subprotocols: []string{openapi.PtySubprotocol},
		// The origin was checked before anything started (checkOrigin,
		// which knows allowed_origins).
		InsecureSkipVerify: true,
	})
	if err != nil {
		t.s.log.WarnContext(t.ctx, "pty: the WebSocket upgrade failed", logkey.SandboxID, string(t.id), logkey.Err, err)
		return false
	}
	// Binary frames stream through in chunks, whatever their size; text
	// frames are bounded by control.
	conn.SetReadLimit(-1)
	t.conn = conn
	t.send(openapi.PtyMessage{Type: openapi.PtyStarted, Process: info.ID, PID: info.PID})
	return true
}

// onEvent passes the agent's events to the socket.
func (t *terminal) onEvent(ev sandbox.ExecEvent) error {
	switch {
	case ev.Started != nil:
		select {
		case t.started <- *ev.Started:
		default:
		}
		<-t.ready
		if t.conn == nil {
			return errSocketGone
		}
	case ev.Stdout != nil:
		return t.output(ev.Stdout)
	case ev.Stderr != nil: // a terminal has one stream; passed on all the same
		return t.output(ev.Stderr)
	}
	return nil
}

// output writes one chunk of terminal output, waiting for the socket to take
// it: the agent reads no further meanwhile, so the program is held back
// instead of its output piling up here.
func (t *terminal) output(b []byte) error {
	if t.isGone() {
		return t.afterGone()
	}
	ctx, cancel := context.WithTimeout(t.ctx, ptyWriteTimeout)
	err := t.conn.Write(ctx, websocket.MessageBinary, b)
	cancel()
	if err != nil {
		t.hangUp()
		return t.afterGone()
	}
	return nil
}

// afterGone is what following does once the socket is gone: a terminal this
// route started is still read until the kill ends it, so its end is
// recorded; an attached one is let go.
func (t *terminal) afterGone() error {
	if t.owned {
		return nil
	}
	return errSocketGone
}

func (t *terminal) hangUp() { t.goneOnce.Do(func() { close(t.gone) }) }

func (t *terminal) isGone() bool {
	select {
	case <-t.gone:
		return true
	default:
		return false
	}
}

// send writes one control message; a failure hangs up.
func (t *terminal) send(m openapi.PtyMessage) {
	b, err := json.Marshal(m)
	if err == nil {
		ctx, cancel := context.WithTimeout(t.ctx, ptyWriteTimeout)
		err = t.conn.Write(ctx, websocket.MessageText, b)
		cancel()
	}
	if err != nil {
		t.hangUp()
	}
}

// sendError sends err as an error message, in the API's error shape. Once
// the terminal is over (a call cut short by its end) there is no one to tell.
func (t *terminal) sendError(err error) {
	if t.isGone() || t.ctx.Err() != nil {
		t.s.log.DebugContext(t.ctx, "pty: an error after the terminal ended", logkey.SandboxID, string(t.id), logkey.Err, err)
		return
	}
	rt := routeOf(t.r)
	c := classOf(err)
	body := t.s.wireError(t.r, rt, c, err)
	if c.status == http.StatusInternalServerError {
		t.s.log.ErrorContext(t.ctx, "pty failed", logkey.Op, rt.op, logkey.RequestID, body.Error.RequestID,
			logkey.SandboxID, body.Error.SandboxID, logkey.Err, err)
	}
	t.send(openapi.PtyMessage{Type: openapi.PtyError, Error: &body.Error})
}

// finish ends a terminal whose following ended first: with its exit and a
// normal close, or with the error that cut it off.
func (t *terminal) finish(f followed) {
	if f.res != nil {
		code := f.res.ExitCode
		m := openapi.PtyMessage{Type: openapi.PtyExit, ExitCode: &code, Reason: f.res.Reason}
		if f.res.Signal != 0 {
			m.Signal = json.RawMessage(strconv.Itoa(f.res.Signal))
		}
		t.send(m)
		t.conn.Close(websocket.StatusNormalClosure, "")
		return
	}
	err := f.err
	if err == nil {
		err = &sandbox.Error{Op: ptyOp, ID: t.id, Err: errors.New("the agent sent no result")}
	}
	if t.owned { // following failed, not the process: it must not outlive its socket
		t.kill()
	}
	t.sendError(err)
	t.conn.Close(websocket.StatusInternalError, "the terminal was lost")
}

// drop ends following a terminal whose socket is gone (or never came up):
// one this route started is killed and its end awaited, so nothing is left
// running; an attached one is let go and goes on.
func (t *terminal) drop(done <-chan followed) {
	t.hangUp()
	if t.owned && t.pid != "" {
		t.kill()
	} else {
		t.cancel()
	}
	timer := time.NewTimer(ptyKillGrace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		t.cancel()
		<-done
	}
}

// kill sends SIGKILL to the terminal's process tree, even once the request's
// own context has ended.
func (t *terminal) kill() {
	ctx, cancel := t.callCtx()
	defer cancel()
	if _, err := t.s.m.Signal(ctx, t.id, t.pid, 9); err != nil {
		t.s.log.WarnContext(ctx, "pty: killing the terminal of a closed socket", logkey.SandboxID, string(t.id),
			"process_id", t.pid, logkey.Err, err)
	}
}

// release frees what the request held once it is done.
func (t *terminal) release() {
	t.readyOnce.Do(func() { close(t.ready) })
	t.cancel()
	if t.conn != nil {
		t.conn.CloseNow()
	}
	t.wg.Wait()
}

// readInput reads the client's frames until the socket closes: binary ones
// go to the terminal, text ones are control messages.
func (t *terminal) readInput() {
	defer t.hangUp()
	buf := make([]byte, ptyInputChunk)
	for {
		typ, rd, err := t.conn.Reader(t.ctx)
		if err != nil {
			return
		}
		if typ == websocket.MessageBinary {
			err = t.input(rd, buf)
		} else {
			err = t.control(rd)
		}
		if err != nil {
			return
		}
	}
}

// input writes one binary frame to the terminal, a chunk at a time, each
// once the terminal took the one before. A write the terminal refuses (the
// process exited: its exit message follows) is dropped.
func (t *terminal) input(rd io.Reader, buf []byte) error {
	for {
		n, err := rd.Read(buf)
		if n > 0 {
			t.inputBusy.Store(true)
			werr := t.s.m.TerminalInput(t.ctx, t.id, t.pid, buf[:n])
			t.inputBusy.Store(false)
			if werr != nil {
				t.s.log.DebugContext(t.ctx, "pty: input not written", logkey.SandboxID, string(t.id), logkey.Err, werr)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// control carries out one text frame; a message that is refused is answered
// with an error message, and the terminal goes on.
func (t *terminal) control(rd io.Reader) error {
	b, err := io.ReadAll(io.LimitReader(rd, ptyControlMax+1))
	if err != nil {
		return err
	}
	if len(b) > ptyControlMax {
		if _, err := io.Copy(io.Discard, rd); err != nil {
			return err
		}
		t.sendError(sandbox.Invalid("message", "a control message is over %d bytes", ptyControlMax))
		return nil
	}
	var m openapi.PtyMessage
	if err := decodeBody(b, &m); err != nil {
		t.sendError(err)
		return nil
	}
	switch m.Type {
	case openapi.PtyResize:
		sz, err := ptySize("", int64(m.Rows), int64(m.Cols))
		if err != nil {
			t.sendError(err)
			return nil
		}
		t.resize(*sz)
	case openapi.PtySignal:
		t.signal(m.Signal)
	default:
		t.sendError(sandbox.Invalid("type", "%q is not %s or %s", truncate(m.Type, 20), openapi.PtyResize, openapi.PtySignal))
	}
	return nil
}

// callCtx bounds one control call. It outlives the request: a signal sent
// just before the socket closed is still delivered, and recorded as such.
func (t *terminal) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(t.ctx), ptyKillGrace)
}

// resize applies a size in the order of the input around it (a program run
// after a resize sees the new size), skipping one the terminal already has.
// A process that exited meanwhile is not an error: its exit message follows.
func (t *terminal) resize(sz sandbox.PtySize) {
	if sz == t.lastSize {
		return
	}
	ctx, cancel := t.callCtx()
	defer cancel()
	err := t.s.m.Resize(ctx, t.id, t.pid, sz.Rows, sz.Cols)
	switch {
	case err == nil:
		t.lastSize = sz
	case errors.Is(err, sandbox.ErrWrongState):
	default:
		t.sendError(err)
	}
}

func (t *terminal) signal(raw json.RawMessage) {
	if len(raw) == 0 {
		t.sendError(sandbox.Invalid("signal", "is required: a number (2) or a name (\"SIGINT\")"))
		return
	}
	sig, err := parseSignal(raw)
	if err == nil {
		ctx, cancel := t.callCtx()
		_, err = t.s.m.Signal(ctx, t.id, t.pid, sig)
		cancel()
	}
	if err != nil {
		t.sendError(err)
	}
}

// keepalive pings the client; one that does not answer in time is gone. A
// pong is read with the client's frames, so while a write to the terminal
// holds that reading up (a program not reading its input), a missed pong
// says nothing and is let pass.
func (t *terminal) keepalive() {
	tick := time.NewTicker(ptyPingInterval)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-t.gone:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(t.ctx, ptyPingTimeout)
		err := t.conn.Ping(ctx)
		cancel()
		switch {
		case err == nil, t.inputBusy.Load():
		case t.ctx.Err() != nil:
			return
		default:
			t.s.log.DebugContext(t.ctx, "pty: the client did not answer a ping", logkey.SandboxID, string(t.id), logkey.Err, err)
			t.hangUp()
			return
		}
	}
}

// terminals tracks the terminals being served: a WebSocket is hijacked, so
// http.Server.Shutdown neither waits for nor closes it.
type terminals struct {
	mu      sync.Mutex
	closed  bool
	closing chan struct{} // closed by close
	wg      sync.WaitGroup
}

func newTerminals() *terminals { return &terminals{closing: make(chan struct{})} }

// enter counts one more terminal; false once closing.
func (ts *terminals) enter() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return false
	}
	ts.wg.Add(1)
	return true
}

// close ends every terminal (see drop) and waits for them, or for ctx.
func (ts *terminals) close(ctx context.Context) error {
	ts.mu.Lock()
	if !ts.closed {
		ts.closed = true
		close(ts.closing)
	}
	ts.mu.Unlock()
	done := make(chan struct{})
	go func() {
		ts.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for terminals to end: %w", context.Cause(ctx))
	}
}

// CloseTerminals ends the terminals h (a handler from New) serves, before the
// manager closes: each that the API started is killed, so a daemon that
// stops leaves no shell running in a sandbox; each attached to is let go.
// New terminals are refused from then on. It returns once they ended, or
// with ctx's error.
func CloseTerminals(ctx context.Context, h http.Handler) error {
	s, ok := h.(*server)
	if !ok {
		return nil
	}
	return s.terms.close(ctx)
}
