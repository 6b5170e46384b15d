// This file implements one remote sandbox as the adapter holds it: the envd
// clients that reach it (E2B's routing headers and the access token on every
// request), the forwarding of envd's own routes, and its end.

package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"sbx.dev/sbx/api/agent/filesystem/filesystemconnect"
	"sbx.dev/sbx/api/agent/process/processconnect"
	"sbx.dev/sbx/internal/fullduplex"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// E2B's routing headers and the envd port (E2B-CONTRACT.md §2).
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
	headerAccessToken = "X-Access-Token"
	envdPort          = "49983"
)

// remote is one remote sandbox the driver holds.
type remote struct {
	id    sandbox.ID
	rid   string // the remote's own id
	token string // envdAccessToken; never logged
	base  string // where its envd is reached, no trailing slash
	d     *Driver

	proc processconnect.ProcessClient
	fs   filesystemconnect.FilesystemClient
	// hc reaches the remote's envd with the routing headers and the token.
	hc *http.Client

	// ctx ends when the driver lets go of the sandbox (Destroy, Stop, the
	// driver's Close): the goroutines following its processes end then.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	table *table

	findMu    sync.Mutex
	findKnown bool  // guarded by findMu: gnuFind looked
	findErr   error // guarded by findMu: what it found

	mu     sync.Mutex
	conns  map[*serverConn]struct{} // guarded by mu: the adapter's open connections
	closed bool                     // guarded by mu: Dial refuses

	gone     chan struct{} // closed when the remote sandbox is gone or let go
	goneOnce sync.Once
	exit     sandbox.Exit // set before gone closes
}

func (d *Driver) newRemote(id sandbox.ID, rid, token, base string) *remote {
	ctx, cancel := context.WithCancel(d.ctx)
	r := &remote{id: id, rid: rid, token: token, base: base, d: d, ctx: ctx, cancel: cancel,
		table: newTable(), conns: map[*serverConn]struct{}{}, gone: make(chan struct{})}
	r.hc = &http.Client{Transport: &envdTransport{base: d.tr, r: r}}
	opts := []connect.ClientOption{connect.WithProtoJSON(), connect.WithReadMaxBytes(maxRequestBytes)}
	r.proc = processconnect.NewProcessClient(r.hc, base, opts...)
	r.fs = filesystemconnect.NewFilesystemClient(r.hc, base, opts...)
	return r
}

// track adds an adapter connection; false once the sandbox is let go.
func (r *remote) track(c *serverConn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *remote) untrack(c *serverConn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

// end marks the sandbox gone with exit (the first call's stays).
func (r *remote) end(exit sandbox.Exit) {
	r.goneOnce.Do(func() {
		r.exit = exit
		close(r.gone)
	})
}

// release lets go of the sandbox: Dial refuses, the adapter's connections
// close, the goroutines following its processes end (the processes
// themselves are the remote's), waiting for them up to wait.
func (r *remote) release(wait time.Duration) {
	r.mu.Lock()
	r.closed = true
	conns := make([]*serverConn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	r.cancel()
	for _, c := range conns {
		c.Close()
	}
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.d.log.Warn("the adapter's goroutines of a sandbox did not end in time", logkey.SandboxID, r.id, "waited", wait)
	}
}

// killAll ends the local view of every process still running: the remote
// sandbox was killed, and its processes with it.
func (r *remote) killAll() {
	for _, p := range r.table.list() {
		p.finish(nil, reasonSandboxKilled)
	}
}

// timeoutKey carries a process's lifetime to envdTransport, which sends it
// as Connect-Timeout-Ms without bounding the call itself.
type timeoutKey struct{}

// envdTransport adds E2B's routing headers and the access token.
type envdTransport struct {
	base http.RoundTripper
	r    *remote
}

func (t *envdTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	t.r.setHeaders(req.Header)
	if d, ok := req.Context().Value(timeoutKey{}).(time.Duration); ok && d > 0 {
		req.Header.Set("Connect-Timeout-Ms", strconv.FormatInt(max(1, d.Milliseconds()), 10))
	}
	return t.base.RoundTrip(req)
}

func (r *remote) setHeaders(h http.Header) {
	h.Set(headerSandboxID, r.rid)
	h.Set(headerSandboxPort, envdPort)
	h.Del(headerAccessToken)
	if r.token != "" {
		h.Set(headerAccessToken, r.token)
	}
	h.Set("User-Agent", "sbx-e2b-backend")
}

// envdURL is the URL of an envd route of the remote.
func (r *remote) envdURL(path string, q url.Values) string {
	u := r.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// forward serves a route of envd's own by sending it on to the remote.
func forward(w http.ResponseWriter, req *http.Request) {
	r := remoteOf(req.Context())
	if r == nil {
		http.Error(w, "no sandbox", http.StatusInternalServerError)
		return
	}
	base, err := url.Parse(r.base)
	if err != nil {
		writeHTTPError(w, http.StatusInternalServerError, fmt.Sprintf("sandbox %s: its envd's URL %q: %v", r.id, r.base, err))
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(base)
			pr.Out.URL.Path = base.Path + pr.In.URL.Path
			pr.Out.URL.RawPath = ""
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			for _, h := range []string{"Authorization", "Cookie", "X-Api-Key"} {
				pr.Out.Header.Del(h)
			}
			r.setHeaders(pr.Out.Header)
		},
		Transport:     r.d.tr,
		FlushInterval: -1, // streams go out as they come
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if req.Context().Err() != nil {
				return
			}
			writeHTTPError(w, http.StatusBadGateway, fmt.Sprintf("sandbox %s: reaching its remote envd (e2b sandbox %s): %v", r.id, r.rid, err))
		},
	}
	// Full duplex, as the daemon's own data plane: the remote may answer a
	// stream before this side's transport has read the request body's end.
	fullduplex.Serve(rp, w, req)
}

// writeHTTPError answers an HTTP route with envd's error body.
func writeHTTPError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}

// health asks the remote's envd whether it serves (GET /health: 204).
func (r *remote) health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.envdURL("/health", nil), nil)
	if err != nil {
		return err
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: reaching its remote envd (e2b sandbox %s): %v", r.id, r.rid, err))
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: its remote envd (e2b sandbox %s) answered %d: %s", r.id, r.rid, resp.StatusCode, errorMessage(resp, b)))
	}
	return nil
}

// remoteErr is the error of a call to the remote's envd as the adapter
// answers it: the remote's own code and message, except that a refused
// token or an unreachable remote is the remote's unavailability.
func (r *remote) remoteErr(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		switch ce.Code() {
		case connect.CodeUnauthenticated:
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: its remote envd refused the access token: %s", r.id, ce.Message()))
		case connect.CodeUnavailable:
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: its remote envd (e2b sandbox %s) is unavailable: %s", r.id, r.rid, ce.Message()))
		case connect.CodeUnknown, connect.CodeInternal:
			var ne net.Error
			if errors.As(err, &ne) {
				return connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: reaching its remote envd: %v", r.id, err))
			}
		}
		return connect.NewError(ce.Code(), errors.New(ce.Message()))
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("sandbox %s: reaching its remote envd: %v", r.id, err))
}
