// Package proxy is the egress proxy: every TCP connection a networked sandbox
// opens arrives here (redirected by the router's nftables rules, or sent to
// the gateway's proxy port by a program that honours HTTP(S)_PROXY), and goes
// on only if the sandbox's rules allow where it is going.
//
// Where a connection is going is read from its first bytes, not from the
// address the sandbox dialled: the Host of each HTTP request, the SNI of a TLS
// ClientHello, the target of a CONNECT. The proxy resolves that name itself
// and dials what it resolved, after checking each address against the
// addresses no sandbox may reach (so a name that rebinds to loopback or to
// the metadata service gets nowhere). A connection with no name (neither HTTP
// nor TLS with SNI) is judged by its destination address. TLS is passed
// through, never terminated.
package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"sbx.dev/sbx/internal/network/rules"
)

// Sandbox is what the proxy knows of the sandbox behind a source address.
type Sandbox struct {
	ID    string
	Rules *rules.Set
}

// Event is one connection or request the proxy refused (or, with Allowed,
// let through).
type Event struct {
	Time    time.Time  `json:"time"`
	Sandbox string     `json:"sandbox_id,omitempty"`
	Src     netip.Addr `json:"-"`
	// Dst is the destination as the sandbox gave it: host:port.
	Dst   string `json:"destination"`
	Proto string `json:"protocol"` // http, tls, tcp, connect
	// Rule is why: the matching rule, or what was wrong.
	Rule    string `json:"rule"`
	Allowed bool   `json:"allowed"`
}

// Secrets puts proxy-mode secrets into a sandbox's requests
// (network.Service).
type Secrets interface {
	// Intercept says whether the sandbox has a proxy-mode secret for host:
	// its TLS to host is then terminated.
	Intercept(sandbox, host string) bool
	// Rewrite replaces, in h, the placeholders of the sandbox's secrets
	// whose hosts include host, if secure (TLS all the way). It leaves every
	// other placeholder as it is and returns why, one line each, for the
	// log: never a value.
	Rewrite(sandbox, host string, h http.Header, secure bool) (left []string)
}

// Config configures a Proxy. Policy, OriginalDst, Resolve and Forbidden are
// required.
type Config struct {
	// Policy finds the sandbox behind a source address.
	Policy func(src netip.Addr) (Sandbox, bool)
	// OriginalDst is where a redirected connection was headed.
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// Gateway and ExplicitPort: a connection to that address and port is an
	// explicit proxy request (CONNECT or absolute-form HTTP); any other port
	// of the gateway is refused.
	Gateway      netip.Addr
	ExplicitPort uint16
	// Resolve finds a name's addresses (the resolver the sandboxes' DNS uses).
	Resolve   func(ctx context.Context, name string) ([]netip.Addr, error)
	Forbidden *rules.Forbidden
	// Dial opens the upstream connection (default: a net.Dialer, 10 s).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Secrets, Leaf and UpstreamRoots serve proxy-mode secrets: Leaf issues
	// the certificate of an intercepted host; UpstreamRoots verify the
	// upstream's (nil: the system's).
	Secrets       Secrets
	Leaf          func(host string) (*tls.Certificate, error)
	UpstreamRoots *x509.CertPool
	// Log receives each refused connection or request, and each allowed one.
	Log func(Event)
	// Logger gets the proxy's own troubles.
	Logger *slog.Logger
	// MaxConns bounds one sandbox's open connections (default 1024).
	MaxConns int
	// FirstBytes bounds the wait for a client's first bytes (default 10 s);
	// ServerFirst is how long a connection whose address alone is allowed
	// waits for them before it is taken for a protocol where the server
	// speaks first, like SSH (default 250 ms).
	FirstBytes, ServerFirst time.Duration
}

// denyAll judges the connections of a sandbox that has gone.
var denyAll, _ = rules.Compile(rules.None, nil, nil)

// Proxy serves the sandboxes' outbound connections.
type Proxy struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	conns  map[net.Conn]string // the sandbox of each open connection
	per    map[string]int      // open connections per sandbox
	closed bool
}

