// This file implements preview URLs: the daemon's reverse proxy into the
// ports of a sandbox. A request reaches port P of sandbox ID by its Host,
// <P>-<ID>.<domain> (routed before the API), or by the path
// /v1/sandboxes/ID/proxy/P/… for setups without wildcard DNS. Unless the
// port is public it carries the sandbox's preview token: in the
// X-Sbx-Preview-Token header, the sbx_token query parameter (answered, for a
// GET, with a cookie and a redirect to the URL without it) or that cookie;
// the path form also takes an API key of the sandbox's owner. The token, its
// cookie and an API key the proxy consumed never reach the sandbox. The
// token is accepted here only: every other route wants an API key.

package httpapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/fullduplex"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/server/e2bapi"
)

// proxyOp names the proxied requests in errors, logs and the audit.
const proxyOp = "proxy"

// PreviewOptions say how preview URLs are formed and recognised.
type PreviewOptions struct {
	// Domain: a request whose Host is <port>-<id>.<Domain> is proxied to
	// that port of that sandbox. Empty means "localhost", which browsers and
	// curl resolve, with every subdomain, to loopback.
	Domain string
	// Scheme of the preview URLs handed out: "http" (empty) or "https".
	Scheme string
	// PublicURL is the daemon's address as clients reach it (a TLS proxy in
	// front, say): the base of path URLs, and the port of host URLs. Empty
	// means http://<Listen>.
	PublicURL string
	// Listen is the TCP address the daemon serves on (host:port).
	Listen string
}

// preview is the preview proxy's configuration, resolved.
type preview struct {
	domain, scheme string
	// base is the daemon's URL, without a final slash: path URLs start with it.
	base string
	// hostPort is ":<port>" when host URLs need one, else empty.
	hostPort string
}

func newPreview(o PreviewOptions) preview {
	p := preview{domain: strings.Trim(strings.ToLower(o.Domain), "."), scheme: strings.ToLower(o.Scheme)}
	if p.domain == "" {
		p.domain = "localhost"
	}
	if p.scheme == "" {
		p.scheme = "http"
	}
	port := ""
	if u, err := url.Parse(o.PublicURL); o.PublicURL != "" && err == nil {
		p.base = strings.TrimRight(o.PublicURL, "/")
		port = u.Port()
	} else if host, lport, err := net.SplitHostPort(o.Listen); err == nil {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			host = "localhost"
		}
		p.base = "http://" + net.JoinHostPort(host, lport)
		port = lport
	} else {
		p.base = "http://localhost"
	}
	if port != "" && !(p.scheme == "http" && port == "80") && !(p.scheme == "https" && port == "443") {
		p.hostPort = ":" + port
	}
	return p
}

// urls is how to reach port of sandbox id.
func (p preview) urls(id sandbox.ID, port int, acc manager.PortAccess) openapi.PreviewURL {
	return openapi.PreviewURL{
		Port:    port,
		URL:     fmt.Sprintf("%s://%d-%s.%s%s/", p.scheme, port, id, p.domain, p.hostPort),
		PathURL: fmt.Sprintf("%s/v1/sandboxes/%s/proxy/%d/", p.base, id, port),
		Token:   acc.Token,
		Public:  acc.Public,
	}
}

// parseHost returns the sandbox and port a Host header names,
// <port>-<id>.<domain>[:<listen port>], and false for any other host, which
// the API serves. The port is digits, in range or not (out of range is the
// proxy's 502); the id has sandbox.ParseID's shape.
func (p preview) parseHost(host string) (sandbox.ID, int, bool) {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	label, ok := strings.CutSuffix(host, "."+p.domain)
	if !ok || strings.Contains(label, ".") {
		return "", 0, false
	}
	digits, rest, ok := strings.Cut(label, "-")
	if !ok || digits == "" || len(digits) > 9 || strings.Trim(digits, "0123456789") != "" {
		return "", 0, false
	}
	id, err := sandbox.ParseID(rest)
	if err != nil {
		return "", 0, false
	}
	port, _ := strconv.Atoi(digits) // nine digits at most: no overflow
	return id, port, true
}

