// This file implements New and Close: the Internet's lifetime.

package fakenet

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/testutil"
)

// Internet is a fake internet and the host namespace wired to it. Its servers
// run until Close; its methods are safe for concurrent use.
type Internet struct {
	// HostNS and InetNS are the paths of files pinning the two network
	// namespaces (bind mounts of nsfs files): `nsenter --net=<HostNS> sbx
	// serve …` runs the daemon in host, whose only way out is inet.
	HostNS string
	InetNS string

	// CACertPEM is the test CA's certificate in PEM, CACertFile a file
	// holding it (for a daemon's configuration; removed by Close), and CAPool
	// a pool of it alone. The web servers' certificate (valid for CertNames
	// and their addresses) chains to it.
	CACertPEM  []byte
	CACertFile string
	CAPool     *x509.CertPool

	// HostCanary are listeners in the host namespace that log every connect.
	HostCanary Canary

	dir           string
	pki           *pki
	log           *eventLog
	dns           *dnsServer
	metadataToken string
	conns         conns
	cancel        context.CancelFunc
	wg            sync.WaitGroup // every goroutine serving a socket

	mu sync.Mutex
	// closers, servers and transports are guarded by mu: what Close shuts.
	closers    []io.Closer
	servers    []*http.Server
	transports []*http.Transport

	closeOnce sync.Once
	closeErr  error
}

// New builds both namespaces and starts every server. Everything is removed by
// t.Cleanup (and by Close, which may be called earlier). It skips t without
// root or network namespaces (see testutil.RequireRoot), and fails it if the
// fake internet cannot be built.
func New(t testing.TB) *Internet {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireNamespaces(t)
	n, err := start()
	if err != nil {
		t.Fatalf("starting the fake internet: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("closing the fake internet: %v", err)
		}
	})
	return n
}

// start builds an Internet; on error, whatever it built is removed.
func start() (_ *Internet, err error) {
	sweepStale()
	ctx, cancel := context.WithCancel(context.Background())
	n := &Internet{log: newEventLog(), cancel: cancel}
	n.dns = &dnsServer{n: n}
	defer func() {
		if err != nil {
			if cerr := n.Close(); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
	}()
	n.dir, err = os.MkdirTemp("", pinPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("making the namespace pins' directory: %w", err)
	}
	n.HostNS, n.InetNS = filepath.Join(n.dir, "host"), filepath.Join(n.dir, "inet")
	for _, pin := range []string{n.HostNS, n.InetNS} {
		if err := os.WriteFile(pin, nil, 0o444); err != nil {
			return nil, fmt.Errorf("making namespace pin %s: %w", pin, err)
		}
	}
	if err := makeNamespaces(n.HostNS, n.InetNS); err != nil {
		return nil, err
	}
	if err := configure(n.HostNS, n.InetNS); err != nil {
		return nil, err
	}
	if n.pki, err = newPKI(); err != nil {
		return nil, err
	}
	n.CACertPEM, n.CAPool = n.pki.caPEM, n.pki.pool
	n.CACertFile = filepath.Join(n.dir, "ca.pem")
	if err := os.WriteFile(n.CACertFile, n.CACertPEM, 0o644); err != nil {
		return nil, fmt.Errorf("writing the test CA: %w", err)
	}
	n.metadataToken = rand.Text()
	if err := n.startInet(ctx); err != nil {
		return nil, err
	}
	if err := n.startHost(); err != nil {
		return nil, err
	}
	return n, nil
}

// keep registers c for Close.
func (n *Internet) keep(c io.Closer) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closers = append(n.closers, c)
}

func (n *Internet) newServer(ctx context.Context, h http.Handler) *http.Server {
	s := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          log.New(io.Discard, "", 0), // TLS handshake failures are the client's to report
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.servers = append(n.servers, s)
	return s
}

// startInet opens every socket of inet on one thread inside it, then serves
// them and steers everything else to the catch-all.
func (n *Internet) startInet(ctx context.Context) error {
	web, webTLS, meta := n.newServer(ctx, n.webHandler()), n.newServer(ctx, n.webHandler()), n.newServer(ctx, n.metadataHandler())
	webTLS.TLSConfig = n.tlsConfig()
	lc, err := listenConfig(n.InetNS, nil)
	if err != nil {
		return err
	}
	return do(n.InetNS, func() error {
		tcp := func(a netip.Addr, port uint16) (*logListener, error) {
			l, err := lc.Listen(ctx, "tcp", netip.AddrPortFrom(a, port).String())
			if err != nil {
				return nil, fmt.Errorf("listening in inet: %w", err)
			}
			n.keep(l)
			return &logListener{Listener: l, n: n, kind: KindTCP}, nil
		}
		udp := func(a netip.Addr, port uint16) (*net.UDPConn, error) {
			pc, err := lc.ListenPacket(ctx, "udp", netip.AddrPortFrom(a, port).String())
			if err != nil {
				return nil, fmt.Errorf("listening in inet: %w", err)
			}
			n.keep(pc)
			return pc.(*net.UDPConn), nil
		}
		for _, a := range webAddrs() {
			plain, err := tcp(a, 80)
			if err != nil {
				return err
			}
			n.wg.Go(func() { web.Serve(plain) })
			secure, err := tcp(a, 443)
			if err != nil {
				return err
			}
			n.wg.Go(func() { webTLS.ServeTLS(secure, "", "") })
		}
		for _, a := range metadataAddrs() {
			l, err := tcp(a, 80)
			if err != nil {
				return err
			}
			n.wg.Go(func() { meta.Serve(l) })
		}
		for _, a := range []netip.Addr{DNSAddr, DNSAddr6} {
			c, err := udp(a, 53)
			if err != nil {
				return err
			}
			n.wg.Go(func() { n.dns.serveUDP(c) })
			l, err := tcp(a, 53)
			if err != nil {
				return err
			}
			n.wg.Go(func() { n.dns.serveTCP(l) })
		}
		for _, a := range []netip.Addr{AllowedAddr, AllowedAddr6} {
			for _, port := range RawTCPPorts {
				l, err := tcp(a, port)
				if err != nil {
					return err
				}
				n.wg.Go(func() { n.serveRaw(l, banners[port]) })
			}
			for _, port := range RawUDPPorts {
				c, err := udp(a, port)
				if err != nil {
					return err
				}
				n.wg.Go(func() { n.serveUDP(c, port == 9999) })
			}
		}
		ports, err := n.startCatchAll(ctx, n.InetNS)
		if err != nil {
			return err
		}
		for _, icmpNet := range [][2]string{{"ip4:icmp", "0.0.0.0"}, {"ip6:ipv6-icmp", "::"}} {
			c, err := icmp.ListenPacket(icmpNet[0], icmpNet[1])
			if err != nil {
				return fmt.Errorf("listening for ICMP in inet: %w", err)
			}
			n.keep(c)
			if icmpNet[0] == "ip4:icmp" {
				n.wg.Go(func() { n.serveICMP4(c) })
			} else {
				n.wg.Go(func() { n.serveICMP6(c) })
			}
		}
		return installCatchAll(ports)
	})
}