// New returns a proxy.
func New(cfg Config) *Proxy {
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: 10 * time.Second}
		cfg.Dial = d.DialContext
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 1024
	}
	if cfg.FirstBytes == 0 {
		cfg.FirstBytes = 10 * time.Second
	}
	if cfg.ServerFirst == 0 {
		cfg.ServerFirst = 250 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = func(Event) {}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Proxy{cfg: cfg, log: log, conns: map[net.Conn]string{}, per: map[string]int{}}
}

// Serve accepts connections on ln until it is closed.
func (p *Proxy) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// EMFILE and the like: back off rather than spin.
			p.log.Warn("accepting a sandbox connection", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		go p.handle(c)
	}
}

// Close ends every connection the proxy holds.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	return nil
}

// Cut ends every connection sandbox id has open through the proxy: after its
// rules change, what it may do is judged afresh.
func (p *Proxy) Cut(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c, owner := range p.conns {
		if owner == id {
			c.Close()
		}
	}
}

// track counts c against its sandbox's cap; false when over it.
func (p *Proxy) track(c net.Conn, id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.per[id] >= p.cfg.MaxConns {
		return false
	}
	p.per[id]++
	p.conns[c] = id
	return true
}

func (p *Proxy) untrack(c net.Conn, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.conns[c]; ok {
		delete(p.conns, c)
		if p.per[id]--; p.per[id] <= 0 {
			delete(p.per, id)
		}
	}
}

// Open is the number of connections sandbox id has open through the proxy.
func (p *Proxy) Open(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.per[id]
}

// conn is one sandbox connection being served.
type conn struct {
	p   *Proxy
	c   net.Conn
	br  *bufio.Reader
	sb  Sandbox
	src netip.Addr
	dst netip.AddrPort
}

func (p *Proxy) handle(c net.Conn) {
	src, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		c.Close()
		return
	}
	sb, ok := p.cfg.Policy(src.Addr().Unmap())
	if !ok {
		p.cfg.Log(Event{Time: time.Now(), Src: src.Addr(), Dst: c.LocalAddr().String(), Proto: "tcp", Rule: "unknown source"})
		c.Close()
		return
	}
	if !p.track(c, sb.ID) {
		p.cfg.Log(Event{Time: time.Now(), Sandbox: sb.ID, Src: src.Addr(), Proto: "tcp", Rule: fmt.Sprintf("connection limit (%d open)", p.cfg.MaxConns)})
		c.Close()
		return
	}
	defer p.untrack(c, sb.ID)
	defer c.Close()
	dst, err := p.cfg.OriginalDst(c)
	if err != nil {
		p.log.Warn("no original destination", "sandbox_id", sb.ID, "err", err)
		return
	}
	k := &conn{p: p, c: c, br: bufio.NewReaderSize(c, 16<<10), sb: sb, src: src.Addr(), dst: dst}
	if dst.Addr().Unmap() == p.cfg.Gateway {
		if dst.Port() == p.cfg.ExplicitPort {
			k.serveHTTP(true, "")
			return
		}
		k.refuse("tcp", dst.String(), "the gateway serves only DNS and the proxy port "+strconv.Itoa(int(p.cfg.ExplicitPort)))
		return
	}
	k.transparent()
}

// event logs what was decided for dst.
func (k *conn) event(proto, dst, rule string, allowed bool) {
	k.p.cfg.Log(Event{Time: time.Now(), Sandbox: k.sb.ID, Src: k.src, Dst: dst, Proto: proto, Rule: rule, Allowed: allowed})
}

func (k *conn) refuse(proto, dst, rule string) { k.event(proto, dst, rule, false) }

// transparent serves a redirected connection: TLS by its SNI, HTTP by each
// request's Host, anything else by its destination address.
func (k *conn) transparent() {
	addrOK := k.p.checkAddr(k.policy(), k.dst.Addr()).Allow
	wait := k.p.cfg.FirstBytes
	if addrOK {
		wait = k.p.cfg.ServerFirst
	}
	k.c.SetReadDeadline(time.Now().Add(wait))
	first, err := k.br.Peek(1)
	k.c.SetReadDeadline(time.Time{})
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && addrOK {
			k.raw() // the server speaks first
			return
		}
		if errors.As(err, &ne) && ne.Timeout() {
			k.refuse("tcp", k.dst.String(), "no request within "+wait.String())
		}
		return
	}
	switch {
	case first[0] == recordHandshake:
		k.tls(k.dst.Port(), "")
	case looksHTTP(k.br):
		k.serveHTTP(false, "")
	default:
		k.raw()
	}
}

