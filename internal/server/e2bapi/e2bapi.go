// Package e2bapi serves E2B's API over sbx, on the daemon's listener beside
// /v1, so that apps written against E2B's official SDKs run on sbx with
// E2B_API_URL and E2B_SANDBOX_URL set to the daemon's URL and E2B_API_KEY to
// an sbx key. The wire contract is docs/E2B-CONTRACT.md in the repository.
//
// Two planes:
//   - the control plane (control.go), E2B's REST API (/v2/sandboxes,
//     /sandboxes/{id}/…), authenticated by X-API-Key with sbx's own keys, their
//     capabilities, limits and ownership;
//   - the data plane (data.go), what E2B serves inside a sandbox: envd
//     (port 49983: its Connect services process.Process and
//     filesystem.Filesystem, /files, /health), which the sandbox's agent already
//     speaks and is forwarded to it, and the code interpreter (port 49999),
//     served by the daemon over the persistent Python REPL. Requests are routed
//     by the E2b-Sandbox-Id and E2b-Sandbox-Port headers the SDKs send, or by a
//     Host of <port>-<id>.<domain>, and authenticated by the sandbox's access
//     token (X-Access-Token), which create and connect return to the owner.
package e2bapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
)

// EnvdVersion is the envd version sbx reports: the SDK gates features on it
// (E2B-CONTRACT.md §1), and the agent implements every gate up to 0.6.4.
const EnvdVersion = "0.6.4"

// Ports of E2B's in-sandbox services.
const (
	EnvdPort            = 49983
	CodeInterpreterPort = 49999
)

// Routing headers the SDKs send on every data-plane request.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
	headerAccessToken = "X-Access-Token"
	headerTraffic     = TrafficHeader
)

// TrafficHeader carries a sandbox's access token to its ports, as E2B's SDKs
// send it; the preview proxy takes it in place of a preview token.
const TrafficHeader = "E2b-Traffic-Access-Token"

// PortRequest reports whether r is routed by E2B's headers to a port of a
// sandbox other than envd's and the code interpreter's: the preview proxy
// serves those.
func PortRequest(r *http.Request) (id string, port int, ok bool) {
	id = r.Header.Get(headerSandboxID)
	if id == "" {
		return "", 0, false
	}
	port, err := strconv.Atoi(r.Header.Get(headerSandboxPort))
	if err != nil || port == EnvdPort || port == CodeInterpreterPort {
		return "", 0, false
	}
	return id, port, true
}

// CodeInterpreter serves the code interpreter's routes (port 49999) of one
// sandbox; the request is authenticated and carries the owner's key.
type CodeInterpreter interface {
	ServeCodeInterpreter(w http.ResponseWriter, r *http.Request, id sandbox.ID)
}

// Options configure the handler.
type Options struct {
	Log *slog.Logger
	// Domain, when set, routes requests whose Host is <port>-<id>.<Domain>
	// (ports 49983 and 49999) to the data plane, for clients that reach
	// sandboxes by name rather than by E2B_SANDBOX_URL.
	Domain string
	// CodeInterpreter serves port 49999; nil answers it 404.
	CodeInterpreter CodeInterpreter
	// ClientID is reported as every sandbox's clientID (deprecated upstream).
	ClientID string
}

// Handler is the E2B API over one manager.
type Handler struct {
	m      *manager.Manager
	log    *slog.Logger
	domain string
	ci     CodeInterpreter
	client string
	mux    *http.ServeMux
	// cpu keeps each sandbox's last CPU reading (metrics), dropped when
	// the sandbox goes.
	cpu sync.Map // sandbox.ID → cpuSample
}

// New returns the E2B API over m.
func New(m *manager.Manager, opts Options) *Handler {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{m: m, log: log.With(logkey.Component, "e2bapi"), domain: strings.ToLower(opts.Domain),
		ci: opts.CodeInterpreter, client: opts.ClientID, mux: http.NewServeMux()}
	if h.client == "" {
		h.client = "sbx"
	}
	h.routes()
	if m != nil {
		m.OnGone(func(id sandbox.ID) { h.cpu.Delete(id) })
	}
	return h
}

// Match reports whether r is for this handler: a data-plane request (its
// routing header or host) or a path of E2B's control plane.
func (h *Handler) Match(r *http.Request) bool {
	if r.Header.Get(headerSandboxID) != "" {
		return true
	}
	if _, _, ok := h.parseHost(r.Host); ok {
		return true
	}
	p := r.URL.Path
	if p == "/files" && r.URL.Query().Has("signature") {
		return true // a signed URL (uploadUrl, downloadUrl) without its sandbox
	}
	for _, prefix := range controlPrefixes {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			return true
		}
	}
	return false
}

