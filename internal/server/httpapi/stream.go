// This file implements streamed responses: exec and attach output as NDJSON (one
// JSON object a line) or server-sent events, flushed event by event.

package httpapi

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

type streamFormat int

const (
	noStream streamFormat = iota
	ndjson
	sse
	frames // openapi.FramesMediaType
)

// streamWriteTimeout bounds one event's write: a client that stops reading
// ends its stream (never the process) instead of holding it forever.
const streamWriteTimeout = 60 * time.Second

// streamFormatOf picks the format the caller asked for: ?stream=ndjson|sse, else
// the Accept header; def when neither asks.
func streamFormatOf(r *http.Request, def streamFormat) (streamFormat, error) {
	switch q := r.URL.Query().Get("stream"); q {
	case "ndjson":
		return ndjson, nil
	case "sse":
		return sse, nil
	case "frames":
		return frames, nil
	case "", "false", "none":
	default:
		return noStream, sandbox.Invalid("stream", "%q is not ndjson, sse or frames", truncate(q, 20))
	}
	accept := r.Header.Get("Accept")
	switch {
	case strings.Contains(accept, openapi.FramesMediaType):
		return frames, nil
	case strings.Contains(accept, "application/x-ndjson"), strings.Contains(accept, "application/jsonl"):
		return ndjson, nil
	case strings.Contains(accept, "text/event-stream"):
		return sse, nil
	}
	return def, nil
}

// eventWriter writes the events of one stream. The response begins with the
// first event, so an error before it is still an ordinary error response.
type eventWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	format streamFormat

	mu         sync.Mutex
	begun      bool
	resultSent bool
}

func newEventWriter(w http.ResponseWriter, f streamFormat) *eventWriter {
	return &eventWriter{w: w, rc: http.NewResponseController(w), format: f}
}

func (ew *eventWriter) begin() {
	if ew.begun {
		return
	}
	ew.begun = true
	h := ew.w.Header()
	switch ew.format {
	case sse:
		h.Set("Content-Type", "text/event-stream")
	case frames:
		h.Set("Content-Type", openapi.FramesMediaType)
	default:
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // proxies: do not buffer the stream
	ew.w.WriteHeader(http.StatusOK)
}

// writeExec sends one event of an exec or attach and flushes it: output as
// a frame of its bytes in the frames format, else as a wire event.
func (ew *eventWriter) writeExec(ev sandbox.ExecEvent) error {
	if ew.format == frames && (ev.Stdout != nil || ev.Stderr != nil) {
		kind, data := byte(openapi.FrameStdout), ev.Stdout
		if ev.Stderr != nil {
			kind, data = openapi.FrameStderr, ev.Stderr
		}
		ew.mu.Lock()
		defer ew.mu.Unlock()
		return ew.send(false, frameHeader(kind, len(data)), data)
	}
	wev, ok := wireEvent(ev)
	if !ok {
		return nil
	}
	return ew.write(wev)
}

// write sends one event and flushes it.
func (ew *eventWriter) write(ev openapi.Event) error {
	ew.mu.Lock()
	defer ew.mu.Unlock()
	return ew.writeLocked(ev)
}

func (ew *eventWriter) writeLocked(ev openapi.Event) error {
	b, err := encodeEvent(ew.format, ev)
	if err != nil {
		return err
	}
	return ew.send(ev.Type == openapi.EventResult, b)
}

// send writes one encoded event, in parts, beginning the response if needed,
// and flushes it.
func (ew *eventWriter) send(result bool, parts ...[]byte) error {
	ew.begin()
	if err := ew.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	for _, b := range parts {
		if _, err := ew.w.Write(b); err != nil {
			return err
		}
	}
	if err := ew.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if result {
		ew.resultSent = true
	}
	return nil
}

// end clears the write deadline, so a kept-alive connection is not cut later.
func (ew *eventWriter) end() {
	if ew.begun {
		ew.rc.SetWriteDeadline(time.Time{})
	}
}

// encodeEvent frames ev: one line of JSON for NDJSON; "event: T\ndata: J\n\n"
// for SSE. JSON escapes every control character (NUL, ESC, newlines), so output
// a process prints can never break the framing.
func encodeEvent(f streamFormat, ev openapi.Event) ([]byte, error) {
	// Called directly, not through json.Marshal, which would check and
	// compact what the method returns: a second pass over every chunk.
	b, err := ev.MarshalJSON()
	if err != nil {
		return nil, err
	}
	switch f {
	case sse:
		return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", ev.Type, b), nil
	case frames:
		return append(frameHeader(openapi.FrameEvent, len(b)), b...), nil // small: one write
	}
	return append(b, '\n'), nil
}

// frameHeader is the header of a frame of kind with n bytes of payload
// (openapi.FramesMediaType).
func frameHeader(kind byte, n int) []byte {
	h := make([]byte, 8)
	h[0] = kind
	binary.BigEndian.PutUint32(h[4:], uint32(n))
	return h
}

// wireEvent converts one domain event; ok is false for an empty one.
func wireEvent(ev sandbox.ExecEvent) (openapi.Event, bool) {
	switch {
	case ev.Started != nil:
		return openapi.Event{Type: openapi.EventStarted, ProcessID: ev.Started.ID, PID: ev.Started.PID}, true
	case ev.Stdout != nil:
		s, b64 := openapi.Text(ev.Stdout)
		return openapi.Event{Type: openapi.EventStdout, Data: s, DataBase64: b64}, true
	case ev.Stderr != nil:
		s, b64 := openapi.Text(ev.Stderr)
		return openapi.Event{Type: openapi.EventStderr, Data: s, DataBase64: b64}, true
	case ev.Dropped != nil:
		return openapi.Event{Type: openapi.EventDropped, Stream: ev.Dropped.Stream, Bytes: ev.Dropped.Bytes}, true
	case ev.Result != nil:
		return openapi.Event{Type: openapi.EventResult, Result: wireResult(ev.Result)}, true
	}
	return openapi.Event{}, false
}

// stream runs run, writing its events as they come, then its result. An error
// before the first event is returned for writeError; after it, it becomes an
// error event, the stream's last.
func (s *server) stream(w http.ResponseWriter, r *http.Request, f streamFormat,
	run func(onEvent func(sandbox.ExecEvent) error) (*sandbox.ExecResult, error)) error {
	ew := newEventWriter(w, f)
	defer ew.end()
	res, err := run(ew.writeExec)
	ew.mu.Lock()
	defer ew.mu.Unlock()
	if err != nil {
		if !ew.begun {
			return err
		}
		rt := routeOf(r)
		c := classOf(err)
		body := s.wireError(r, rt, c, err)
		if c.status == http.StatusInternalServerError {
			s.log.ErrorContext(r.Context(), "stream failed", logkey.Op, rt.op, logkey.RequestID, body.Error.RequestID,
				logkey.SandboxID, body.Error.SandboxID, logkey.Err, err)
		}
		if werr := ew.writeLocked(openapi.Event{Type: openapi.EventError, Error: &body.Error}); werr != nil {
			s.log.DebugContext(r.Context(), "stream ended before its error was sent", logkey.Err, werr)
		}
		return nil
	}
	if !ew.resultSent && res != nil {
		if werr := ew.writeLocked(openapi.Event{Type: openapi.EventResult, Result: wireResult(res)}); werr != nil {
			s.log.DebugContext(r.Context(), "stream ended before its result was sent", logkey.Err, werr)
		}
	}
	if !ew.begun { // nothing at all: still a valid, empty stream
		ew.begin()
	}
	return nil
}