// raw judges a connection by its destination address alone.
func (k *conn) raw() {
	v := k.p.checkAddr(k.policy(), k.dst.Addr())
	if !v.Allow {
		k.refuse("tcp", k.dst.String(), v.Rule)
		return
	}
	up, err := k.p.cfg.Dial(context.Background(), "tcp", k.dst.String())
	if err != nil {
		k.refuse("tcp", k.dst.String(), "upstream: "+err.Error())
		return
	}
	k.event("tcp", k.dst.String(), v.Rule, true)
	k.pipe(up)
}

// pipe copies both ways between the sandbox and up until both directions
// end, passing half-closes on. The sandbox's side is read through k.br, whose
// read-ahead goes first; past it, io.Copy between two TCP connections
// splices.
func (k *conn) pipe(up net.Conn) {
	defer up.Close()
	done := make(chan struct{}, 2)
	half := func(c net.Conn) {
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			c.Close()
		}
		done <- struct{}{}
	}
	go func() { io.Copy(up, k.br); half(up) }()
	go func() { io.Copy(k.c, up); half(k.c) }()
	<-done
	<-done
}

// policy is the sandbox's rules as they are now: a request on a connection
// opened before a change is judged by the new rules.
func (k *conn) policy() Sandbox {
	if sb, ok := k.p.cfg.Policy(k.src); ok && sb.ID == k.sb.ID {
		return sb
	}
	return Sandbox{ID: k.sb.ID, Rules: denyAll}
}

// checkAddr judges a destination known only by its address.
func (p *Proxy) checkAddr(sb Sandbox, a netip.Addr) rules.Verdict {
	a = a.Unmap()
	if bad, why := p.cfg.Forbidden.Check(a); bad {
		return rules.Verdict{Rule: why}
	}
	return sb.Rules.Addr(a)
}

// target is where a name or address may be reached.
type target struct {
	addrs []netip.Addr
	rule  string
}

// resolve judges host (a name or an IP literal in any spelling) for sb and
// returns the addresses to dial, checked.
func (p *Proxy) resolve(ctx context.Context, sb Sandbox, host string) (target, error) {
	addr, isIP, err := rules.ParseHost(host)
	if err != nil {
		return target{}, err
	}
	if isIP {
		v := p.checkAddr(sb, addr)
		if !v.Allow {
			return target{}, errors.New(v.Rule)
		}
		return target{addrs: []netip.Addr{addr.Unmap()}, rule: v.Rule}, nil
	}
	v := sb.Rules.Name(host)
	if !v.Allow {
		return target{}, errors.New(v.Rule)
	}
	addrs, err := p.cfg.Resolve(ctx, host)
	if err != nil {
		return target{}, fmt.Errorf("resolving: %w", err)
	}
	t := target{rule: v.Rule}
	var why string
	for _, a := range addrs {
		a = a.Unmap()
		if bad, w := p.cfg.Forbidden.Check(a); bad {
			why = fmt.Sprintf("resolves to %s (%s)", a, w)
			continue
		}
		if blocked, w := sb.Rules.Blocked(a); blocked {
			why = fmt.Sprintf("resolves to %s (%s)", a, w)
			continue
		}
		if a.Is4() { // the sandboxes have no IPv6; nor does the proxy dial it
			t.addrs = append(t.addrs, a)
		}
	}
	if len(t.addrs) == 0 {
		if why == "" {
			why = "no IPv4 address"
		}
		return target{}, errors.New(why)
	}
	return t, nil
}

// dial opens an upstream connection to host:port for sb, checked.
func (p *Proxy) dial(ctx context.Context, sb Sandbox, host string, port uint16) (net.Conn, string, error) {
	t, err := p.resolve(ctx, sb, host)
	if err != nil {
		return nil, "", err
	}
	var last error
	for _, a := range t.addrs {
		c, err := p.cfg.Dial(ctx, "tcp", netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, t.rule, nil
		}
		last = err
	}
	return nil, "", fmt.Errorf("upstream: %w", last)
}
