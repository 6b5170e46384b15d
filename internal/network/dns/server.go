// Package dns is the sandboxes' resolver: a DNS server that answers each
// sandbox's queries under that sandbox's egress rules, never forwarding a
// query for a name the rules deny (so DNS cannot carry data out), and removing
// forbidden addresses from the answers (DNS rebinding, metadata names); and
// Upstream, which resolves allowed names the way the host does. The server
// knows a sandbox only as a source address and the rules.Set behind it.
package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"sbx.dev/sbx/internal/network/rules"
)

// Defaults of Server's knobs.
const (
	DefaultRateQPS           = 100
	DefaultRateBurst         = 200
	DefaultMaxInFlight       = 256
	DefaultMaxConnsPerSource = 8
	DefaultMaxConns          = 512
	DefaultIdleTimeout       = 10 * time.Second
	DefaultLookupTimeout     = 5 * time.Second
	DefaultAnswerTTL         = 10 * time.Second
	MaxAnswerTTL             = 30 * time.Second

	pipelinePerConn = 16 // queries of one TCP connection answered at once
)

// ErrServerClosed is returned by ServePacket and ServeStream called after Close.
var ErrServerClosed = errors.New("dns: server closed")

// Event is a query the server refused or filtered.
type Event struct {
	Time    time.Time
	Sandbox string // "" when the source is unknown
	Src     netip.Addr
	Name    string // as asked, lower case, without the trailing dot
	Type    string // "A", "AAAA", "TXT", …
	// Rule says why: "not in allowlist", "block *.evil.test", "rebinding:
	// 127.0.0.1 is loopback", "unknown source", "type TXT not served", "rate
	// limit", "too many connections", "busy", "invalid name". Refusals that
	// come in floods (rate limit, busy, too many connections) are reported at
	// most once a second per source.
	Rule string
}

// Server answers the sandboxes' queries. Set the fields, then call ServePacket
// and ServeStream (each as often as needed); do not change the fields after.
type Server struct {
	// Policy finds the sandbox behind a source address; a source it does not
	// know is refused.
	Policy func(src netip.Addr) (set *rules.Set, sandboxID string, ok bool)
	// Upstream resolves allowed names; an error wrapping ErrNotFound becomes
	// NXDOMAIN, any other SERVFAIL.
	Upstream interface {
		Lookup(ctx context.Context, name string) ([]netip.Addr, error)
	}
	// Forbidden are the addresses removed from every answer; nil means the
	// fixed ranges of rules.NewForbidden only.
	Forbidden *rules.Forbidden
	// IPv6: false means AAAA questions get no addresses (the sandboxes have no
	// IPv6): an empty answer, or NXDOMAIN for a name without any address.
	IPv6 bool
	// Log receives each refused or filtered query; may be nil. It is called
	// from the serving goroutines and must not block for long.
	Log func(Event)

	// RateQPS is the queries per second each source may send, sustained; 0 means 100.
	RateQPS float64
	// RateBurst is how many queries a source may send at once; 0 means 200.
	RateBurst int
	// MaxInFlight bounds the queries being answered at once; a query beyond it
	// gets SERVFAIL. 0 means 256.
	MaxInFlight int
	// MaxConnsPerSource bounds one source's open TCP connections; 0 means 8.
	MaxConnsPerSource int
	// MaxConns bounds all open TCP connections; 0 means 512.
	MaxConns int
	// IdleTimeout closes a TCP connection that does not deliver a whole query
	// within it, or does not take an answer within it; 0 means 10 s.
	IdleTimeout time.Duration
	// LookupTimeout bounds one Upstream lookup; 0 means 5 s.
	LookupTimeout time.Duration
	// AnswerTTL is the TTL of the addresses answered, at most 30 s; 0 means 10 s.
	AnswerTTL time.Duration

	once      sync.Once
	ctx       context.Context // ends at Close: cancels lookups in flight
	cancel    context.CancelFunc
	limit     *limiter
	inflight  chan struct{}
	notServed *seenSet
	reports   throttle // of "busy" and "too many connections"

	mu     sync.Mutex
	closed bool                    // guarded by mu
	pcs    map[net.PacketConn]bool // guarded by mu
	lns    map[net.Listener]bool   // guarded by mu
	conns  map[net.Conn]bool       // guarded by mu
	perSrc map[netip.Addr]int      // guarded by mu: open TCP connections per source
	wg     sync.WaitGroup          // goroutines answering queries and serving connections
}

func (s *Server) init() {
	s.once.Do(func() {
		s.ctx, s.cancel = context.WithCancel(context.Background())
		s.limit = newLimiter(orDefault(s.RateQPS, DefaultRateQPS), float64(orDefault(s.RateBurst, DefaultRateBurst)))
		s.inflight = make(chan struct{}, orDefault(s.MaxInFlight, DefaultMaxInFlight))
		s.notServed = newSeenSet(4096)
		s.pcs, s.lns, s.conns, s.perSrc = map[net.PacketConn]bool{}, map[net.Listener]bool{}, map[net.Conn]bool{}, map[netip.Addr]int{}
	})
}

