// Package client is the Go SDK of sbx: the client of its HTTP API /v1, which
// the CLI and the end-to-end tests use too. Import it as sbx.dev/sbx/client.
// Errors from the API decode into an *Error wrapping the matching class, so
// errors.Is(err, client.ErrNotFound) holds on this side as on the daemon's.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/sandbox"
)

// Client talks to one sbx daemon. It is safe for concurrent use.
type Client struct {
	base   string // scheme://host, without a trailing slash
	where  string // the address as the user gave it, for messages
	source string // where the address came from: "SBX_URL", "the data dir", …
	key    string
	hc     *http.Client
	ua     string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient replaces the HTTP client (its transport is kept as given, so
// a unix: base URL needs the default client).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.ua = ua } }

// withSource records where the address came from, for the unreachable error.
func withSource(s string) Option { return func(c *Client) { c.source = s } }

// New returns a client of the daemon at baseURL: http://host:port, https://…,
// or unix:/path/to/sbx.sock (HTTP over the socket).
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	c := &Client{where: baseURL, key: apiKey, ua: "sbx-go-client"}
	switch {
	case strings.HasPrefix(baseURL, "unix:"):
		path := strings.TrimPrefix(strings.TrimPrefix(baseURL, "unix:"), "//")
		if path == "" {
			return nil, fmt.Errorf("%w: base URL %q names no socket", sandbox.ErrInvalid, baseURL)
		}
		var d net.Dialer
		tr := &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "unix", path)
			},
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
		}
		c.hc = &http.Client{Transport: tr}
		c.base = "http://sbx"
	default:
		u, err := url.Parse(baseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: base URL %q is not http://host:port, https://… or unix:/path", sandbox.ErrInvalid, baseURL)
		}
		c.base = u.Scheme + "://" + u.Host + strings.TrimSuffix(u.Path, "/")
		c.hc = &http.Client{}
	}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// URL returns the URL of path on the daemon, for protocols served beside /v1
// (MCP at /mcp). Over a unix socket its host is a placeholder: only
// HTTPClient reaches it.
func (c *Client) URL(path string) string { return c.base + path }

// Address is the daemon's address as it was given (or found), for messages.
func (c *Client) Address() string { return c.where }

// HTTPClient returns an HTTP client of the daemon that sends the API key and
// User-Agent with every request, over the unix socket when the daemon was
// found that way: for clients of other protocols (MCP) that build their own
// requests.
func (c *Client) HTTPClient() *http.Client {
	base := c.hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	return &http.Client{Transport: &authTransport{base: base, key: c.key, ua: c.ua}}
}

// authTransport adds the API key and User-Agent to each request.
type authTransport struct {
	base    http.RoundTripper
	key, ua string
}

func (t *authTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if t.key != "" {
		r.Header.Set("Authorization", "Bearer "+t.key)
	}
	r.Header.Set("User-Agent", t.ua)
	return t.base.RoundTrip(r)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the base.
func (t *authTransport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// request is one call: op names it in errors.
type request struct {
	op     string
	id     string // the sandbox, when the call concerns one
	method string
	path   string
	query  url.Values
	body   any       // marshalled as JSON when set
	raw    io.Reader // sent as is (application/octet-stream) when set
	accept string
	header http.Header // more request headers
}

// do sends req and returns the response when its status is 2xx; otherwise the
// decoded error. The caller closes the body.
func (c *Client) do(ctx context.Context, req request) (*http.Response, error) {
	var body io.Reader
	ctype := ""
	switch {
	case req.body != nil:
		b, err := json.Marshal(req.body)
		if err != nil {
			return nil, &sandbox.Error{Op: req.op, ID: sandbox.ID(req.id), Err: fmt.Errorf("%w: %v", sandbox.ErrInvalid, err)}
		}
		body, ctype = bytes.NewReader(b), "application/json"
	case req.raw != nil:
		body, ctype = req.raw, "application/octet-stream"
	}
	u := c.base + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u, body)
	if err != nil {
		return nil, &sandbox.Error{Op: req.op, ID: sandbox.ID(req.id), Err: fmt.Errorf("%w: %v", sandbox.ErrInvalid, err)}
	}
	if req.raw != nil {
		hr.ContentLength = -1 // stream: chunked, never buffered
		if r, ok := req.raw.(interface{ Len() int }); ok {
			hr.ContentLength = int64(r.Len())
		}
	}
	if ctype != "" {
		hr.Header.Set("Content-Type", ctype)
	}
	if req.accept != "" {
		hr.Header.Set("Accept", req.accept)
	}
	for k, vs := range req.header {
		hr.Header[k] = vs
	}
	if c.key != "" {
		hr.Header.Set("Authorization", "Bearer "+c.key)
	}
	hr.Header.Set("User-Agent", c.ua)
	resp, err := c.hc.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &sandbox.Error{Op: req.op, ID: sandbox.ID(req.id), Err: context.Cause(ctx)}
		}
		return nil, &sandbox.Error{Op: req.op, ID: sandbox.ID(req.id), Err: c.unreachable(err)}
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, decodeError(req.op, req.id, resp)
	}
	return resp, nil
}

// call does req and decodes a JSON answer into out (nil: none expected).
func (c *Client) call(ctx context.Context, req request, out any) error {
	resp, err := c.do(ctx, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return &sandbox.Error{Op: req.op, ID: sandbox.ID(req.id), Err: fmt.Errorf("%w: decoding the answer: %v", sandbox.ErrUnavailable, err)}
	}
	return nil
}