// proxyTarget is one proxied request: where it goes and how it was let in.
type proxyTarget struct {
	id   sandbox.ID
	port int
	// path and rawPath are the request's path in the sandbox; query is its
	// query without the token.
	path, rawPath, query string
	// host is the Host header the sandbox gets.
	host string
	// prefix is the path form's prefix (X-Forwarded-Prefix); empty by host.
	prefix string
	// cookiePath scopes the token's cookie: / by host, the prefix by path.
	cookiePath string
	// via says what let the request in: key, token, query, cookie, public.
	via string
	// dropAuth: the Authorization header holds an API key, which never
	// reaches a sandbox, whether or not it let the request in.
	dropAuth bool
	// bad, when set, is what is wrong with the request itself (a malformed
	// id or port), reported once it is let in: an unauthenticated caller
	// learns nothing but 401.
	bad error
	// err is why forwarding failed, if it did (the audit's outcome).
	err error
}

type proxyTargetKey struct{}

func targetOf(ctx context.Context) *proxyTarget {
	t, _ := ctx.Value(proxyTargetKey{}).(*proxyTarget)
	return t
}

// proxyMethods are the methods the path form serves (GET's route serves
// HEAD too); the host form serves any.
var proxyMethods = []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// previewRoutes are the routes of preview URLs: the URL of a port, making a
// port public, and the path form of the proxy (one route per method).
func (s *server) previewRoutes(sb string) []route {
	out := []route{
		{"GET", sb + "/ports/{port}/url", "preview_url", false, s.previewURL},
		{"PUT", sb + "/ports/{port}", "set_port_public", false, s.setPortPublic},
	}
	for _, m := range proxyMethods {
		out = append(out, route{m, sb + "/proxy/{port}/{path...}", proxyOp, false, s.proxyPath})
	}
	return out
}

// pathPort is the {port} of the route.
func pathPort(r *http.Request) (int, error) {
	p := r.PathValue("port")
	n, err := strconv.Atoi(p)
	if err != nil || len(p) > 9 {
		return 0, sandbox.Invalid("port", "%q is not a port number", truncate(p, 20))
	}
	return n, nil
}

func (s *server) previewURL(w http.ResponseWriter, r *http.Request) error {
	port, err := pathPort(r)
	if err != nil {
		return err
	}
	acc, err := s.m.PortAccess(r.Context(), sandboxID(r), port)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store") // it holds the token
	return writeJSON(w, http.StatusOK, s.preview.urls(sandboxID(r), port, acc))
}

func (s *server) setPortPublic(w http.ResponseWriter, r *http.Request) error {
	port, err := pathPort(r)
	if err != nil {
		return err
	}
	var in openapi.PortUpdate
	if err := s.decodeJSON(w, r, &in); err != nil {
		return err
	}
	if in.Public == nil {
		return sandbox.Invalid("public", "is required: true serves the port without a token, false with one")
	}
	acc, err := s.m.SetPortPublic(r.Context(), sandboxID(r), port, *in.Public)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	return writeJSON(w, http.StatusOK, s.preview.urls(sandboxID(r), port, acc))
}

// publicPorts fills the public ports of sandboxes, which the manager handed
// out to the caller (every sandbox's when all, else each one's).
func (s *server) publicPorts(ctx context.Context, sbs []openapi.Sandbox, all bool) error {
	var ids []sandbox.ID
	if !all {
		for _, sb := range sbs {
			ids = append(ids, sandbox.ID(sb.ID))
		}
	}
	if len(sbs) == 0 {
		return nil
	}
	ports, err := s.m.PublicPorts(ctx, ids...)
	if err != nil {
		return err
	}
	for i := range sbs {
		if p := ports[sandbox.ID(sbs[i].ID)]; p != nil {
			sbs[i].PublicPorts = p
		}
	}
	return nil
}

// proxyPath serves the path form, /v1/sandboxes/{id}/proxy/{port}/{path...}:
// the sandbox gets /{path} and the query.
func (s *server) proxyPath(w http.ResponseWriter, r *http.Request) error {
	id := sandbox.ID(truncate(r.PathValue("id"), 64))
	t := &proxyTarget{id: id}
	if _, err := sandbox.ParseID(string(id)); err != nil {
		t.bad = &sandbox.Error{Op: proxyOp, ID: id, Err: fmt.Errorf("sandbox %w", sandbox.ErrNotFound)}
	}
	port, err := pathPort(r)
	if err != nil {
		port, t.bad = -1, cmp.Or(t.bad, err)
	}
	t.port = port
	// The path in the sandbox is what follows the prefix, as sent: escaped
	// slashes and all.
	segs := strings.SplitN(r.URL.EscapedPath(), "/", 7) // "", v1, sandboxes, id, proxy, port, rest
	rest := ""
	if len(segs) == 7 {
		rest = segs[6]
	}
	t.prefix = "/v1/sandboxes/" + string(id) + "/proxy/" + strconv.Itoa(port)
	t.host, t.cookiePath = "127.0.0.1:"+strconv.Itoa(port), t.prefix+"/"
	if t.path, err = url.PathUnescape("/" + rest); err != nil {
		t.bad = cmp.Or(t.bad, sandbox.Invalid("path", "%v", err))
	}
	if escaped := "/" + rest; escaped != (&url.URL{Path: t.path}).EscapedPath() {
		t.rawPath = escaped
	}
	rw, _ := w.(*responseWriter)
	return s.forward(rw, r, t, true /* API key allowed */)
}

