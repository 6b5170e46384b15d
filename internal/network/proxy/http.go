package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"sbx.dev/sbx/internal/fullduplex"
)

// looksHTTP says whether br starts with an HTTP/1 request line's method.
func looksHTTP(br *bufio.Reader) bool {
	b, _ := br.Peek(8)
	i := bytes.IndexByte(b, ' ')
	if i <= 0 {
		return false
	}
	for _, c := range b[:i] {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// serveHTTP serves HTTP/1 requests from the sandbox on this connection,
// judging each by its Host. explicit: the connection came to the proxy port
// (CONNECT, or absolute-form requests). within: the requests come inside a
// CONNECT tunnel to that host:port, and must name it.
func (k *conn) serveHTTP(explicit bool, within string) {
	k.serveHTTPOn(&bufConn{Conn: k.c, r: k.br}, explicit, within, false)
}

// serveHTTPOn is serveHTTP over c; secure: c is TLS the proxy terminated (to
// put proxy-mode secrets in), and the requests go upstream over TLS.
func (k *conn) serveHTTPOn(c net.Conn, explicit bool, within string, secure bool) {
	h := &httpHandler{k: k, explicit: explicit, within: within, secure: secure}
	h.transport = &http.Transport{
		DialContext:           h.dialUpstream,
		DialTLSContext:        h.dialUpstreamTLS,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       60 * time.Second,
		ResponseHeaderTimeout: 0,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
	defer h.transport.CloseIdleConnections()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: k.p.cfg.FirstBytes,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          nil,
	}
	ln := &oneConn{c: c, done: make(chan struct{})}
	h.ln = ln
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			ln.finish()
		}
	}
	go srv.Serve(ln)
	<-ln.done
	h.up.close()
	if h.tunnel != nil { // set before done was closed
		h.tunnel()
	}
}

// bufConn is a connection whose reads go through the proxy's read-ahead.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// ReadFrom lets http's ResponseWriter hand a body to the connection's own
// ReadFrom: splice(2) from another TCP socket.
func (c *bufConn) ReadFrom(r io.Reader) (int64, error) {
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// oneConn is a listener that yields one connection, then waits for it to end.
type oneConn struct {
	c    net.Conn
	once sync.Once
	done chan struct{}
	fin  sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	var c net.Conn
	l.once.Do(func() { c = l.c })
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}
func (l *oneConn) finish()        { l.fin.Do(func() { close(l.done) }) }
func (l *oneConn) Close() error   { return nil }
func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }

type httpHandler struct {
	k        *conn
	explicit bool
	// within is the host:port of the CONNECT tunnel (or the intercepted TLS
	// connection) the requests come in: each must name it.
	within string
	// secure: the requests came over TLS the proxy terminated; they go on
	// over TLS, and proxy-mode secrets may be put in them.
	secure    bool
	transport *http.Transport
	ln        *oneConn
	// up is the plain-HTTP upstream connection (forward.go).
	up upstream
	// tunnel, set by a CONNECT before it ends the server, serves the tunnel.
	tunnel func()
}

// deny answers 403 with the reason and logs it.
func (h *httpHandler) deny(w http.ResponseWriter, proto, dst, rule string) {
	h.k.refuse(proto, dst, rule)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(w, "sbx egress proxy: %s refused: %s\n", dst, rule)
}

