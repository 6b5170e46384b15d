// This file builds the network figures' lab: three network namespaces of the
// bench's own, in 198.18.0.0/15 (the benchmarking range): "host", where a
// private daemon runs, joined by a veth to "upstream", where an HTTP server
// of this process answers, and by another to "client", whose curl reaches
// the upstream through a bare relay of this process in "host" (the peer of
// the egress proxy: the same two links, no rules, no HTTP). No packet reaches
// a real address, and the host's own namespace is not changed.

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/osthread"
)

// Lab addresses: the daemon's namespace and the upstream server's; the
// relay's and the client's.
var (
	labHostAddr     = netip.MustParsePrefix("198.18.0.1/24")
	labUpstreamAddr = netip.MustParsePrefix("198.18.0.2/24")
	labRelayAddr    = netip.MustParsePrefix("198.18.1.1/24")
	labClientAddr   = netip.MustParsePrefix("198.18.1.2/24")
)

// labRelayPort is the relay's port in the host namespace.
const labRelayPort = "8080"

// upstreamMTU is the upstream link's MTU: loopback's class (a veth's
// largest; lo has 65536), the kind of link the proxy's throughput target is
// set on. The sandboxes' own links keep the daemon's MTU (the kernel's
// default, 1500), and so does the relay's client link, which stands for one.
const (
	upstreamMTU = 65535
	clientMTU   = 1500
)

// LabUpstreamName is the upstream server's name, in the daemon's hosts file.
const LabUpstreamName = "upstream.bench"

// NetLab is the network figures' two namespaces and the upstream server.
type NetLab struct {
	// HostNS pins the namespace the daemon under test runs in; HostsFile
	// names the upstream for its resolver.
	HostNS, HostsFile string
	dir               string
	srv               *http.Server
	relay             net.Listener
	// lastPeer is the address the upstream server's last request came
	// from (netip.AddrPort).
	lastPeer atomic.Value
}

// UpstreamURL is the upstream server's base URL, by name.
func (l *NetLab) UpstreamURL() string { return "http://" + LabUpstreamName }

// UpstreamAddrURL is the same by address, for a client in HostNS.
func (l *NetLab) UpstreamAddrURL() string { return "http://" + labUpstreamAddr.Addr().String() }

// RelayURL is the upstream server through the bare relay, for a client in
// the client namespace.
func (l *NetLab) RelayURL() string {
	return "http://" + net.JoinHostPort(labRelayAddr.Addr().String(), labRelayPort)
}

func (l *NetLab) clientNS() string   { return filepath.Join(l.dir, "client") }
func (l *NetLab) upstreamNS() string { return filepath.Join(l.dir, "upstream") }