// servePreviewHost serves a request whose Host names a sandbox's port,
// instead of the API.
func (s *server) servePreviewHost(w http.ResponseWriter, r *http.Request, id sandbox.ID, port int) {
	r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, requestID(r)))
	r = s.limitBody(w, r)
	rw := &responseWriter{ResponseWriter: w}
	t := &proxyTarget{id: id, port: port, path: r.URL.Path, rawPath: r.URL.RawPath, host: r.Host, cookiePath: "/"}
	if err := s.forward(rw, r, t, false /* tokens only */); err != nil {
		if berr := bodyFailure(r); berr != nil {
			err = berr
		}
		s.writeError(rw, r, route{op: proxyOp}, err)
	}
}

// forward lets r in (previewAuth) and proxies it to t. It returns the error
// that kept it from the proxy; the proxy's own failures are written by
// proxyFailed. Each request let in is audited.
func (s *server) forward(rw *responseWriter, r *http.Request, t *proxyTarget, allowKey bool) error {
	began := time.Now()
	r, err := s.previewAuth(r, t, allowKey)
	if err != nil {
		return err
	}
	if t.bad != nil {
		return t.bad
	}
	defer func() {
		status := rw.status
		if status == 0 && t.err == nil && r.Header.Get("Upgrade") != "" {
			status = http.StatusSwitchingProtocols // written on the hijacked connection
		}
		s.m.AuditProxied(r.Context(), t.id, fmt.Sprintf("%s :%d%s", truncate(r.Method, 16), t.port, truncate(t.path, 512)),
			fmt.Sprintf("status=%d via=%s", status, t.via), t.err)
		if s.log.Enabled(r.Context(), slog.LevelDebug) {
			rid, _ := RequestID(r.Context())
			s.log.DebugContext(r.Context(), "proxied", logkey.RequestID, rid, logkey.SandboxID, t.id, "port", t.port,
				logkey.Method, r.Method, logkey.Status, status, "via", t.via, logkey.Duration, time.Since(began))
		}
	}()
	if t.port < 1 || t.port > 65535 {
		t.err = &sandbox.Error{Op: proxyOp, ID: t.id, Err: &manager.PortError{Port: t.port,
			Msg: fmt.Sprintf("port %d is out of range (1-65535)", t.port)}}
		return t.err
	}
	if t.via == viaQuery {
		// The browser keeps the token in a cookie; a GET goes again to the
		// URL without it, so the token leaves the address bar and history.
		http.SetCookie(rw, &http.Cookie{Name: openapi.PreviewCookie, Value: queryToken(r), Path: t.cookiePath,
			HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.preview.scheme == "https" || r.TLS != nil})
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			loc := r.URL.EscapedPath()
			if t.query != "" {
				loc += "?" + t.query
			}
			rw.Header().Set("Cache-Control", "no-store")
			http.Redirect(rw, r, loc, http.StatusFound)
			return nil
		}
	}
	// Full duplex: the sandbox may answer before it has the whole request
	// (a stream, an upload it refuses early).
	fullduplex.Serve(s.proxy, rw, r.WithContext(context.WithValue(r.Context(), proxyTargetKey{}, t)))
	return nil
}

// How a proxied request was let in.
const (
	viaKey    = "key"
	viaToken  = "token"
	viaQuery  = "query"
	viaCookie = "cookie"
	viaPublic = "public"
	// viaTraffic is the sandbox's access token in E2B's traffic header
	// (e2bapi.TrafficHeader), as E2B's SDKs send it to a sandbox's ports.
	viaTraffic = "e2b-traffic-token"
)