func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		h.connect(w, r)
		return
	}
	// The name this request goes to: its Host, or the host of an
	// absolute-form URI, which replaces the Host header (net/http parses it
	// so, per RFC 9112 §3.2.2): what is judged is what is sent.
	host := r.Host
	if r.URL.IsAbs() {
		if r.URL.Scheme != "http" {
			h.deny(w, "http", r.URL.Host, "scheme "+r.URL.Scheme+" (use CONNECT for https)")
			return
		}
	} else if h.explicit && h.within == "" {
		h.deny(w, "http", host, "an origin-form request to the proxy port (want an absolute URI or CONNECT)")
		return
	}
	var def uint16 = 80
	switch {
	case h.within != "":
		_, def, _ = hostPort(h.within, 80)
	case !h.explicit:
		def = h.k.dst.Port()
	}
	name, port, err := hostPort(host, def)
	if err != nil {
		h.deny(w, "http", host, "bad Host: "+err.Error())
		return
	}
	if !h.explicit && h.within == "" {
		port = h.k.dst.Port() // transparent: the port the sandbox dialled
	}
	dst := net.JoinHostPort(name, strconv.Itoa(int(port)))
	if h.within != "" && !strings.EqualFold(dst, h.within) {
		h.deny(w, "http", dst, "Host "+dst+" differs from the CONNECT target "+h.within)
		return
	}
	t, err := h.k.p.resolve(r.Context(), h.k.policy(), name)
	if err != nil {
		h.deny(w, "http", dst, err.Error())
		return
	}
	h.k.event("http", dst, t.rule, true)
	if s := h.k.p.cfg.Secrets; s != nil {
		for _, why := range s.Rewrite(h.k.sb.ID, name, r.Header, h.secure) {
			h.k.refuse("http", dst, why)
		}
	}
	// Plain HTTP goes through the splicing forwarder; TLS the proxy
	// terminated and protocol upgrades (WebSocket) through ReverseProxy.
	if !h.secure && r.Header.Get("Upgrade") == "" {
		if err := h.forward(w, r, name, port, dst); err != nil {
			h.k.refuse("http", dst, "upstream: "+err.Error())
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprintf(w, "sbx egress proxy: %s: %v\n", dst, err)
		}
		return
	}
	scheme := "http"
	if h.secure {
		scheme = "https"
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = dst
			pr.Out.Host = r.Host
			pr.Out.Header.Del("Proxy-Authorization")
			pr.Out.Header.Del("Proxy-Connection")
		},
		Transport:     h.transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			h.k.refuse("http", dst, "upstream: "+err.Error())
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprintf(w, "sbx egress proxy: %s: %v\n", dst, err)
		},
	}
	// Full duplex: the upstream may answer before it has the whole request
	// (a stream, an upload it refuses early).
	fullduplex.Serve(rp, w, r)
}

// dialUpstream is the transport's dial: addr is "name:port" of a request
// already judged; it is judged again (the rules may have changed) and
// resolved and checked by the proxy.
func (h *httpHandler) dialUpstream(ctx context.Context, _, addr string) (net.Conn, error) {
	name, port, err := hostPort(addr, 80)
	if err != nil {
		return nil, err
	}
	c, _, err := h.k.p.dial(ctx, h.k.policy(), name, port)
	return c, err
}

// dialUpstreamTLS dials as dialUpstream and speaks TLS to the upstream,
// verifying its certificate for the name: the other half of an
// intercepted connection.
func (h *httpHandler) dialUpstreamTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := h.dialUpstream(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	name, _, _ := hostPort(addr, 443)
	tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: h.k.p.cfg.UpstreamRoots, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("TLS to %s: %w", addr, err)
	}
	return tc, nil
}

// connect opens a tunnel to the CONNECT target, if allowed, and serves what
// comes through it: TLS is held to the target's name, HTTP to its Host.
func (h *httpHandler) connect(w http.ResponseWriter, r *http.Request) {
	if !h.explicit || h.within != "" {
		h.deny(w, "connect", r.Host, "CONNECT only to the proxy port")
		return
	}
	name, port, err := hostPort(r.Host, 0)
	if err != nil || port == 0 {
		h.deny(w, "connect", r.Host, "CONNECT wants host:port")
		return
	}
	dst := net.JoinHostPort(name, strconv.Itoa(int(port)))
	t, err := h.k.p.resolve(r.Context(), h.k.policy(), name)
	if err != nil {
		h.deny(w, "connect", dst, err.Error())
		return
	}
	h.k.event("connect", dst, t.rule, true)
	hj, ok := w.(http.Hijacker)
	if !ok {
		h.deny(w, "connect", dst, "cannot tunnel")
		return
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	_ = c // the proxy's own connection (h.k.c, read through brw)
	brw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	if err := brw.Flush(); err != nil {
		h.ln.finish()
		return
	}
	h.tunnel = func() {
		inner := &conn{p: h.k.p, c: h.k.c, br: bufio.NewReaderSize(brw.Reader, 16<<10), sb: h.k.sb, src: h.k.src, dst: h.k.dst}
		inner.c.SetReadDeadline(time.Now().Add(h.k.p.cfg.FirstBytes))
		first, err := inner.br.Peek(1)
		inner.c.SetReadDeadline(time.Time{})
		if err != nil {
			return
		}
		switch {
		case first[0] == recordHandshake:
			inner.tls(port, name)
		case looksHTTP(inner.br):
			inner.serveHTTP(false, dst)
		default:
			// Opaque bytes to a name that was allowed: a tunnel.
			up, _, err := h.k.p.dial(context.Background(), inner.policy(), name, port)
			if err != nil {
				inner.refuse("connect", dst, err.Error())
				return
			}
			inner.pipe(up)
		}
	}
	h.ln.finish()
}
