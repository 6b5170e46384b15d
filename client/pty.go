// This file implements the client of GET /v1/sandboxes/{id}/pty: an
// interactive terminal over a WebSocket (openapi.PtySubprotocol).

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/sandbox"
)

// PtyRequest selects the terminal to open: a command to start (Argv or
// Command; neither starts the sandbox's login shell) or, with Process, a
// terminal process already running.
type PtyRequest struct {
	Argv    []string
	Command string
	Cwd     string
	Env     map[string]string
	// Timeout in seconds; nil means the daemon's longest.
	Timeout *int64
	Process string
	// Rows and Cols; 0 means the daemon's default (24 × 80), and with
	// Process, the terminal's present size.
	Rows, Cols int
}

func (r PtyRequest) query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("cmd", r.Command)
	set("cwd", r.Cwd)
	set("process", r.Process)
	for _, a := range r.Argv {
		q.Add("argv", a)
	}
	for k, v := range r.Env {
		q.Add("env", k+"="+v)
	}
	if r.Timeout != nil {
		q.Set("timeout", strconv.FormatInt(*r.Timeout, 10))
	}
	if r.Rows > 0 {
		q.Set("rows", strconv.Itoa(r.Rows))
	}
	if r.Cols > 0 {
		q.Set("cols", strconv.Itoa(r.Cols))
	}
	return q
}

// Terminal is an open terminal of a sandbox: Write sends keystrokes, Output
// copies what it prints until it exits. Close it when done; a terminal that
// OpenTerminal started is killed then, one attached to goes on.
type Terminal struct {
	conn *websocket.Conn
	id   string
	// Process and PID name the terminal's process: the agent's process id
	// and the pid in the sandbox.
	Process string
	PID     int
}

// ptyControlMax bounds a control message read from the daemon.
const ptyControlMax = 64 << 10

// ptyWriteTimeout bounds sending one frame to the daemon.
const ptyWriteTimeout = 60 * time.Second

// OpenTerminal opens a terminal in sandbox id. A refusal (a bad request, an
// unknown sandbox or process) is the API's error, as for every call; ctx
// bounds the handshake only.
func (c *Client) OpenTerminal(ctx context.Context, id string, req PtyRequest) (*Terminal, error) {
	const op = "pty"
	u := c.base + sandboxPath(id) + "/pty?" + req.query().Encode()
	h := http.Header{"User-Agent": {c.ua}}
	if c.key != "" {
		h.Set("Authorization", "Bearer "+c.key)
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h,
		Subprotocols: []string{openapi.PtySubprotocol}})
	if err != nil {
		switch {
		case resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil:
			return nil, decodeError(op, id, resp)
		case ctx.Err() != nil:
			return nil, &sandbox.Error{Op: op, ID: sandbox.ID(id), Err: context.Cause(ctx)}
		case resp == nil:
			return nil, &sandbox.Error{Op: op, ID: sandbox.ID(id), Err: c.unreachable(err)}
		}
		return nil, &sandbox.Error{Op: op, ID: sandbox.ID(id), Err: fmt.Errorf("%w: the WebSocket handshake failed: %v", sandbox.ErrUnavailable, err)}
	}
	conn.SetReadLimit(-1) // output frames are copied through in pieces; control ones are bounded in Output
	t := &Terminal{conn: conn, id: id}
	if err := t.readStarted(ctx); err != nil {
		conn.CloseNow()
		return nil, err
	}
	return t, nil
}

// readStarted reads the first message, which names the process.
func (t *Terminal) readStarted(ctx context.Context) error {
	typ, b, err := t.conn.Read(ctx)
	if err != nil {
		return t.lost(err)
	}
	var m openapi.PtyMessage
	if typ != websocket.MessageText || json.Unmarshal(b, &m) != nil || m.Type != openapi.PtyStarted {
		return t.errorf("the first message is not a started message: %.80q", b)
	}
	t.Process, t.PID = m.Process, m.PID
	return nil
}

func (t *Terminal) errorf(format string, args ...any) error {
	return &sandbox.Error{Op: "pty", ID: sandbox.ID(t.id), Err: fmt.Errorf("%w: %s", sandbox.ErrUnavailable, fmt.Sprintf(format, args...))}
}