// previewAuth decides whether r may reach t, and how (t.via): an API key of
// the sandbox's owner (path form only; r then carries it), the sandbox's
// token in the header, the query or the cookie, or else a public port. The
// cookie, the one credential a browser sends by itself, counts only for
// requests from the preview's own origin (SECURITY.md AP-13). A wrong token
// is refused whether or not the sandbox exists, so the answer tells nothing
// of other keys' sandboxes. It strips the token from t.query, and marks an
// API key in Authorization to be stripped, in either form.
func (s *server) previewAuth(r *http.Request, t *proxyTarget, allowKey bool) (*http.Request, error) {
	var query string
	query, t.query = stripQuery(r.URL.RawQuery, openapi.PreviewTokenQuery)
	var refusal error
	if scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " "); strings.EqualFold(scheme, "Bearer") {
		k, err := s.authenticate(r)
		switch {
		case err == nil && allowKey:
			t.via, t.dropAuth = viaKey, true
			return r.WithContext(manager.WithKey(r.Context(), k)), nil
		case err == nil:
			t.dropAuth = true // the host form takes no key, and passes none on
		case allowKey:
			refusal = err
		}
	}
	badToken := func(where string) error {
		return &sandbox.Error{Op: proxyOp, ID: t.id, Err: fmt.Errorf("%w: the preview token in the %s is not this sandbox's", sandbox.ErrDenied, where)}
	}
	switch hs := r.Header.Values(openapi.PreviewTokenHeader); {
	case len(hs) == 1 && s.m.PreviewTokenValid(t.id, hs[0]):
		t.via = viaToken
		return r, nil
	case len(hs) > 0 && refusal == nil:
		refusal = badToken(openapi.PreviewTokenHeader + " header")
	}
	switch ts := r.Header.Values(e2bapi.TrafficHeader); {
	case len(ts) == 1 && s.m.AccessTokenValid(t.id, ts[0]):
		t.via = viaTraffic
		return r, nil
	case len(ts) > 0 && refusal == nil:
		refusal = &sandbox.Error{Op: proxyOp, ID: t.id, Err: fmt.Errorf("%w: the access token in the %s header is not this sandbox's", sandbox.ErrDenied, e2bapi.TrafficHeader)}
	}
	if query != "" {
		if s.m.PreviewTokenValid(t.id, query) {
			t.via = viaQuery
			return r, nil
		}
		if refusal == nil {
			refusal = badToken(openapi.PreviewTokenQuery + " query parameter")
		}
	}
	if c, err := r.Cookie(openapi.PreviewCookie); err == nil && s.m.PreviewTokenValid(t.id, c.Value) {
		if o := r.Header.Get("Origin"); o == "" || sameOrigin(o, r.Host) {
			t.via = viaCookie
			return r, nil
		}
		if refusal == nil {
			refusal = &sandbox.Error{Op: proxyOp, ID: t.id, Err: fmt.Errorf("%w: request from another origin; the preview cookie "+
				"counts only for requests from the preview itself (send the %s header instead)", sandbox.ErrDenied, openapi.PreviewTokenHeader)}
		}
	}
	if s.m.PortPublic(r.Context(), t.id, t.port) {
		t.via = viaPublic
		return r, nil
	}
	if refusal != nil {
		return r, refusal
	}
	how := "the " + openapi.PreviewTokenHeader + " header, the " + openapi.PreviewTokenQuery + " query parameter or its cookie"
	if allowKey {
		how += ", or Authorization: Bearer <API key>"
	}
	return r, &sandbox.Error{Op: proxyOp, ID: t.id, Err: fmt.Errorf("%w: port %d needs the sandbox's preview token (%s), unless its owner makes it public",
		sandbox.ErrUnauthenticated, t.port, how)}
}

// queryToken is the token r carries in its query.
func queryToken(r *http.Request) string {
	v, _ := stripQuery(r.URL.RawQuery, openapi.PreviewTokenQuery)
	return v
}

// stripQuery returns the first value of parameter name in raw, and raw
// without any of them, the other parameters as they came.
func stripQuery(raw, name string) (value, rest string) {
	var keep []string
	found := false
	for _, p := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(p, "=")
		if uk, err := url.QueryUnescape(k); err == nil && uk == name {
			if !found {
				value, _ = url.QueryUnescape(v)
				found = true
			}
			continue
		}
		keep = append(keep, p)
	}
	return value, strings.Join(keep, "&")
}

// sameOrigin reports whether Origin header origin is host's (scheme aside).
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, host)
}

// stripCookie removes cookie name from h's Cookie headers, keeping the
// others as they came.
func stripCookie(h http.Header, name string) {
	lines := h.Values("Cookie")
	if len(lines) == 0 {
		return
	}
	var keep []string
	for _, line := range lines {
		for _, part := range strings.Split(line, ";") {
			part = strings.TrimSpace(part)
			if n, _, _ := strings.Cut(part, "="); part == "" || strings.TrimSpace(n) == name {
				continue
			}
			keep = append(keep, part)
		}
	}
	h.Del("Cookie")
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}

