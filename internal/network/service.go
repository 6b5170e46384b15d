package network

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/network/dns"
	"sbx.dev/sbx/internal/network/proxy"
	"sbx.dev/sbx/internal/network/rules"
	"sbx.dev/sbx/internal/sandbox"
)

// ServiceConfig configures a Service.
type ServiceConfig struct {
	// Dir holds the router's pinned namespace.
	Dir string
	// Subnet is the sandboxes' address range (DefaultSubnet when zero).
	Subnet netip.Prefix
	// Block lists ranges no sandbox may reach under any tier, besides the
	// ones that are always out of reach (rules.NewForbidden).
	Block []netip.Prefix
	// Upstream finds a name's addresses (dns.Upstream); the proxy and the
	// sandboxes' resolver both ask it, so they agree.
	Upstream interface {
		Lookup(ctx context.Context, name string) ([]netip.Addr, error)
	}
	// UpstreamRoots verify the upstreams' certificates where the proxy
	// speaks TLS to them itself (proxy-mode secrets); nil: the system's.
	UpstreamRoots *x509.CertPool
	// Dial opens upstream connections (default net.Dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	Log  *slog.Logger
}

// Event is one decision of the egress path about a sandbox's traffic.
type Event = proxy.Event

// eventsKept is how many events each sandbox keeps.
const eventsKept = 512

// Service is the daemon's egress path: the router, the proxy and the
// resolver, and each sandbox's rules and events.
type Service struct {
	cfg       ServiceConfig
	log       *slog.Logger
	router    *Router
	forbidden *rules.Forbidden
	proxy     *proxy.Proxy
	resolver  *dns.Server
	ca        *CA
	secrets   secretBook
	udp       *udpRelay

	mu      sync.Mutex
	rules   map[sandbox.ID]*rules.Set
	events  map[sandbox.ID]*eventRing
	closers []interface{ Close() error }
	stop    chan struct{}
	stopped sync.WaitGroup
}

// NewService returns the egress path. Nothing is made on the host until the
// first sandbox is attached (or one of an earlier run re-adopted).
func NewService(cfg ServiceConfig) (*Service, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{cfg: cfg, log: log.With(logkey.Component, "network"),
		rules: map[sandbox.ID]*rules.Set{}, events: map[sandbox.ID]*eventRing{}, stop: make(chan struct{})}
	var err error
	if s.router, err = New(Config{Dir: cfg.Dir, Subnet: cfg.Subnet, Log: log}, s.listen); err != nil {
		return nil, err
	}
	if s.ca, err = LoadCA(cfg.Dir); err != nil {
		return nil, err
	}
	s.forbidden = rules.NewForbidden(append([]netip.Prefix{s.router.Subnet()}, cfg.Block...)...)
	s.refreshLocal()
	s.proxy = proxy.New(proxy.Config{
		Policy:        s.policy,
		OriginalDst:   OriginalDst,
		Gateway:       s.router.Gateway(),
		ExplicitPort:  ExplicitProxyPort,
		Resolve:       cfg.Upstream.Lookup,
		Forbidden:     s.forbidden,
		Dial:          cfg.Dial,
		Log:           s.record,
		Logger:        s.log,
		Secrets:       s,
		Leaf:          s.ca.Leaf,
		UpstreamRoots: cfg.UpstreamRoots,
	})
	s.resolver = &dns.Server{
		Policy: func(src netip.Addr) (*rules.Set, string, bool) {
			sb, ok := s.policy(src)
			return sb.Rules, sb.ID, ok
		},
		Upstream:  cfg.Upstream,
		Forbidden: s.forbidden,
		Log: func(e dns.Event) {
			s.record(Event{Time: e.Time, Sandbox: e.Sandbox, Src: e.Src, Dst: e.Name + " " + e.Type, Proto: "dns", Rule: e.Rule})
		},
	}
	s.stopped.Add(1)
	go s.refreshLoop()
	return s, nil
}

// refreshLocal learns the host's own addresses, which no sandbox may reach.
func (s *Service) refreshLocal() {
	addrs, err := rules.HostAddrs()
	if err != nil {
		s.log.Warn("listing the host's addresses", logkey.Err, err)
		return
	}
	s.forbidden.SetLocal(addrs)
}

// refreshLoop follows the host's addresses as they change.
func (s *Service) refreshLoop() {
	defer s.stopped.Done()
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.refreshLocal()
		}
	}
}