// startCatchAll opens the catch-all's transparent sockets; it runs in inet.
func (n *Internet) startCatchAll(ctx context.Context, ns string) (catchPorts, error) {
	var p catchPorts
	for _, s := range []struct {
		network, addr string
		port          *uint16
	}{
		{"tcp4", "0.0.0.0:0", &p.tcp4}, {"tcp6", "[::]:0", &p.tcp6},
		{"udp4", "0.0.0.0:0", &p.udp4}, {"udp6", "[::]:0", &p.udp6},
	} {
		udp := s.network[:3] == "udp"
		lc, err := listenConfig(ns, transparent(udp))
		if err != nil {
			return p, err
		}
		if udp {
			pc, err := lc.ListenPacket(ctx, s.network, s.addr)
			if err != nil {
				return p, fmt.Errorf("opening the catch-all's %s socket: %w", s.network, err)
			}
			n.keep(pc)
			c := pc.(*net.UDPConn)
			*s.port = addrPort(c.LocalAddr()).Port()
			n.wg.Go(func() { n.serveCatchUDP(c) })
			continue
		}
		l, err := lc.Listen(ctx, s.network, s.addr)
		if err != nil {
			return p, fmt.Errorf("opening the catch-all's %s socket: %w", s.network, err)
		}
		n.keep(l)
		*s.port = addrPort(l.Addr()).Port()
		n.wg.Go(func() { n.serveCatchTCP(&logListener{Listener: l, n: n, kind: KindTCP, catchAll: true}) })
	}
	return p, nil
}

// startHost opens the host canaries.
func (n *Internet) startHost() error {
	lc, err := listenConfig(n.HostNS, nil)
	if err != nil {
		return err
	}
	return do(n.HostNS, func() error {
		for _, c := range []struct {
			addr netip.Addr
			ap   *netip.AddrPort
		}{
			{netip.MustParseAddr("127.0.0.1"), &n.HostCanary.Loopback},
			{netip.IPv6Loopback(), &n.HostCanary.Loopback6},
			{HostAddr, &n.HostCanary.Uplink},
		} {
			l, err := lc.Listen(context.Background(), "tcp", netip.AddrPortFrom(c.addr, 0).String())
			if err != nil {
				return fmt.Errorf("listening for the host canary: %w", err)
			}
			n.keep(l)
			*c.ap = addrPort(l.Addr())
			n.wg.Go(func() { n.serveRaw(&logListener{Listener: l, n: n, kind: KindCanary}, "") })
		}
		return nil
	})
}

// Close stops every server, removes the veth and unpins both namespaces; the
// kernel frees them once nothing else (a process started in one, a socket a
// test still holds) refers to them. It is idempotent.
func (n *Internet) Close() error {
	n.closeOnce.Do(func() { n.closeErr = n.close() })
	return n.closeErr
}

func (n *Internet) close() error {
	n.cancel()
	n.mu.Lock()
	servers, closers, transports := n.servers, n.closers, n.transports
	n.mu.Unlock()
	for _, s := range servers {
		s.Close()
	}
	for _, c := range closers {
		c.Close()
	}
	n.conns.closeAll()
	for _, tr := range transports {
		tr.CloseIdleConnections()
	}
	n.wg.Wait()

	var errs []error
	if n.HostNS != "" {
		err := do(n.HostNS, func() error {
			h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
			if err != nil {
				return err
			}
			defer h.Close()
			l, err := h.LinkByName(HostLink)
			if err != nil {
				return nil // never made
			}
			return h.LinkDel(l)
		})
		// A pin that was never mounted cannot be entered: nothing to delete.
		if err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", HostLink, err))
		}
	}
	for _, pin := range []string{n.HostNS, n.InetNS} {
		if pin == "" {
			continue
		}
		if err := unpin(pin); err != nil {
			errs = append(errs, err)
		}
	}
	if n.dir != "" && len(errs) == 0 {
		if err := os.RemoveAll(n.dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", n.dir, err))
		}
	}
	return errors.Join(errs...)
}
