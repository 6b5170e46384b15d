// This file serves E2B's data plane: a request for a sandbox's envd (port
// 49983) is checked (access token, the owner's capabilities, the routes envd
// has) and forwarded to the sandbox's agent, which speaks envd's Connect
// services and /files itself; one for its code interpreter (port 49999)
// goes to the CodeInterpreter. A wrong token is refused before the sandbox
// is looked at; a sandbox that is not running is E2B's 502, which the SDK
// reads as "the sandbox was killed".

package e2bapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/internal/fullduplex"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/tools"
)

// maxStartBytes bounds the Start request read to learn the command's argv0
// for the audit; a larger one is refused (the agent refuses it too).
const maxStartBytes = 4 << 20

// serveData checks and serves one data-plane request for sandbox sid's port.
func (h *Handler) serveData(w http.ResponseWriter, r *http.Request, sid string, port int) {
	id, err := sandbox.ParseID(sid)
	if err != nil {
		h.gone(w, sid)
		return
	}
	health := port == EnvdPort && r.Method == http.MethodGet && r.URL.Path == "/health"
	if !health && !h.tokenValid(r, id) {
		writeJSON(w, http.StatusUnauthorized, apiError{Code: http.StatusUnauthorized,
			Message: fmt.Sprintf("sandbox %s: missing or wrong access token (X-Access-Token: the envdAccessToken create and connect return)", id)})
		return
	}
	key, err := h.m.OwnerKey(r.Context(), id)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		h.gone(w, sid)
		return
	case err != nil:
		h.writeError(w, r, err)
		return
	}
	r = r.WithContext(manager.WithKey(r.Context(), key))
	switch port {
	case EnvdPort:
		h.serveEnvd(w, r, id, key)
	case CodeInterpreterPort:
		if h.ci == nil {
			writeJSON(w, http.StatusNotFound, apiError{Code: http.StatusNotFound, Message: "the code interpreter is not served here"})
			return
		}
		h.ci.ServeCodeInterpreter(w, r, id)
	default:
		writeJSON(w, http.StatusNotFound, apiError{Code: http.StatusNotFound, SandboxID: string(id),
			Message: fmt.Sprintf("port %d: E2B routing reaches envd (%d) and the code interpreter (%d); reach other ports by the sandbox's preview URL (sbx url)", port, EnvdPort, CodeInterpreterPort)})
	}
}

// gone is E2B's answer for a sandbox that is not running (or never was).
func (h *Handler) gone(w http.ResponseWriter, sid string) {
	writeJSON(w, http.StatusBadGateway, apiError{Code: http.StatusBadGateway, SandboxID: truncate(sid, 64),
		Message: "The sandbox was not found"})
}

// tokenValid checks the request's access token: X-Access-Token, the traffic
// token header the code interpreter's client sends, or for /files a URL
// signed with the token (uploadUrl/downloadUrl).
func (h *Handler) tokenValid(r *http.Request, id sandbox.ID) bool {
	for _, name := range []string{headerAccessToken, headerTraffic} {
		if t := r.Header.Get(name); t != "" {
			return h.m.AccessTokenValid(id, t)
		}
	}
	if r.URL.Path != "/files" || r.URL.Query().Get("signature") == "" {
		return false
	}
	return h.signatureValid(r, id)
}

// signatureValid checks a signed /files URL: "v1_" + base64(sha256(
// "<path>:<read|write>:<username>:<token>[:<expiration>]")), unpadded, with
// an expiration (unix seconds) not yet past.
func (h *Handler) signatureValid(r *http.Request, id sandbox.ID) bool {
	q := r.URL.Query()
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	token, err := h.m.AccessToken(context.Background(), id) // the daemon's own call: no key
	if err != nil {
		return false
	}
	msg := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + token
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || time.Now().Unix() > n {
			return false
		}
		msg += ":" + exp
	}
	sum := sha256.Sum256([]byte(msg))
	want := "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
	return subtle.ConstantTimeCompare([]byte(q.Get("signature")), []byte(want)) == 1
}

// envdRoute says what an envd request needs: the capability its owner must
// hold, or ok false for a route envd does not have.
func envdRoute(r *http.Request) (capability string, ok bool) {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/process.Process/"):
		return tools.CapExec, true
	case r.Method == http.MethodPost && strings.HasPrefix(p, "/filesystem.Filesystem/"):
		return tools.CapFiles, true
	case p == "/files" && (r.Method == http.MethodGet || r.Method == http.MethodPost):
		return tools.CapFiles, true
	case p == "/health" && r.Method == http.MethodGet:
		return "", true
	}
	return "", false
}