// lost is the error of a socket that ended without an exit message.
func (t *Terminal) lost(err error) error {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		why := ce.Reason
		if why == "" {
			why = "without an exit"
		}
		return t.errorf("the daemon closed the terminal: %s (WebSocket status %d)", why, int(ce.Code))
	}
	return t.errorf("the terminal's connection broke: %v", err)
}

// Write sends p to the terminal as keystrokes. It returns once the daemon
// took them, so a fast writer is held back by a slow program.
func (t *Terminal) Write(p []byte) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ptyWriteTimeout)
	defer cancel()
	if err := t.conn.Write(ctx, websocket.MessageBinary, p); err != nil {
		return 0, t.lost(err)
	}
	return len(p), nil
}

// Resize sets the terminal's size.
func (t *Terminal) Resize(ctx context.Context, rows, cols int) error {
	return t.control(ctx, openapi.PtyMessage{Type: openapi.PtyResize, Rows: rows, Cols: cols})
}

// Signal sends signal sig to the terminal's process.
func (t *Terminal) Signal(ctx context.Context, sig int) error {
	return t.control(ctx, openapi.PtyMessage{Type: openapi.PtySignal, Signal: json.RawMessage(strconv.Itoa(sig))})
}

func (t *Terminal) control(ctx context.Context, m openapi.PtyMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := t.conn.Write(ctx, websocket.MessageText, b); err != nil {
		return t.lost(err)
	}
	return nil
}

// Output copies what the terminal prints to w until its process exits, and
// returns how it ended (ExitCode, Reason and Signal set), for ExitCode. A
// control message the daemon refused is reported to onError (may be nil)
// and the terminal goes on; a lost terminal is an error.
func (t *Terminal) Output(ctx context.Context, w io.Writer, onError func(error)) (*openapi.ExecResult, error) {
	for {
		typ, rd, err := t.conn.Reader(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, &sandbox.Error{Op: "pty", ID: sandbox.ID(t.id), Err: context.Cause(ctx)}
			}
			return nil, t.lost(err)
		}
		if typ == websocket.MessageBinary {
			if _, err := io.Copy(w, rd); err != nil {
				return nil, err
			}
			continue
		}
		b, err := io.ReadAll(io.LimitReader(rd, ptyControlMax))
		if err != nil {
			return nil, t.lost(err)
		}
		var m openapi.PtyMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, t.errorf("an unreadable control message: %.80q", b)
		}
		switch m.Type {
		case openapi.PtyExit:
			return t.exit(m), nil
		case openapi.PtyError:
			err := t.detailError(m.Error)
			if errors.Is(err, sandbox.ErrInvalid) || errors.Is(err, sandbox.ErrWrongState) {
				if onError != nil {
					onError(err) // a control message refused: the terminal goes on
				}
				continue
			}
			return nil, err
		}
	}
}

func (t *Terminal) exit(m openapi.PtyMessage) *openapi.ExecResult {
	res := &openapi.ExecResult{ProcessID: t.Process, PID: t.PID, Reason: m.Reason}
	if m.ExitCode != nil {
		res.ExitCode = *m.ExitCode
	}
	if len(m.Signal) > 0 {
		json.Unmarshal(m.Signal, &res.Signal)
	}
	return res
}

// detailError is an error message's API error, as decodeError makes it.
func (t *Terminal) detailError(d *openapi.ErrorDetail) error {
	if d == nil {
		return t.errorf("an error message without an error")
	}
	op, id := d.Op, d.SandboxID
	if op == "" {
		op, id = "pty", t.id
	}
	ae := &APIError{Code: d.Code, Message: d.Message, RequestID: d.RequestID, class: classOf(d.Code)}
	prefix := op + ": "
	if id != "" {
		prefix = op + " " + id + ": "
	}
	ae.Message = strings.TrimPrefix(ae.Message, prefix)
	return &sandbox.Error{Op: op, ID: sandbox.ID(id), Err: ae}
}

// Close ends the terminal's socket: a terminal OpenTerminal started is
// killed by the daemon then; one attached to goes on.
func (t *Terminal) Close() error {
	return t.conn.Close(websocket.StatusNormalClosure, "")
}
