// This file implements the minimum rate of request bodies, after Apache's
// mod_reqtimeout: a body has a grace period to begin, every BodyMinRate bytes
// received buy one more second, and no single read waits longer than
// BodyMaxStall. A client that trickles its body (slowloris) is cut off: the
// request fails with 408 and the connection is closed, and an upload it fed
// is aborted, its partial file removed; a body nobody reads (a refused
// request) is drained under the same deadline. The deadline covers reading
// the body only and is lifted once the body has all arrived, so a multi-GB
// upload at any usable speed and a response that streams for an hour are
// never cut.

package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// The defaults of Options.BodyGrace, BodyMinRate and BodyMaxStall.
const (
	DefaultBodyGrace    = 10 * time.Second
	DefaultBodyMinRate  = 1 << 10 // bytes a second
	DefaultBodyMaxStall = 60 * time.Second
)

// bodyRate is the minimum rate of request bodies.
type bodyRate struct {
	grace time.Duration
	rate  int64 // bytes a second
	stall time.Duration
}

func (o Options) bodyRate() bodyRate {
	br := bodyRate{grace: o.BodyGrace, rate: o.BodyMinRate, stall: o.BodyMaxStall}
	if br.grace <= 0 {
		br.grace = DefaultBodyGrace
	}
	if br.rate <= 0 {
		br.rate = DefaultBodyMinRate
	}
	if br.stall <= 0 {
		br.stall = DefaultBodyMaxStall
	}
	return br
}

// due returns the read deadline of a body that began at start and has
// delivered n bytes, for a read beginning now.
func (br bodyRate) due(start, now time.Time, n int64) time.Time {
	rate := time.Duration(br.rate)
	earned := time.Duration(n/br.rate)*time.Second + time.Duration(n%br.rate)*time.Second/rate
	due := start.Add(br.grace + earned)
	if stall := now.Add(br.stall); stall.Before(due) {
		return stall
	}
	return due
}

type bodyKey struct{}

// limitBody puts r's body, when it has one, under the minimum rate; w is the
// connection's own ResponseWriter, whose read deadline it sets. The first
// deadline is set here, not at the first read: a body no handler reads (a
// request refused before it) is drained by net/http before the answer, and
// that must not wait on a trickle either.
func (s *server) limitBody(w http.ResponseWriter, r *http.Request) *http.Request {
	if r.Body == nil || r.Body == http.NoBody {
		return r
	}
	b := &rateBody{body: r.Body, rc: http.NewResponseController(w), rate: s.bodyRate, start: time.Now()}
	if err := b.rc.SetReadDeadline(b.rate.due(b.start, b.start, 0)); err != nil {
		b.rc = nil // not a connection (a test recorder): nothing to bound
	}
	r = r.WithContext(context.WithValue(r.Context(), bodyKey{}, b))
	r.Body = b
	return r
}

// bodyFailure returns the error that cut r's body off, if one did: it, not
// what the handler made of the broken body, is the cause to report.
func bodyFailure(r *http.Request) error {
	if b, ok := r.Context().Value(bodyKey{}).(*rateBody); ok {
		return b.failure()
	}
	return nil
}

// rateBody is a request body read under a deadline that moves with what has
// arrived. Read is called by one goroutine at a time (possibly a transport's,
// forwarding the body); failure may be called from any.
type rateBody struct {
	body  io.ReadCloser
	rc    *http.ResponseController // nil once deadlines prove unsupported
	rate  bodyRate
	start time.Time
	n     int64

	mu  sync.Mutex
	err *bodyTimeoutError // guarded by mu
}

func (b *rateBody) Read(p []byte) (int, error) {
	if err := b.failure(); err != nil {
		return 0, err
	}
	if b.rc != nil {
		if err := b.rc.SetReadDeadline(b.rate.due(b.start, time.Now(), b.n)); err != nil {
			b.rc = nil // not a connection (a test recorder): nothing to bound
		}
	}
	n, err := b.body.Read(p)
	b.n += int64(n)
	switch {
	case err == io.EOF && b.rc != nil:
		// All of it is here. The server now reads on to notice a client that
		// hangs up, and that read must not time out while the response
		// streams: net/http lifts the deadline as it starts that read, and
		// so does this, whatever the server's version does.
		b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		e := &bodyTimeoutError{n: b.n, took: time.Since(b.start), rate: b.rate}
		b.mu.Lock()
		b.err = e
		b.mu.Unlock()
		return n, e
	}
	return n, err
}

func (b *rateBody) Close() error { return b.body.Close() }

func (b *rateBody) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		return nil // a nil *bodyTimeoutError must not become a non-nil error
	}
	return b.err
}

// bodyTimeoutError is a request body that arrived too slowly: 408.
type bodyTimeoutError struct {
	n    int64
	took time.Duration
	rate bodyRate
}

// Unwrap classes the error as a timeout wherever it travels (the audit log).
func (e *bodyTimeoutError) Unwrap() error { return sandbox.ErrTimeout }

func (e *bodyTimeoutError) Error() string {
	return fmt.Sprintf("request body too slow: %d bytes in %s; a body must average %d bytes a second after its first %s and never pause for %s",
		e.n, e.took.Round(100*time.Millisecond), e.rate.rate, durationText(e.rate.grace), durationText(e.rate.stall))
}

// durationText writes d as "10 s" when it is whole seconds.
func durationText(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return d.String()
}