// NewNetLab builds the lab; Close takes it down.
func NewNetLab() (_ *NetLab, retErr error) {
	dir, err := os.MkdirTemp("", "sbx-bench-net-")
	if err != nil {
		return nil, err
	}
	l := &NetLab{dir: dir, HostNS: filepath.Join(dir, "host"), HostsFile: filepath.Join(dir, "hosts")}
	defer func() {
		if retErr != nil {
			l.Close()
		}
	}()
	up := l.upstreamNS()
	for _, p := range []string{l.HostNS, up, l.clientNS()} {
		if err := pin(p); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(l.HostsFile, []byte("127.0.0.1 localhost\n"+labUpstreamAddr.Addr().String()+" "+LabUpstreamName+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := link(l.HostNS, up, "bench0", "bench1", labHostAddr, labUpstreamAddr, upstreamMTU); err != nil {
		return nil, err
	}
	if err := link(l.HostNS, l.clientNS(), "bench2", "bench3", labRelayAddr, labClientAddr, clientMTU); err != nil {
		return nil, err
	}
	upFD, err := os.Open(up)
	if err != nil {
		return nil, err
	}
	defer upFD.Close()
	var ln net.Listener
	if err := osthread.Discarded(func() error {
		if err := unix.Setns(int(upFD.Fd()), unix.CLONE_NEWNET); err != nil {
			return err
		}
		ln, err = net.Listen("tcp4", net.JoinHostPort(labUpstreamAddr.Addr().String(), "80"))
		return err
	}); err != nil {
		return nil, fmt.Errorf("network lab: upstream listener: %w", err)
	}
	l.srv = &http.Server{Handler: http.HandlerFunc(l.serveLab), ReadHeaderTimeout: 10 * time.Second}
	go l.srv.Serve(ln)
	hostFD, err := os.Open(l.HostNS)
	if err != nil {
		return nil, err
	}
	defer hostFD.Close()
	if err := osthread.Discarded(func() error {
		if err := unix.Setns(int(hostFD.Fd()), unix.CLONE_NEWNET); err != nil {
			return err
		}
		l.relay, err = net.Listen("tcp4", net.JoinHostPort(labRelayAddr.Addr().String(), labRelayPort))
		return err
	}); err != nil {
		return nil, fmt.Errorf("network lab: relay listener: %w", err)
	}
	go l.serveRelay()
	return l, nil
}

// link joins the namespaces pinned at a and b by a veth, aName (address
// aAddr) in a and bName (bAddr) in b, of MTU mtu, and sets both up with
// their loopbacks.
func link(a, b, aName, bName string, aAddr, bAddr netip.Prefix, mtu int) error {
	aFD, err := os.Open(a)
	if err != nil {
		return err
	}
	defer aFD.Close()
	bFD, err := os.Open(b)
	if err != nil {
		return err
	}
	defer bFD.Close()
	ah, err := netlink.NewHandleAt(netns.NsHandle(aFD.Fd()))
	if err != nil {
		return err
	}
	defer ah.Close()
	bh, err := netlink.NewHandleAt(netns.NsHandle(bFD.Fd()))
	if err != nil {
		return err
	}
	defer bh.Close()
	la := netlink.NewLinkAttrs()
	la.Name = aName
	la.MTU = mtu
	if err := ah.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: bName, PeerNamespace: netlink.NsFd(bFD.Fd())}); err != nil {
		return fmt.Errorf("network lab: veth %s: %w", aName, err)
	}
	for _, side := range []struct {
		h    *netlink.Handle
		link string
		addr netip.Prefix
	}{{ah, aName, aAddr}, {bh, bName, bAddr}} {
		for _, name := range []string{"lo", side.link} {
			lk, err := side.h.LinkByName(name)
			if err != nil {
				return err
			}
			if name != "lo" {
				ipn := &net.IPNet{IP: side.addr.Addr().AsSlice(), Mask: net.CIDRMask(side.addr.Bits(), 32)}
				if err := side.h.AddrAdd(lk, &netlink.Addr{IPNet: ipn}); err != nil {
					return fmt.Errorf("network lab: address %s: %w", side.addr, err)
				}
			}
			if err := side.h.LinkSetUp(lk); err != nil {
				return err
			}
		}
	}
	return nil
}

// serveRelay serves the relay's listener: each connection is joined to a
// new one to the upstream server, made in the host namespace, bytes copied
// both ways by io.Copy (splice between two TCP sockets) until both
// directions end. It is what any TCP proxy must do at least: the egress
// proxy's floor on the same links.
func (l *NetLab) serveRelay() {
	for {
		c, err := l.relay.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := l.dialUpstream()
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{})
			go func() {
				io.Copy(up, c)
				up.CloseWrite()
				close(done)
			}()
			io.Copy(c, up)
			c.(*net.TCPConn).CloseWrite()
			<-done
		}()
	}
}

// dialUpstream connects to the upstream server from the host namespace: a
// socket belongs to the namespace of the thread that made it, so it is made
// on a thread of its own moved there, never in the bench's own namespace.
func (l *NetLab) dialUpstream() (*net.TCPConn, error) {
	ns, err := os.Open(l.HostNS)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	var c net.Conn
	err = osthread.Discarded(func() error {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return err
		}
		c, err = net.Dial("tcp4", net.JoinHostPort(labUpstreamAddr.Addr().String(), "80"))
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// labChunk is what /bytes sends, over and over: small enough to stay in
// the CPU's cache (1 MiB chunks made the server, not the path, the limit).
var labChunk = make([]byte, 32<<10)

// serveLab answers "ok", or n bytes at /bytes?n=.
func (l *NetLab) serveLab(w http.ResponseWriter, r *http.Request) {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		l.lastPeer.Store(ap)
	}
	n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	if r.URL.Path != "/bytes" || n <= 0 {
		w.Write([]byte("ok\n"))
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	for n > 0 {
		k := min(n, int64(len(labChunk)))
		if _, err := w.Write(labChunk[:k]); err != nil {
			return
		}
		n -= k
	}
}

// pin makes a network namespace pinned at path.
func pin(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	return osthread.Discarded(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return err
		}
		return unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, "")
	})
}

// Close stops the server and the relay and removes the namespaces (and
// the veths with them).
func (l *NetLab) Close() error {
	var errs []error
	if l.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l.srv.Shutdown(ctx)
		cancel()
	}
	if l.relay != nil {
		l.relay.Close()
	}
	for _, p := range []string{l.HostNS, l.upstreamNS(), l.clientNS()} {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, os.RemoveAll(l.dir))
	return errors.Join(errs...)
}