// serveEnvd forwards an envd request to the sandbox's agent.
func (h *Handler) serveEnvd(w http.ResponseWriter, r *http.Request, id sandbox.ID, key manager.Key) {
	capability, ok := envdRoute(r)
	if !ok {
		writeJSON(w, http.StatusNotFound, apiError{Code: http.StatusNotFound, SandboxID: string(id),
			Message: fmt.Sprintf("%s %s is not a route of envd", r.Method, truncate(r.URL.Path, 200))})
		return
	}
	if capability != "" && !key.Can(capability) {
		h.envdError(w, r, &sandbox.Error{Op: "forward", ID: id, Err: fmt.Errorf("%w: access denied: %s", sandbox.ErrDenied, capability)})
		return
	}
	hc, err := h.m.AgentHTTP(r.Context(), id)
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrAgentLost) || errors.Is(err, sandbox.ErrWrongState) {
			h.gone(w, string(id))
			return
		}
		h.envdError(w, r, err)
		return
	}
	if r.URL.Path == "/process.Process/Start" {
		done, err := h.admitStart(r, id)
		if err != nil {
			h.envdError(w, r, err)
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			var err error
			if rec.status >= 400 {
				err = fmt.Errorf("the agent answered %d", rec.status)
			}
			done(err)
		}()
		w = rec
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: "http", Host: "agent", Path: pr.In.URL.Path, RawPath: pr.In.URL.RawPath, RawQuery: pr.In.URL.RawQuery}
			pr.Out.Host = "agent"
			for _, name := range []string{headerAccessToken, headerTraffic, headerSandboxID, headerSandboxPort, "X-Api-Key", "Authorization", "Cookie"} {
				pr.Out.Header.Del(name)
			}
		},
		Transport:     hc.Transport,
		FlushInterval: -1, // streams (process output, watches) go out as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the caller went away
			}
			h.log.WarnContext(r.Context(), "forwarding to the agent failed", logkey.SandboxID, id, "path", r.URL.Path, logkey.Err, err)
			writeJSON(w, http.StatusBadGateway, apiError{Code: http.StatusBadGateway, SandboxID: string(id),
				Message: fmt.Sprintf("sandbox %s: its agent did not answer: %v", id, err)})
		},
	}
	// Full duplex: the agent answers a stream's request at once (a Connect's
	// start event). Without it that answer, under load, came before the
	// transport's last read of the request body, which the server had
	// closed meanwhile: the agent connection was cut, and the SDK's stream
	// ended ("terminated") with the process running on.
	fullduplex.Serve(rp, w, r)
}

// admitStart reads a process.Process/Start request to learn the command,
// puts the body back for the agent, and admits the start under the owner's
// exec rate (audited by argv0, as every exec is).
func (h *Handler) admitStart(r *http.Request, id sandbox.ID) (func(error), error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxStartBytes+1))
	if err != nil {
		return nil, &sandbox.Error{Op: "exec", ID: id, Err: fmt.Errorf("%w: reading the request: %v", sandbox.ErrInvalid, err)}
	}
	if len(body) > maxStartBytes {
		return nil, &sandbox.Error{Op: "exec", ID: id, Err: fmt.Errorf("%w: the start request is over %d bytes", sandbox.ErrTooLarge, maxStartBytes)}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	msg := body
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/connect+") && len(body) >= 5 {
		if n := binary.BigEndian.Uint32(body[1:5]); int(n) <= len(body)-5 {
			msg = body[5 : 5+n]
		}
	}
	var start struct {
		Process struct {
			Cmd string `json:"cmd"`
		} `json:"process"`
	}
	json.Unmarshal(msg, &start) // a malformed request is the agent's to refuse
	return h.m.AdmitDirectStart(r.Context(), id, start.Process.Cmd)
}

// envdError answers err as envd would: Connect's JSON error for an RPC
// (its code decides the SDK's error class), E2B's error body otherwise.
func (h *Handler) envdError(w http.ResponseWriter, r *http.Request, err error) {
	if !strings.HasPrefix(r.URL.Path, "/process.Process/") && !strings.HasPrefix(r.URL.Path, "/filesystem.Filesystem/") {
		h.writeError(w, r, err)
		return
	}
	code := "internal"
	switch statusOf(err) {
	case http.StatusUnauthorized:
		code = "unauthenticated"
	case http.StatusForbidden:
		code = "permission_denied"
	case http.StatusNotFound:
		code = "not_found"
	case http.StatusBadRequest:
		code = "invalid_argument"
	case http.StatusTooManyRequests:
		code = "resource_exhausted"
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		code = "unavailable"
	case http.StatusRequestEntityTooLarge:
		code = "resource_exhausted"
	}
	if after, ok := manager.RetryAfter(err); ok {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((after+time.Second-1)/time.Second), 10))
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/connect+") {
		// A stream's error travels in its end-of-stream message, with 200.
		w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusOK)
		end, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": err.Error()}})
		var hdr [5]byte
		hdr[0] = 0x02
		binary.BigEndian.PutUint32(hdr[1:], uint32(len(end)))
		w.Write(append(hdr[:], end...))
		return
	}
	writeJSON(w, statusOf(err), map[string]any{"code": code, "message": err.Error(), "details": []any{}})
}

// statusRecorder remembers the status written through it, and flushes.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush flushes through whatever wraps the connection's writer: a wrapper
// that only unwraps (as the API's own does) still reaches its Flush. Without
// it a Start stream's first event, alone, stayed in the server's buffer
// until 4 KiB of output or the end followed (a quiet background command
// never reached the SDK's start).
func (s *statusRecorder) Flush() {
	http.NewResponseController(s.ResponseWriter).Flush()
}