// controlPrefixes are the paths of E2B's control plane: sandboxes, and what
// sbx does not serve (templates, snapshots, volumes), which answers E2B's
// error shape naming the call rather than /v1's.
var controlPrefixes = []string{"/sandboxes", "/v2/sandboxes", "/snapshots", "/templates", "/v2/templates",
	"/v3/templates", "/volumes"}

// ServeHTTP serves a request Match accepted.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if sid := r.Header.Get(headerSandboxID); sid != "" {
		port, err := strconv.Atoi(r.Header.Get(headerSandboxPort))
		if err != nil {
			port = EnvdPort // the header is always sent; an old client means envd
		}
		h.serveData(w, r, sid, port)
		return
	}
	if sid, port, ok := h.parseHost(r.Host); ok {
		h.serveData(w, r, sid, port)
		return
	}
	if r.URL.Path == "/files" {
		writeJSON(w, http.StatusBadRequest, apiError{Code: http.StatusBadRequest, Message: "a signed /files URL names no sandbox on a " +
			"shared E2B_SANDBOX_URL: send the E2b-Sandbox-Id header with it, or reach the sandbox by host (49983-<id>.<domain>)"})
		return
	}
	h.serveControl(w, r)
}

// parseHost splits <port>-<id>.<domain> for the ports E2B's services use.
func (h *Handler) parseHost(host string) (id string, port int, ok bool) {
	if h.domain == "" {
		return "", 0, false
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	label, rest, found := strings.Cut(strings.ToLower(host), ".")
	if !found || rest != h.domain {
		return "", 0, false
	}
	ps, sid, found := strings.Cut(label, "-")
	if !found {
		return "", 0, false
	}
	port, err := strconv.Atoi(ps)
	if err != nil || (port != EnvdPort && port != CodeInterpreterPort) {
		return "", 0, false
	}
	return sid, port, true
}

// apiError is E2B's error body: code is the HTTP status, which the SDK
// checks (a 404 whose code is not the number 404 is not "not found" to it).
type apiError struct {
	Code      int    `json:"code"`
	Message   string `json:"message"`
	SandboxID string `json:"sandboxId,omitempty"`
}

// statusOf maps sbx's error classes to the HTTP statuses E2B's SDK turns into
// its error classes.
func statusOf(err error) int {
	switch {
	case errors.Is(err, sandbox.ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, sandbox.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, sandbox.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, sandbox.ErrDenied):
		return http.StatusForbidden
	case errors.Is(err, sandbox.ErrLimit):
		return http.StatusTooManyRequests
	case errors.Is(err, sandbox.ErrExists), errors.Is(err, sandbox.ErrWrongState):
		return http.StatusConflict
	case errors.Is(err, sandbox.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, sandbox.ErrNoSpace):
		return http.StatusInsufficientStorage
	case errors.Is(err, sandbox.ErrTimeout):
		return http.StatusGatewayTimeout
	case errors.Is(err, sandbox.ErrAgentLost):
		return http.StatusBadGateway
	case errors.Is(err, errors.ErrUnsupported):
		return http.StatusNotImplemented
	case errors.Is(err, sandbox.ErrUnavailable), errors.Is(err, sandbox.ErrIsolation):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// writeError answers err in E2B's error shape. A limit's retry hint becomes
// Retry-After in whole seconds, which the SDK honours before retrying.
func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	if status == http.StatusInternalServerError {
		h.log.ErrorContext(r.Context(), "request failed", logkey.Method, r.Method, "path", r.URL.Path, logkey.Err, err)
	}
	if after, ok := manager.RetryAfter(err); ok && (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((after+time.Second-1)/time.Second), 10))
	}
	writeJSON(w, status, apiError{Code: status, Message: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// authenticate returns r with its API key in the context. E2B's SDK sends
// X-API-Key; a Bearer token (sbx's own form) is taken too.
func (h *Handler) authenticate(r *http.Request) (*http.Request, error) {
	token := r.Header.Get("X-Api-Key")
	if token == "" {
		if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
			token = strings.TrimSpace(a[7:])
		}
	}
	k, err := h.m.Authenticate(r.Context(), token)
	if err != nil {
		return r, err
	}
	return r.WithContext(manager.WithKey(r.Context(), k)), nil
}

// decode reads a JSON body into v; an empty body leaves v as it is.
func decode(r *http.Request, v any) error {
	if r.Body == nil || r.ContentLength == 0 {
		return nil
	}
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return fmt.Errorf("%w: request body: %v", sandbox.ErrInvalid, err)
	}
	return nil
}
