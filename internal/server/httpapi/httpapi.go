// Package httpapi serves the REST API /v1 on net/http.ServeMux. Handlers return
// errors; writeError is the one place an error becomes an HTTP response. The
// contract is api/openapi/openapi.json; a test keeps the routes and it in step.
package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/server/e2bapi"
	"sbx.dev/sbx/internal/tools"
)

// Options configure the API server.
type Options struct {
	Log *slog.Logger
	// MaxBodyBytes bounds JSON request bodies (uploads stream, each bounded
	// by its sandbox's disk quota). 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// BodyGrace, BodyMinRate (bytes a second) and BodyMaxStall set the
	// minimum rate of every request body (bodyrate.go); zero means
	// DefaultBodyGrace, DefaultBodyMinRate and DefaultBodyMaxStall.
	BodyGrace    time.Duration
	BodyMinRate  int64
	BodyMaxStall time.Duration
	// Tools are the agent tools served at /v1/tools and
	// /v1/sandboxes/{id}/tools/{name}; nil means the set over the manager.
	Tools *tools.Set
	// MCP, when set, is served at /mcp behind the same API keys as /v1: the
	// request's context carries its key (manager.KeyFrom).
	MCP http.Handler
	// Preview says how preview URLs are formed and recognised (preview.go).
	Preview PreviewOptions
	// AllowedOrigins are the web origins besides the daemon's own whose
	// pages may open a terminal's WebSocket or call /mcp (origin.go).
	AllowedOrigins []string
	// E2B, when set, serves the requests it matches (E2B's control and data
	// planes, package e2bapi) on the same listener, before any route of /v1.
	E2B Matcher
}

// Matcher is a handler for the requests it matches.
type Matcher interface {
	http.Handler
	Match(r *http.Request) bool
}

// DefaultMaxBodyBytes is the default bound of a JSON request body.
const DefaultMaxBodyBytes = 16 << 20

// server is the /v1 API over one manager.
type server struct {
	m        *manager.Manager
	log      *slog.Logger
	maxBody  int64
	bodyRate bodyRate
	mux      *http.ServeMux
	tools    *tools.Set
	mcp      http.Handler
	terms    *terminals
	preview  preview
	proxy    http.Handler // into sandboxes' ports (preview.go)
	e2b      Matcher
	origins  []string // AllowedOrigins
}

// New returns the /v1 handler over m.
func New(m *manager.Manager, opts Options) http.Handler { return newServer(m, opts) }

