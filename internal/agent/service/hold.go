// This file lets a streaming handler hold back its flushes: Connect flushes
// the response after every message and again after the end of the stream, and
// net/http writes the chunked body's end apart from both, so a process's last
// event left the agent in three writes, each waking the reader again. Held,
// they leave in the one write net/http makes when the handler returns.

package service

import (
	"context"
	"net/http"
	"time"
)

// startedHold is how long an exec whose caller takes no output holds its
// started event back, hoping to send it with the result: a process that
// ends sooner costs the caller one read instead of two.
var startedHold = 2 * time.Millisecond

type heldKey struct{}

// heldWriter is a ResponseWriter whose flushes are skipped while held. Only
// the handler's goroutine uses it, as a ResponseWriter must be.
type heldWriter struct {
	http.ResponseWriter
	held bool
}

func (w *heldWriter) Flush() {
	if !w.held {
		if f, ok := w.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
	}
}

// Unwrap is for http.ResponseController.
func (w *heldWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// holding gives the handlers of h a heldWriter, found through their
// request's context (hold, release).
func holding(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hw := &heldWriter{ResponseWriter: w}
		h.ServeHTTP(hw, r.WithContext(context.WithValue(r.Context(), heldKey{}, hw)))
	})
}

// hold holds the flushes of the response of ctx's request, if it can be: what
// the handler sends from now on leaves when it returns, or at release.
func hold(ctx context.Context) {
	if hw, ok := ctx.Value(heldKey{}).(*heldWriter); ok {
		hw.held = true
	}
}

// release sends what hold held back and stops holding.
func release(ctx context.Context) {
	if hw, ok := ctx.Value(heldKey{}).(*heldWriter); ok && hw.held {
		hw.held = false
		hw.Flush()
	}
}
