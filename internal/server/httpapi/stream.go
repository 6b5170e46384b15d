// This file implements streamed responses: exec and attach output as NDJSON (one
// JSON object a line) or server-sent events, flushed event by event.

package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"sbx/api/openapi"
	"sbx/internal/logkey"
	"sbx/internal/sandbox"
)

type streamFormat int

const (
	noStream streamFormat = iota
	ndjson
	sse
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
	case "", "false", "none":
	default:
		return noStream, sandbox.Invalid("stream", "%q is not ndjson or sse", truncate(q, 20))
	}
	accept := r.Header.Get("Accept")
	switch {
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
	if ew.format == sse {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // proxies: do not buffer the stream
	ew.w.WriteHeader(http.StatusOK)
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
	ew.begin()
	if err := ew.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := ew.w.Write(b); err != nil {
		return err
	}
	if err := ew.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if ev.Type == openapi.EventResult {
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
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	if f == sse {
		return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", ev.Type, b), nil
	}
	return append(b, '\n'), nil
}

// wireEvent converts one domain event; ok is false for an empty one.
func wireEvent(ev sandbox.ExecEvent) (openapi.Event, bool) {
	switch {
	case ev.Started != nil:
		return openapi.Event{Type: openapi.EventStarted, ProcessID: ev.Started.ID, PID: ev.Started.PID}, true
	case ev.Stdout != nil:
		s, b64 := text(ev.Stdout)
		return openapi.Event{Type: openapi.EventStdout, Data: s, DataBase64: b64}, true
	case ev.Stderr != nil:
		s, b64 := text(ev.Stderr)
		return openapi.Event{Type: openapi.EventStderr, Data: s, DataBase64: b64}, true
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
	res, err := run(func(ev sandbox.ExecEvent) error {
		wev, ok := wireEvent(ev)
		if !ok {
			return nil
		}
		return ew.write(wev)
	})
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