// unreachableError is a daemon that did not answer at all.
type unreachableError struct {
	where, source string
	err           error
}

func (e *unreachableError) Error() string {
	src := ""
	if e.source != "" {
		src = " (from " + e.source + ")"
	}
	return fmt.Sprintf("cannot reach the sbx daemon at %s%s: %v; start one with `sbx serve` (or `make run`), or set SBX_URL and SBX_API_KEY",
		e.where, src, unwrapNet(e.err))
}

func (e *unreachableError) Unwrap() []error { return []error{sandbox.ErrUnavailable, e.err} }

func (c *Client) unreachable(err error) error {
	return &unreachableError{where: c.where, source: c.source, err: err}
}

// unwrapNet drops url.Error's "Get "http://sbx/v1/…":" prefix, which names a
// fake host for unix sockets.
func unwrapNet(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// APIError is an error response of the API. It wraps the class its code maps
// to, and is itself wrapped in a *sandbox.Error naming the operation.
type APIError struct {
	Status     int
	Code       string
	Message    string // the message without its "op id: " prefix
	RequestID  string
	RetryAfter time.Duration
	class      error
}

func (e *APIError) Error() string { return e.Message }
func (e *APIError) Unwrap() error { return e.class }

// codes maps each wire code to its error class, both ways.
var codes = []struct {
	code  string
	class error
}{
	{openapi.CodeNotFound, sandbox.ErrNotFound},
	{openapi.CodeAlreadyExists, sandbox.ErrExists},
	{openapi.CodeInvalidArgument, sandbox.ErrInvalid},
	{openapi.CodeFailedPrecondition, sandbox.ErrWrongState},
	{openapi.CodePermissionDenied, sandbox.ErrDenied},
	{openapi.CodeResourceExhausted, sandbox.ErrLimit},
	{openapi.CodeIsolationUnavailable, sandbox.ErrIsolation},
	{openapi.CodeUnavailable, sandbox.ErrUnavailable},
	{openapi.CodeDeadlineExceeded, sandbox.ErrTimeout},
	{openapi.CodeOutOfRange, sandbox.ErrTooLarge},
	{openapi.CodeAgentLost, sandbox.ErrAgentLost},
	{openapi.CodeUnauthenticated, sandbox.ErrUnauthenticated},
	{openapi.CodeUnimplemented, errors.ErrUnsupported},
}

// errInternal is the class of an internal error or an unknown code.
var errInternal = errors.New("internal error")

// classOf maps a wire code to its error class.
func classOf(code string) error {
	for _, c := range codes {
		if c.code == code {
			return c.class
		}
	}
	return errInternal
}

// Code returns the wire code of err's class, "internal" when it has none: the
// CLI's --json errors use it for failures that never reached the API.
func Code(err error) string {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	for _, c := range codes {
		if errors.Is(err, c.class) {
			return c.code
		}
	}
	return openapi.CodeInternal
}

// statusCodes guesses a code from the status of an answer without an error
// body (a proxy's page, say).
var statusCodes = map[int]string{
	400: openapi.CodeInvalidArgument, 401: openapi.CodeUnauthenticated, 403: openapi.CodePermissionDenied,
	404: openapi.CodeNotFound, 409: openapi.CodeFailedPrecondition, 413: openapi.CodeOutOfRange,
	429: openapi.CodeResourceExhausted, 501: openapi.CodeUnimplemented, 502: openapi.CodeUnavailable,
	503: openapi.CodeUnavailable, 504: openapi.CodeDeadlineExceeded,
}

// decodeError turns an error response into a *sandbox.Error wrapping an
// *APIError, so err.Error() reads as the daemon's message.
func decodeError(op, id string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body openapi.ErrorBody
	ae := &APIError{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id")}
	if s := resp.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil {
			ae.RetryAfter = time.Duration(n) * time.Second
		}
	}
	if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		ae.Code, ae.Message = body.Error.Code, body.Error.Message
		if body.Error.RequestID != "" {
			ae.RequestID = body.Error.RequestID
		}
		if body.Error.Op != "" {
			op = body.Error.Op
		}
		if body.Error.SandboxID != "" || body.Error.Op != "" {
			id = body.Error.SandboxID
		}
	} else {
		ae.Code = statusCodes[resp.StatusCode]
		if ae.Code == "" {
			ae.Code = openapi.CodeInternal
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		ae.Message = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, truncate(line, 200))
	}
	ae.class = classOf(ae.Code)
	// The daemon's message starts with "op id: "; keep it once.
	prefix := op + ": "
	if id != "" {
		prefix = op + " " + id + ": "
	}
	ae.Message = strings.TrimPrefix(ae.Message, prefix)
	return &sandbox.Error{Op: op, ID: sandbox.ID(id), Err: ae}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// RetryAfter returns how long the daemon asked to wait before a retry.
func RetryAfter(err error) (time.Duration, bool) {
	var ae *APIError
	if errors.As(err, &ae) && ae.RetryAfter > 0 {
		return ae.RetryAfter, true
	}
	return 0, false
}

// WireError returns err as the API's error body, for the CLI's --json output.
func WireError(err error) openapi.ErrorBody {
	d := openapi.ErrorDetail{Code: Code(err), Message: err.Error()}
	var se *sandbox.Error
	if errors.As(err, &se) {
		d.Op, d.SandboxID = se.Op, string(se.ID)
	}
	var ae *APIError
	if errors.As(err, &ae) {
		d.RequestID = ae.RequestID
	}
	return openapi.ErrorBody{Error: d}
}
