// This file implements the one translation of errors into HTTP responses.

package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
)

// class is the wire form of an error class.
type class struct {
	err    error
	status int
	code   string
}

// classes is the one table from error classes to status and code; the first
// errors.Is match wins, so an error joining several takes the earliest row.
var classes = []class{
	{sandbox.ErrUnauthenticated, http.StatusUnauthorized, openapi.CodeUnauthenticated},
	{sandbox.ErrNotFound, http.StatusNotFound, openapi.CodeNotFound},
	{sandbox.ErrInvalid, http.StatusBadRequest, openapi.CodeInvalidArgument},
	{sandbox.ErrTooLarge, http.StatusRequestEntityTooLarge, openapi.CodeOutOfRange},
	{sandbox.ErrDenied, http.StatusForbidden, openapi.CodePermissionDenied},
	{sandbox.ErrExists, http.StatusConflict, openapi.CodeAlreadyExists},
	{sandbox.ErrWrongState, http.StatusConflict, openapi.CodeFailedPrecondition},
	{sandbox.ErrLimit, http.StatusTooManyRequests, openapi.CodeResourceExhausted},
	{sandbox.ErrIsolation, http.StatusServiceUnavailable, openapi.CodeIsolationUnavailable},
	{sandbox.ErrUnavailable, http.StatusServiceUnavailable, openapi.CodeUnavailable},
	{sandbox.ErrTimeout, http.StatusGatewayTimeout, openapi.CodeDeadlineExceeded},
	{context.DeadlineExceeded, http.StatusGatewayTimeout, openapi.CodeDeadlineExceeded},
	{sandbox.ErrAgentLost, http.StatusBadGateway, openapi.CodeAgentLost},
	{sandbox.ErrNoSpace, http.StatusInsufficientStorage, openapi.CodeInsufficientStorage},
	{errors.ErrUnsupported, http.StatusNotImplemented, openapi.CodeUnimplemented},
}

var internalClass = class{nil, http.StatusInternalServerError, openapi.CodeInternal}

// classOf returns the wire class of err.
func classOf(err error) class {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return class{sandbox.ErrTooLarge, http.StatusRequestEntityTooLarge, openapi.CodeOutOfRange}
	}
	var bte *bodyTimeoutError
	if errors.As(err, &bte) {
		return class{nil, http.StatusRequestTimeout, openapi.CodeDeadlineExceeded}
	}
	var me *methodError
	if errors.As(err, &me) {
		return class{nil, http.StatusMethodNotAllowed, openapi.CodeUnimplemented}
	}
	if c, ok := portClass(err); ok {
		return c
	}
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return c
		}
	}
	return internalClass
}

// writeError is the only place an error becomes an HTTP response. Errors that
// carry no sandbox.Error are named after the route's operation and sandbox.
func (s *server) writeError(w *responseWriter, r *http.Request, rt route, err error) {
	if w.wroteHeader() {
		// A response is under way (a stream); the stream reports its own errors.
		s.log.DebugContext(r.Context(), "error after the response began", logkey.Op, rt.op, logkey.Err, err)
		return
	}
	c := classOf(err)
	body := s.wireError(r, rt, c, err)
	if c.status == http.StatusInternalServerError {
		// The cause stays in the log; the caller gets the request id to quote.
		s.log.ErrorContext(r.Context(), "request failed", logkey.Op, rt.op, logkey.RequestID, body.Error.RequestID,
			logkey.SandboxID, body.Error.SandboxID, logkey.Err, err)
	}
	h := w.Header()
	switch c.status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusInsufficientStorage:
		after, ok := manager.RetryAfter(err)
		if !ok {
			after = time.Second
		}
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(after.Seconds())), 10))
	case http.StatusUnauthorized:
		h.Set("WWW-Authenticate", `Bearer realm="sbx"`)
	case http.StatusRequestTimeout:
		h.Set("Connection", "close") // the rest of the body is not worth waiting for
	case http.StatusMethodNotAllowed:
		var me *methodError
		errors.As(err, &me)
		h.Set("Allow", strings.Join(me.allowed, ", "))
	}
	writeJSON(w, c.status, body)
}

// wireError builds the {"error":{…}} body of err.
func (s *server) wireError(r *http.Request, rt route, c class, err error) openapi.ErrorBody {
	rid, _ := RequestID(r.Context())
	d := openapi.ErrorDetail{Code: c.code, RequestID: rid}
	var se *sandbox.Error
	if errors.As(err, &se) {
		d.Op, d.SandboxID = se.Op, string(se.ID)
	} else if rt.op != "" {
		d.Op = rt.op
		d.SandboxID = truncate(r.PathValue("id"), 64)
		err = &sandbox.Error{Op: rt.op, ID: sandbox.ID(d.SandboxID), Err: err}
	}
	if c.status == http.StatusInternalServerError {
		d.Message = "internal error; the daemon's log has the cause under request_id " + rid
		if d.Op != "" {
			d.Message = d.Op + ": " + d.Message
		}
	} else {
		d.Message = err.Error()
	}
	return openapi.ErrorBody{Error: d}
}

// writeJSON writes v as the response with status.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, err = w.Write(append(b, '\n'))
	return err
}
