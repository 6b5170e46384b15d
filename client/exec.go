// This file implements exec and the process calls, streamed ones included.

package client

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/sandbox"
)

// Exec runs a command and returns its result once it ends. A non-zero exit is
// not an error: see ExitCode.
func (c *Client) Exec(ctx context.Context, id string, req openapi.ExecRequest) (*openapi.ExecResult, error) {
	req.Background = false
	var r openapi.ExecResult
	return &r, c.call(ctx, request{op: "exec", id: id, method: http.MethodPost, path: sandboxPath(id) + "/exec", body: req}, &r)
}

// ExecBackground starts a command and returns once it runs.
func (c *Client) ExecBackground(ctx context.Context, id string, req openapi.ExecRequest) (*openapi.ProcessStarted, error) {
	req.Background = true
	var p openapi.ProcessStarted
	return &p, c.call(ctx, request{op: "exec", id: id, method: http.MethodPost, path: sandboxPath(id) + "/exec", body: req}, &p)
}

// ExecStream runs a command, calling fn for each event as it comes (started,
// stdout, stderr, result), and returns the result. An error event, or fn
// failing, ends the call with that error; the process itself goes on.
func (c *Client) ExecStream(ctx context.Context, id string, req openapi.ExecRequest, fn func(openapi.Event) error) (*openapi.ExecResult, error) {
	req.Background = false
	resp, err := c.do(ctx, request{op: "exec", id: id, method: http.MethodPost, path: sandboxPath(id) + "/exec",
		body: req, accept: openapi.FramesMediaType})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return readStream("exec", id, resp, fn)
}

// Attach follows process pid's output until it ends; replay sends what it
// printed so far first.
func (c *Client) Attach(ctx context.Context, id, pid string, replay bool, fn func(openapi.Event) error) (*openapi.ExecResult, error) {
	resp, err := c.do(ctx, request{op: "attach", id: id, method: http.MethodGet, path: processPath(id, pid) + "/output",
		query: url.Values{"replay": {strconv.FormatBool(replay)}}, accept: openapi.FramesMediaType})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return readStream("attach", id, resp, fn)
}

// maxEventLine bounds one NDJSON line or frame: output chunks are far smaller.
const maxEventLine = 16 << 20

// readStream reads a stream of events, in the form the daemon chose (frames
// when it speaks them, else NDJSON), until its result.
func readStream(op, id string, resp *http.Response, fn func(openapi.Event) error) (*openapi.ExecResult, error) {
	next := ndjsonEvents(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), openapi.FramesMediaType) {
		next = frameEvents(resp.Body)
	}
	for {
		ev, err := next()
		var de badEvent
		switch {
		case errors.As(err, &de):
			return nil, &sandbox.Error{Op: op, ID: sandbox.ID(id), Err: fmt.Errorf("%w: decoding the stream: %v", sandbox.ErrUnavailable, de.err)}
		case err != nil:
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, &sandbox.Error{Op: op, ID: sandbox.ID(id), Err: fmt.Errorf("%w: the stream ended without a result: %v", sandbox.ErrUnavailable, err)}
		}
		if ev.Type == openapi.EventError && ev.Error != nil {
			return nil, eventError(op, id, ev.Error)
		}
		if fn != nil {
			if err := fn(ev); err != nil {
				return nil, err
			}
		}
		if ev.Type == openapi.EventResult {
			return ev.Result, nil
		}
	}
}

// badEvent is an event that could not be decoded.
type badEvent struct{ err error }

func (e badEvent) Error() string { return e.err.Error() }

// ndjsonEvents returns the events of an NDJSON stream one at a time; io.EOF
// at its end.
func ndjsonEvents(r io.Reader) func() (openapi.Event, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	return func() (openapi.Event, error) {
		for sc.Scan() {
			if len(sc.Bytes()) == 0 {
				continue
			}
			var ev openapi.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				return ev, badEvent{err}
			}
			return ev, nil
		}
		if err := sc.Err(); err != nil {
			return openapi.Event{}, err
		}
		return openapi.Event{}, io.EOF
	}
}

// frameEvents returns the events of a stream of frames
// (openapi.FramesMediaType) one at a time: output frames become stdout and
// stderr events with Raw set, valid until the next call; io.EOF at its end.
func frameEvents(r io.Reader) func() (openapi.Event, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var hdr [8]byte
	var buf []byte
	return func() (openapi.Event, error) {
		for {
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				return openapi.Event{}, err
			}
			n := binary.BigEndian.Uint32(hdr[4:])
			if n > maxEventLine {
				return openapi.Event{}, fmt.Errorf("a frame of %d bytes", n)
			}
			if cap(buf) < int(n) {
				buf = make([]byte, n)
			}
			buf = buf[:n]
			if _, err := io.ReadFull(br, buf); err != nil {
				return openapi.Event{}, err
			}
			switch hdr[0] {
			case openapi.FrameStdout:
				return openapi.Event{Type: openapi.EventStdout, Raw: buf}, nil
			case openapi.FrameStderr:
				return openapi.Event{Type: openapi.EventStderr, Raw: buf}, nil
			case openapi.FrameEvent:
				var ev openapi.Event
				if err := json.Unmarshal(buf, &ev); err != nil {
					return ev, badEvent{err}
				}
				return ev, nil
			}
			// A kind this client does not know: skipped.
		}
	}
}

