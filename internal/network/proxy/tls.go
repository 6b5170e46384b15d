package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// recordHandshake is the TLS record type of a ClientHello.
const recordHandshake = 0x16

// maxHello bounds the ClientHello the proxy reads ahead: one record.
const maxHello = 5 + 16384

// errHelloRead ends the TLS handshake run only to read the ClientHello.
var errHelloRead = errors.New("client hello read")

// clientHello reads ahead the ClientHello at the start of br and returns its
// server name ("" when it has none). The bytes stay in br for upstream.
func clientHello(br *bufio.Reader) (string, error) {
	hdr, err := br.Peek(5)
	if err != nil {
		return "", err
	}
	if hdr[0] != recordHandshake {
		return "", errors.New("not a TLS handshake")
	}
	n := 5 + (int(hdr[3])<<8 | int(hdr[4]))
	if n > maxHello {
		return "", errors.New("TLS record too long")
	}
	rec, err := br.Peek(n)
	if err != nil {
		return "", err
	}
	var name string
	seen := false
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name, seen = h.ServerName, true
		return nil, errHelloRead
	}}
	tls.Server(readOnly{r: strings.NewReader(string(rec))}, cfg).HandshakeContext(context.Background())
	if !seen {
		return "", errors.New("malformed TLS ClientHello")
	}
	return name, nil
}

// readOnly is a net.Conn over the bytes read ahead; writes (the alert the
// aborted handshake sends) go nowhere.
type readOnly struct {
	net.Conn
	r io.Reader
}

func (c readOnly) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c readOnly) Write(p []byte) (int, error)      { return len(p), nil }
func (c readOnly) Close() error                     { return nil }
func (c readOnly) SetDeadline(time.Time) error      { return nil }
func (c readOnly) SetReadDeadline(time.Time) error  { return nil }
func (c readOnly) SetWriteDeadline(time.Time) error { return nil }
func (c readOnly) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c readOnly) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// tls passes a TLS connection through to the server its SNI names (at port),
// or, without SNI, to its destination address if that alone is allowed.
// Inside a CONNECT tunnel, want is the tunnel's host: an SNI naming another
// host is fronting, refused.
func (k *conn) tls(port uint16, want string) {
	k.c.SetReadDeadline(time.Now().Add(k.p.cfg.FirstBytes))
	sni, err := clientHello(k.br)
	k.c.SetReadDeadline(time.Time{})
	dst := k.dst.String()
	if want != "" {
		dst = net.JoinHostPort(want, strconv.Itoa(int(port)))
	}
	if err != nil {
		k.refuse("tls", dst, err.Error())
		return
	}
	sni = strings.TrimSuffix(strings.ToLower(sni), ".")
	if want != "" {
		if sni != "" && sni != strings.ToLower(want) {
			k.refuse("tls", dst, "SNI "+sni+" differs from the CONNECT target "+want)
			return
		}
		// The tunnel's target was judged (and logged) when it was opened.
		if k.intercepts(want) {
			k.intercept(want, port)
			return
		}
		up, _, err := k.p.dial(context.Background(), k.policy(), want, port)
		if err != nil {
			k.refuse("tls", dst, err.Error())
			return
		}
		k.pipe(up)
		return
	}
	if sni == "" {
		k.raw()
		return
	}
	dst = net.JoinHostPort(sni, strconv.Itoa(int(port)))
	if k.intercepts(sni) {
		if _, err := k.p.resolve(context.Background(), k.policy(), sni); err != nil {
			k.refuse("tls", dst, err.Error())
			return
		}
		k.intercept(sni, port)
		return
	}
	up, rule, err := k.p.dial(context.Background(), k.policy(), sni, port)
	if err != nil {
		k.refuse("tls", dst, err.Error())
		return
	}
	k.event("tls", dst, rule, true)
	k.pipe(up)
}

// hostPort splits host[:port], defaulting the port.
func hostPort(s string, def uint16) (string, uint16, error) {
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return "", 0, errors.New("bad port in " + strconv.Quote(s))
		}
		return h, uint16(n), nil
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if s == "" {
		return "", 0, errors.New("no host")
	}
	return s, def, nil
}

// intercepts says whether TLS to name is to be terminated: the sandbox has a
// proxy-mode secret for it.
func (k *conn) intercepts(name string) bool {
	return k.p.cfg.Secrets != nil && k.p.cfg.Leaf != nil && k.p.cfg.Secrets.Intercept(k.sb.ID, name)
}

// intercept terminates the sandbox's TLS to name with a certificate of the
// daemon's CA (which the sandbox trusts) and serves its requests as HTTP,
// each held to name, with proxy-mode secrets put in and sent on over TLS
// verified against the upstream's certificate.
func (k *conn) intercept(name string, port uint16) {
	dst := net.JoinHostPort(name, strconv.Itoa(int(port)))
	leaf, err := k.p.cfg.Leaf(name)
	if err != nil {
		k.refuse("tls", dst, "issuing a certificate: "+err.Error())
		return
	}
	tc := tls.Server(&bufConn{Conn: k.c, r: k.br}, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	k.c.SetDeadline(time.Now().Add(k.p.cfg.FirstBytes))
	err = tc.Handshake()
	k.c.SetDeadline(time.Time{})
	if err != nil {
		k.refuse("tls", dst, "TLS with the proxy: "+err.Error())
		return
	}
	k.event("tls", dst, "terminated for proxy-mode secrets", true)
	k.serveHTTPOn(tc, false, dst, true)
}