// listen opens the proxy's and the resolver's sockets in the router's
// namespace, once.
func (s *Service) listen(ns *os.File) error {
	var (
		proxyLn, dnsLn net.Listener
		dnsPC          net.PacketConn
	)
	err := inNetns(ns, func() error {
		var err error
		if proxyLn, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", ProxyPort)); err != nil {
			return fmt.Errorf("the egress proxy's listener: %w", err)
		}
		if dnsLn, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", DNSPort)); err != nil {
			proxyLn.Close()
			return fmt.Errorf("the resolver's TCP listener: %w", err)
		}
		if dnsPC, err = net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", DNSPort)); err != nil {
			proxyLn.Close()
			dnsLn.Close()
			return fmt.Errorf("the resolver's UDP socket: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	udpPC, err := listenUDP(ns)
	if err != nil {
		proxyLn.Close()
		dnsLn.Close()
		dnsPC.Close()
		return fmt.Errorf("the UDP relay's socket: %w", err)
	}
	relay := &udpRelay{s: s, ns: ns, pc: udpPC, flows: map[flowKey]*udpFlow{}, per: map[string]int{}}
	s.mu.Lock()
	s.closers = append(s.closers, proxyLn, dnsLn, dnsPC)
	s.udp = relay
	s.mu.Unlock()
	go relay.serve()
	go s.proxy.Serve(proxyLn)
	go s.resolver.ServeStream(dnsLn)
	go s.resolver.ServePacket(dnsPC)
	return nil
}

// policy finds the sandbox behind a source address, and its rules.
func (s *Service) policy(src netip.Addr) (proxy.Sandbox, bool) {
	id, ok := s.router.Lookup(src)
	if !ok {
		return proxy.Sandbox{}, false
	}
	s.mu.Lock()
	set := s.rules[id]
	s.mu.Unlock()
	if set == nil {
		return proxy.Sandbox{}, false
	}
	return proxy.Sandbox{ID: string(id), Rules: set}, true
}

// record keeps an event of the proxy or resolver.
func (s *Service) record(e Event) {
	if !e.Allowed {
		s.log.Info("egress refused", logkey.SandboxID, e.Sandbox, "destination", e.Dst, "protocol", e.Proto, "rule", e.Rule)
	}
	if e.Sandbox == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.events[sandbox.ID(e.Sandbox)]
	if r == nil {
		return // a sandbox that is gone
	}
	r.add(e)
}

// SetRules sets sandbox id's rules. Connections it has open through the
// proxy are cut when the rules change, so none outlives what allowed it.
func (s *Service) SetRules(id sandbox.ID, set *rules.Set) {
	s.mu.Lock()
	old := s.rules[id]
	s.rules[id] = set
	if s.events[id] == nil {
		s.events[id] = &eventRing{}
	}
	s.mu.Unlock()
	if old != nil && old != set {
		s.proxy.Cut(string(id))
		s.cutUDP(id)
	}
}

// Forget drops sandbox id's rules and events, and cuts its connections.
func (s *Service) Forget(id sandbox.ID) {
	s.mu.Lock()
	delete(s.rules, id)
	delete(s.events, id)
	s.mu.Unlock()
	s.proxy.Cut(string(id))
	s.cutUDP(id)
	s.ForgetSecrets(id)
}

// cutUDP ends sandbox id's UDP flows.
func (s *Service) cutUDP(id sandbox.ID) {
	s.mu.Lock()
	relay := s.udp
	s.mu.Unlock()
	if relay != nil {
		relay.cut(string(id))
	}
}

// Events returns sandbox id's recent events, oldest first, and how many it
// had in all (allowed, refused).
func (s *Service) Events(id sandbox.ID) (events []Event, allowed, refused int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.events[id]
	if r == nil {
		return nil, 0, 0
	}
	return r.list(), r.allowed, r.refused
}

// Attach connects sandbox id's network namespace (backend.Network).
func (s *Service) Attach(ctx context.Context, id sandbox.ID, ns *os.File) (netip.Addr, error) {
	return s.router.Attach(ctx, id, ns)
}

// Detach disconnects sandbox id (backend.Network).
func (s *Service) Detach(ctx context.Context, id sandbox.ID) error {
	return s.router.Detach(ctx, id)
}

// CACertPEM is the certificate the sandboxes trust for the proxy's
// interceptions (backend.Network).
func (s *Service) CACertPEM() []byte { return s.ca.CertPEM() }

// Gateway is the sandboxes' resolver and explicit proxy (backend.Network).
func (s *Service) Gateway() netip.Addr { return s.router.Gateway() }

// Close stops serving. The router's namespace stays while sandboxes are
// attached (the next daemon adopts them); remove drops it when none are.
func (s *Service) Close(remove bool) error {
	if s == nil {
		return nil
	}
	close(s.stop)
	s.stopped.Wait()
	s.mu.Lock()
	closers := s.closers
	s.closers = nil
	s.mu.Unlock()
	for _, c := range closers {
		c.Close()
	}
	s.mu.Lock()
	relay := s.udp
	s.mu.Unlock()
	if relay != nil {
		relay.close()
	}
	s.proxy.Close()
	s.resolver.Close()
	return s.router.Close(remove)
}

// eventRing keeps a sandbox's last events.
type eventRing struct {
	buf              []Event
	next             int
	allowed, refused int64
}

func (r *eventRing) add(e Event) {
	if e.Allowed {
		r.allowed++
	} else {
		r.refused++
	}
	if len(r.buf) < eventsKept {
		r.buf = append(r.buf, e)
		return
	}
	r.buf[r.next] = e
	r.next = (r.next + 1) % eventsKept
}

func (r *eventRing) list() []Event {
	return append(append([]Event{}, r.buf[r.next:]...), r.buf[:r.next]...)
}