// newProxy returns the reverse proxy into sandboxes' ports. Each request
// dials afresh through the manager (no pooled connection outlives the check
// its request passed), and streams both ways as bytes come: responses are
// flushed at once, upgrades (WebSocket) are spliced.
func (s *server) newProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: s.rewrite,
		Transport: &http.Transport{
			// Proxy is nil: HTTP_PROXY in the daemon's environment never
			// applies to a sandbox's port.
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				t := targetOf(ctx)
				if t == nil {
					return nil, errors.New("no preview target in the request")
				}
				return s.m.DialPort(ctx, t.id, t.port)
			},
			DisableKeepAlives:      true,
			DisableCompression:     true,
			MaxResponseHeaderBytes: 1 << 20,
		},
		FlushInterval:  -1,
		ModifyResponse: dropTokenCookie,
		ErrorHandler:   s.proxyFailed,
	}
}

// dropTokenCookie removes from a sandbox's answer any cookie named as the
// preview token's: a page of one sandbox must not overwrite the cookie that
// opens another's (the path form shares the daemon's origin).
func dropTokenCookie(resp *http.Response) error {
	cookies := resp.Header.Values("Set-Cookie")
	if len(cookies) == 0 {
		return nil
	}
	resp.Header.Del("Set-Cookie")
	for _, c := range cookies {
		if name, _, _ := strings.Cut(c, "="); strings.TrimSpace(name) != openapi.PreviewCookie {
			resp.Header.Add("Set-Cookie", c)
		}
	}
	return nil
}

// rewrite is the proxy's Rewrite: the outgoing request goes to the target's
// port, with its path, its query less the token, X-Forwarded-* set, and
// without the token header, its cookie, or an API key the proxy consumed.
func (s *server) rewrite(pr *httputil.ProxyRequest) {
	t := targetOf(pr.In.Context())
	out := pr.Out
	out.URL.Scheme = "http"
	out.URL.Host = "127.0.0.1:" + strconv.Itoa(t.port) // for the request line; DialPort picks the sandbox
	out.URL.Path, out.URL.RawPath, out.URL.RawQuery = t.path, t.rawPath, t.query
	out.Host = t.host
	pr.SetXForwarded()
	if s.preview.scheme == "https" {
		out.Header.Set("X-Forwarded-Proto", "https") // a TLS proxy in front of the daemon
	}
	if t.prefix != "" {
		out.Header.Set("X-Forwarded-Prefix", t.prefix)
	}
	out.Header.Del(openapi.PreviewTokenHeader)
	out.Header.Del(e2bapi.TrafficHeader)
	stripCookie(out.Header, openapi.PreviewCookie)
	if t.dropAuth {
		out.Header.Del("Authorization")
	}
}

// proxyFailed is the proxy's ErrorHandler: it reports why the request did
// not get the sandbox's answer, through writeError.
func (s *server) proxyFailed(w http.ResponseWriter, r *http.Request, err error) {
	t := targetOf(r.Context())
	var se *sandbox.Error
	switch {
	case errors.As(err, &se): // the manager's: not found, nothing listening, …
	case r.Context().Err() != nil: // the client went away
		err = &sandbox.Error{Op: proxyOp, ID: t.id, Err: context.Cause(r.Context())}
	default:
		err = &sandbox.Error{Op: proxyOp, ID: t.id, Err: &manager.PortError{Port: t.port, Err: err,
			Msg: fmt.Sprintf("port %d answered with no valid HTTP response: %v", t.port, err)}}
	}
	t.err = err
	if r.Context().Err() == nil {
		s.log.InfoContext(r.Context(), "preview request failed", logkey.SandboxID, t.id, "port", t.port, logkey.Err, err)
	}
	rw, ok := w.(*responseWriter)
	if !ok {
		rw = &responseWriter{ResponseWriter: w}
	}
	s.writeError(rw, r, route{op: proxyOp}, err)
}

// portClass is the wire class of a *manager.PortError: 504 when the port did
// not answer in time, else 502.
func portClass(err error) (class, bool) {
	var pe *manager.PortError
	if !errors.As(err, &pe) {
		return class{}, false
	}
	if pe.Timeout {
		return class{sandbox.ErrTimeout, http.StatusGatewayTimeout, openapi.CodeDeadlineExceeded}, true
	}
	return class{sandbox.ErrUnavailable, http.StatusBadGateway, openapi.CodeUnavailable}, true
}