func orDefault[T int | float64 | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// goTracked runs f in a goroutine Close waits for; false when closed.
func (s *Server) goTracked(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Go(f)
	return true
}

// ServePacket answers the queries arriving on pc (UDP) until pc is closed, by
// Close or by the caller, and then returns nil; any other read error is
// returned. Called after Close, it returns ErrServerClosed. It closes pc when
// it returns. Answers never exceed 512 bytes, or the EDNS size a query
// advertises (at most 1232): larger ones are truncated (TC) for TCP to retry.
func (s *Server) ServePacket(pc net.PacketConn) error {
	s.init()
	defer pc.Close()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.pcs[pc] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pcs, pc)
		s.mu.Unlock()
	}()
	buf := make([]byte, 65535)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		src := addrOf(from)
		if resp, done := s.admit(src, buf[:n]); done {
			if resp != nil {
				pc.WriteTo(resp, from)
			}
			continue
		}
		req := append([]byte(nil), buf[:n]...)
		if !s.goTracked(func() {
			defer func() { <-s.inflight }()
			if resp := s.answer(s.ctx, src, req, false); resp != nil {
				pc.WriteTo(resp, from)
			}
		}) {
			<-s.inflight
			return nil
		}
	}
}

// admit applies the rate limit and the in-flight bound before a query is
// answered. done means the query is answered already (resp, possibly nil);
// otherwise an in-flight slot is taken, for the caller to release.
func (s *Server) admit(src netip.Addr, req []byte) (resp []byte, done bool) {
	if ok, report := s.limit.allow(src); !ok {
		if report {
			s.logQuery(src, req, "rate limit")
		}
		return s.refuse(req, dnsmessage.RCodeRefused), true
	}
	select {
	case s.inflight <- struct{}{}:
		return nil, false
	default:
		if s.reports.allow(src, "busy") {
			s.logQuery(src, req, "busy")
		}
		return s.refuse(req, dnsmessage.RCodeServerFailure), true
	}
}

// ServeStream answers DNS over TCP on ln (RFC 7766: length-prefixed,
// pipelined, answered as they complete) until ln is closed, by Close or by the
// caller, and then returns nil; called after Close, it returns
// ErrServerClosed. It closes ln when it returns. It bounds the connections per
// source and in all, and closes a connection idle for IdleTimeout.
func (s *Server) ServeStream(ln net.Listener) error {
	s.init()
	defer ln.Close()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.lns[ln] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.lns, ln)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// Out of fds and the like: wait, as net/http does, bounded by 1 s.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
				case <-s.ctx.Done():
					return nil
				}
				continue
			}
			return err
		}
		backoff = 0
		src := addrOf(c.RemoteAddr())
		if why := s.addConn(src, c); why != "" {
			c.Close()
			if why != "closed" && s.reports.allow(src, why) {
				s.log(Event{Src: src, Rule: why}, true)
			}
			continue
		}
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// addConn counts c and starts serving it; it returns why not ("too many
// connections", "closed") when it may not.
func (s *Server) addConn(src netip.Addr, c net.Conn) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return "closed"
	case len(s.conns) >= orDefault(s.MaxConns, DefaultMaxConns),
		s.perSrc[src] >= orDefault(s.MaxConnsPerSource, DefaultMaxConnsPerSource):
		return "too many connections"
	}
	s.conns[c] = true
	s.perSrc[src]++
	s.wg.Go(func() {
		s.serveConn(c, src)
		s.mu.Lock()
		delete(s.conns, c)
		if s.perSrc[src]--; s.perSrc[src] <= 0 {
			delete(s.perSrc, src)
		}
		s.mu.Unlock()
	})
	return ""
}

// serveConn reads queries from c until it fails, idles or the server closes,
// answering up to pipelinePerConn of them at once.
func (s *Server) serveConn(c net.Conn, src netip.Addr) {
	idle := orDefault(s.IdleTimeout, DefaultIdleTimeout)
	var (
		wmu     sync.Mutex // serialises answers
		answers sync.WaitGroup
		slots   = make(chan struct{}, pipelinePerConn)
	)
	defer func() {
		c.Close() // also ends writes in progress
		answers.Wait()
	}()
	write := func(resp []byte) {
		wmu.Lock()
		defer wmu.Unlock()
		c.SetWriteDeadline(time.Now().Add(idle))
		out := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(resp)), uint16(len(resp)))
		if _, err := c.Write(append(out, resp...)); err != nil {
			c.Close() // a peer that does not read its answers loses the connection
		}
	}
	var l [2]byte
	for {
		// One deadline for the whole next query: a peer sending a byte at a
		// time (slowloris) is cut off all the same.
		c.SetReadDeadline(time.Now().Add(idle))
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		req := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		if resp, done := s.admit(src, req); done {
			if resp != nil {
				write(resp)
			}
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-s.ctx.Done():
			<-s.inflight
			return
		}
		answers.Go(func() {
			defer func() { <-slots; <-s.inflight }()
			if resp := s.answer(s.ctx, src, req, true); resp != nil {
				write(resp)
			}
		})
	}
}

// Close stops the server: it closes every PacketConn and Listener being
// served and every TCP connection, cancels lookups in flight and waits for the
// goroutines answering. It returns nil; a second call does nothing.
func (s *Server) Close() error {
	s.init()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for pc := range s.pcs {
		pc.Close()
	}
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// addrOf returns the IP of a UDP or TCP address, unmapped, without zone.
func addrOf(a net.Addr) netip.Addr {
	switch v := a.(type) {
	case *net.UDPAddr:
		return v.AddrPort().Addr().Unmap().WithZone("")
	case *net.TCPAddr:
		return v.AddrPort().Addr().Unmap().WithZone("")
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}

// log reports e, filling its time and, if asked, its sandbox.
func (s *Server) log(e Event, lookupSandbox bool) {
	if s.Log == nil {
		return
	}
	if lookupSandbox && s.Policy != nil {
		if _, id, ok := s.Policy(e.Src); ok {
			e.Sandbox = id
		}
	}
	e.Time = time.Now()
	s.Log(e)
}