func newServer(m *manager.Manager, opts Options) *server {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{
		m:        m,
		log:      log.With(logkey.Component, "httpapi"),
		maxBody:  opts.MaxBodyBytes,
		bodyRate: opts.bodyRate(),
		mux:      http.NewServeMux(),
		tools:    opts.Tools,
		mcp:      opts.MCP,
		terms:    newTerminals(),
		preview:  newPreview(opts.Preview),
		e2b:      opts.E2B,
		origins:  opts.AllowedOrigins,
	}
	s.proxy = s.newProxy()
	if s.tools == nil {
		s.tools = tools.New(m, tools.Options{})
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	for _, rt := range s.routes() {
		s.mux.Handle(rt.method+" "+rt.path, s.handle(rt))
	}
	return s
}

// handlerFunc is the shape of every handler: it writes a success response, or
// returns an error for writeError.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// route is one entry of the routing table, which the OpenAPI test walks.
type route struct {
	method, path string
	op           string // the operation named in errors and logs
	public       bool   // served without an API key
	h            handlerFunc
}

func (s *server) routes() []route {
	const sb = "/v1/sandboxes/{id}"
	return append([]route{
		{"GET", "/v1/health", "health", true, s.health},
		{"GET", "/v1/openapi.json", "openapi", true, s.openAPI},
		{"GET", "/v1/audit", "audit", false, s.audit},
		{"POST", "/v1/keys", "create_key", false, s.createKey},
		{"GET", "/v1/keys", "list_keys", false, s.listKeys},
		{"DELETE", "/v1/keys/{kid}", "revoke_key", false, s.revokeKey},
		{"POST", "/v1/secrets", "set_secret", false, s.setSecret},
		{"GET", "/v1/secrets", "list_secrets", false, s.listSecrets},
		{"GET", "/v1/secrets/{name}", "get_secret", false, s.getSecret},
		{"DELETE", "/v1/secrets/{name}", "delete_secret", false, s.deleteSecret},

		{"POST", "/v1/sandboxes", "create", false, s.create},
		{"GET", "/v1/sandboxes", "list", false, s.list},
		{"GET", sb, "get", false, s.get},
		{"PATCH", sb, "update", false, s.update},
		{"DELETE", sb, "delete", false, s.delete},
		{"PUT", sb + "/network", "set_network", false, s.setNetwork},
		{"GET", sb + "/network/events", "network_events", false, s.networkEvents},

		{"POST", sb + "/exec", "exec", false, s.exec},
		{"GET", sb + "/processes", "list_processes", false, s.processes},
		{"GET", sb + "/processes/{pid}", "get_process", false, s.process},
		{"GET", sb + "/processes/{pid}/output", "attach", false, s.attach},
		{"POST", sb + "/processes/{pid}/wait", "wait_process", false, s.wait},
		{"POST", sb + "/processes/{pid}/stdin", "write_stdin", false, s.stdin},
		{"POST", sb + "/processes/{pid}/signal", "signal", false, s.signal},
		{"GET", sb + "/pty", ptyOp, false, s.pty},

		{"GET", sb + "/files/read", "read_file", false, s.readFile},
		{"PUT", sb + "/files/write", "write_file", false, s.writeFile},
		{"GET", sb + "/files/stat", "stat", false, s.stat},
		{"GET", sb + "/files/list", "list_dir", false, s.listDir},
		{"POST", sb + "/files/mkdir", "make_dir", false, s.makeDir},
		{"POST", sb + "/files/move", "move", false, s.move},
		{"DELETE", sb + "/files", "remove", false, s.remove},
		{"GET", sb + "/files/glob", "glob", false, s.glob},
		{"GET", sb + "/files/grep", "grep", false, s.grep},
		{"GET", sb + "/files/download", "download", false, s.download},
		{"PUT", sb + "/files/upload", "upload", false, s.upload},
		{"GET", sb + "/files/archive", "download_archive", false, s.downloadArchive},
		{"PUT", sb + "/files/archive", "upload_archive", false, s.uploadArchive},
	}, append(s.previewRoutes(sb), s.toolRoutes(sb)...)...)
}

// ServeHTTP sets the request id, puts the body under its minimum rate,
// authenticates, routes, and answers unknown routes with the API's error body.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if sid, port, ok := e2bapi.PortRequest(r); ok && s.e2b != nil {
		if id, err := sandbox.ParseID(sid); err == nil {
			s.servePreviewHost(w, r, id, port) // a sandbox's port, by E2B's routing headers
			return
		}
	}
	if s.e2b != nil && s.e2b.Match(r) {
		s.serveE2B(w, r)
		return
	}
	if id, port, ok := s.preview.parseHost(r.Host); ok {
		s.servePreviewHost(w, r, id, port) // a sandbox's port, not the API
		return
	}
	rid := requestID(r)
	w.Header().Set("X-Request-Id", rid)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, rid))
	r = s.limitBody(w, r)
	if s.mcp != nil && r.URL.Path == mcpPath {
		s.serveMCP(w, r)
		return
	}
	if _, pattern := s.mux.Handler(r); pattern != "" {
		s.mux.ServeHTTP(w, r) // sets the path values
		return
	}
	// No route. Callers without a valid key learn nothing about the route table.
	rw := &responseWriter{ResponseWriter: w}
	began := time.Now()
	_, err := s.authenticate(r)
	if err == nil {
		err = s.noRoute(r)
	}
	s.writeError(rw, r, route{}, err)
	s.logRequest(r, route{}, rw, began)
}

// serveE2B serves a request of E2B's API under the body rate and request
// log every request has.
func (s *server) serveE2B(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	rid := requestID(r)
	w.Header().Set("X-Request-Id", rid)
	r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, rid))
	r = s.limitBody(w, r)
	rw := &responseWriter{ResponseWriter: w}
	s.e2b.ServeHTTP(rw, r)
	s.logRequest(r, route{op: "e2b"}, rw, began)
}

// noRoute says why the mux found no pattern: an unknown path, or a method the
// path does not serve.
func (s *server) noRoute(r *http.Request) error {
	var allowed []string
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := s.mux.Handler(probe); p != "" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) == 0 {
		return fmt.Errorf("route %w: %s", sandbox.ErrNotFound, truncate(r.URL.Path, 200))
	}
	return &methodError{method: r.Method, allowed: allowed}
}