func eventError(op, id string, d *openapi.ErrorDetail) error {
	ae := &APIError{Status: http.StatusOK, Code: d.Code, Message: d.Message, RequestID: d.RequestID, class: classOf(d.Code)}
	if d.Op != "" {
		op = d.Op
	}
	if d.SandboxID != "" {
		id = d.SandboxID
	}
	prefix := op + ": "
	if id != "" {
		prefix = op + " " + id + ": "
	}
	if len(ae.Message) > len(prefix) && ae.Message[:len(prefix)] == prefix {
		ae.Message = ae.Message[len(prefix):]
	}
	return &sandbox.Error{Op: op, ID: sandbox.ID(id), Err: ae}
}

// EventData returns the exact bytes of a stdout or stderr event. A frame's
// bytes (Raw) are valid only until the callback that got them returns.
func EventData(ev openapi.Event) []byte {
	if ev.Raw != nil {
		return ev.Raw
	}
	if ev.DataBase64 != "" {
		if b, err := base64.StdEncoding.DecodeString(ev.DataBase64); err == nil {
			return b
		}
	}
	return []byte(ev.Data)
}

// Output returns the exact bytes of a result's stdout and stderr.
func Output(r *openapi.ExecResult) (stdout, stderr []byte) {
	pick := func(s, b64 string) []byte {
		if b64 != "" {
			if b, err := base64.StdEncoding.DecodeString(b64); err == nil {
				return b
			}
		}
		return []byte(s)
	}
	return pick(r.Stdout, r.StdoutBase64), pick(r.Stderr, r.StderrBase64)
}

// ExitCode maps a result to a shell exit status, as timeout(1) and docker run
// do: the command's own code; 124 on timeout; 128+n when signal n ended it
// (137 when killed, by the OOM killer too); 125 when the agent was lost.
func ExitCode(r *openapi.ExecResult) int {
	switch r.Reason {
	case sandbox.ReasonTimeout:
		return 124
	case sandbox.ReasonAgentLost:
		return 125
	case sandbox.ReasonSignaled, sandbox.ReasonKilled, sandbox.ReasonOOM:
		if r.Signal > 0 && r.Signal < 128 {
			return 128 + r.Signal
		}
		if r.Reason != sandbox.ReasonSignaled {
			return 137
		}
	}
	if r.ExitCode < 0 || r.ExitCode > 255 {
		return 125
	}
	return r.ExitCode
}

func processPath(id, pid string) string { return sandboxPath(id) + "/processes/" + url.PathEscape(pid) }

// Processes lists sandbox id's processes.
func (c *Client) Processes(ctx context.Context, id string) ([]openapi.Process, error) {
	var l openapi.ProcessList
	if err := c.call(ctx, request{op: "list_processes", id: id, method: http.MethodGet, path: sandboxPath(id) + "/processes"}, &l); err != nil {
		return nil, err
	}
	return l.Processes, nil
}

// Process returns one process by its process id.
func (c *Client) Process(ctx context.Context, id, pid string) (*openapi.Process, error) {
	var p openapi.Process
	return &p, c.call(ctx, request{op: "get_process", id: id, method: http.MethodGet, path: processPath(id, pid)}, &p)
}

// Wait waits up to timeoutSeconds for process pid to exit; State tells which.
func (c *Client) Wait(ctx context.Context, id, pid string, timeoutSeconds int64) (*openapi.Process, error) {
	var p openapi.Process
	return &p, c.call(ctx, request{op: "wait_process", id: id, method: http.MethodPost, path: processPath(id, pid) + "/wait",
		body: openapi.WaitRequest{Timeout: &timeoutSeconds}}, &p)
}

// WriteStdin writes data to process pid's stdin, closing it after when eof.
func (c *Client) WriteStdin(ctx context.Context, id, pid string, data []byte, eof bool) error {
	b64 := base64.StdEncoding.EncodeToString(data)
	req := openapi.StdinRequest{EOF: eof}
	if len(data) > 0 {
		req.DataBase64 = &b64
	}
	return c.call(ctx, request{op: "write_stdin", id: id, method: http.MethodPost, path: processPath(id, pid) + "/stdin", body: req}, nil)
}

// Signal sends signal (a name like "SIGTERM" or a number) to process pid and
// returns the outcome: stopped, signaled or already_exited.
func (c *Client) Signal(ctx context.Context, id, pid, signal string) (string, error) {
	raw, _ := json.Marshal(signal)
	var out openapi.SignalResponse
	err := c.call(ctx, request{op: "signal", id: id, method: http.MethodPost, path: processPath(id, pid) + "/signal",
		body: openapi.SignalRequest{Signal: raw}}, &out)
	return out.Outcome, err
}