// methodError is a method the path does not serve: 405.
type methodError struct {
	method  string
	allowed []string
}

func (e *methodError) Error() string {
	return fmt.Sprintf("method %s is not allowed here (allowed: %s)", truncate(e.method, 20), strings.Join(e.allowed, ", "))
}

type requestIDKey struct{}

type routeKey struct{}

// routeOf returns the route serving r; the zero route outside handle.
func routeOf(r *http.Request) route {
	rt, _ := r.Context().Value(routeKey{}).(route)
	return rt
}

// RequestID returns the request id the API gave ctx's request.
func RequestID(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(requestIDKey{}).(string)
	return id, ok
}

// requestID returns the caller's X-Request-Id when it is short and plain, else a
// new random one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 64 && strings.Trim(id,
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == "" {
		return id
	}
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// handle adapts rt to http.Handler: auth, recovery, writeError, logging.
func (s *server) handle(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		rw := &responseWriter{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), routeKey{}, rt))
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.ErrorContext(r.Context(), "handler panicked", logkey.Op, rt.op,
					"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				s.writeError(rw, r, rt, fmt.Errorf("handler panicked: %v", p))
			}
			s.logRequest(r, rt, rw, began)
		}()
		var err error
		if !rt.public && rt.op != proxyOp { // the proxy takes a preview token too
			var k manager.Key
			k, err = s.authenticate(r)
			rw.keyID = k.ID
			// The manager counts limits, records owners and audits under it.
			r = r.WithContext(manager.WithKey(r.Context(), k))
			if err == nil {
				err = allowed(k, rt.op)
			}
		}
		if err == nil {
			err = rt.h(rw, r)
		}
		if err != nil {
			if berr := bodyFailure(r); berr != nil {
				err = berr // the cause of whatever the handler saw
			}
			s.writeError(rw, r, rt, err)
		}
	})
}

// authenticate checks the request's bearer token: the Authorization header,
// or for the terminal route the subprotocol list (protocolBearer).
func (s *server) authenticate(r *http.Request) (manager.Key, error) {
	h := r.Header.Get("Authorization")
	if h == "" && routeOf(r).op == ptyOp {
		h = protocolBearer(r)
	}
	if h == "" {
		how := "Authorization: Bearer <API key>"
		if routeOf(r).op == ptyOp {
			how += ", or the WebSocket subprotocol " + openapi.PtyBearerPrefix + "<API key> alongside " + openapi.PtySubprotocol
		}
		return manager.Key{}, fmt.Errorf("%w: no API key given (%s)", sandbox.ErrUnauthenticated, how)
	}
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return manager.Key{}, fmt.Errorf("%w: the Authorization header is not \"Bearer <API key>\"", sandbox.ErrUnauthenticated)
	}
	k, err := s.m.Authenticate(r.Context(), token)
	if err == nil && k.ID == "" {
		err = fmt.Errorf("%w: invalid API key", sandbox.ErrUnauthenticated) // never trust a zero key
	}
	if err != nil {
		return manager.Key{}, err
	}
	return k, nil
}

func (s *server) logRequest(r *http.Request, rt route, rw *responseWriter, began time.Time) {
	if !s.log.Enabled(r.Context(), slog.LevelDebug) {
		return
	}
	rid, _ := RequestID(r.Context())
	attrs := []any{logkey.RequestID, rid, logkey.Method, r.Method, logkey.Status, rw.status,
		logkey.Duration, time.Since(began)}
	if rt.op != "" {
		attrs = append(attrs, logkey.Op, rt.op)
	}
	if id := r.PathValue("id"); id != "" {
		attrs = append(attrs, logkey.SandboxID, truncate(id, 64))
	}
	if rw.keyID != "" {
		attrs = append(attrs, logkey.KeyID, rw.keyID)
	}
	s.log.DebugContext(r.Context(), "request", attrs...)
}

// responseWriter records the status for the log and whether the header went.
type responseWriter struct {
	http.ResponseWriter
	status int
	keyID  string
}

func (rw *responseWriter) WriteHeader(code int) {
	if rw.status == 0 {
		rw.status = code
	}
	rw.ResponseWriter.WriteHeader(code)
}

func (rw *responseWriter) Write(b []byte) (int, error) {
	if rw.status == 0 {
		rw.status = http.StatusOK
	}
	return rw.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (rw *responseWriter) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

func (rw *responseWriter) wroteHeader() bool { return rw.status != 0 }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
