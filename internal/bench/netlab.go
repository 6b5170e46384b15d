// This file builds the network figures' lab: two network namespaces of the
// bench's own, joined by a veth in 198.18.0.0/24 (the benchmarking range):
// "host", where a private daemon runs, and "upstream", where an HTTP server
// of this process answers. No packet reaches a real address, and the host's
// own namespace is not changed.

package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/osthread"
)

// Lab addresses: the daemon's namespace and the upstream server's.
var (
	labHostAddr     = netip.MustParsePrefix("198.18.0.1/24")
	labUpstreamAddr = netip.MustParsePrefix("198.18.0.2/24")
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
}

// UpstreamURL is the upstream server's base URL, by name.
func (l *NetLab) UpstreamURL() string { return "http://" + LabUpstreamName }

// UpstreamAddrURL is the same by address, for a client in HostNS.
func (l *NetLab) UpstreamAddrURL() string { return "http://" + labUpstreamAddr.Addr().String() }

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
	up := filepath.Join(dir, "upstream")
	for _, p := range []string{l.HostNS, up} {
		if err := pin(p); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(l.HostsFile, []byte("127.0.0.1 localhost\n"+labUpstreamAddr.Addr().String()+" "+LabUpstreamName+"\n"), 0o644); err != nil {
		return nil, err
	}
	hostFD, err := os.Open(l.HostNS)
	if err != nil {
		return nil, err
	}
	defer hostFD.Close()
	upFD, err := os.Open(up)
	if err != nil {
		return nil, err
	}
	defer upFD.Close()
	h, err := netlink.NewHandleAt(netns.NsHandle(hostFD.Fd()))
	if err != nil {
		return nil, err
	}
	defer h.Close()
	u, err := netlink.NewHandleAt(netns.NsHandle(upFD.Fd()))
	if err != nil {
		return nil, err
	}
	defer u.Close()
	la := netlink.NewLinkAttrs()
	la.Name = "bench0"
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "bench1", PeerNamespace: netlink.NsFd(upFD.Fd())}); err != nil {
		return nil, fmt.Errorf("network lab: veth: %w", err)
	}
	for _, side := range []struct {
		h    *netlink.Handle
		link string
		addr netip.Prefix
	}{{h, "bench0", labHostAddr}, {u, "bench1", labUpstreamAddr}} {
		for _, name := range []string{"lo", side.link} {
			lk, err := side.h.LinkByName(name)
			if err != nil {
				return nil, err
			}
			if name != "lo" {
				ipn := &net.IPNet{IP: side.addr.Addr().AsSlice(), Mask: net.CIDRMask(side.addr.Bits(), 32)}
				if err := side.h.AddrAdd(lk, &netlink.Addr{IPNet: ipn}); err != nil {
					return nil, fmt.Errorf("network lab: address: %w", err)
				}
			}
			if err := side.h.LinkSetUp(lk); err != nil {
				return nil, err
			}
		}
	}
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
	l.srv = &http.Server{Handler: http.HandlerFunc(serveLab), ReadHeaderTimeout: 10 * time.Second}
	go l.srv.Serve(ln)
	return l, nil
}

// labChunk is what /bytes sends, over and over: small enough to stay in
// the CPU's cache (1 MiB chunks made the server, not the path, the limit).
var labChunk = make([]byte, 32<<10)

// serveLab answers "ok", or n bytes at /bytes?n=.
func serveLab(w http.ResponseWriter, r *http.Request) {
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

// Close stops the server and removes both namespaces (and the veth with
// them).
func (l *NetLab) Close() error {
	var errs []error
	if l.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l.srv.Shutdown(ctx)
		cancel()
	}
	for _, p := range []string{l.HostNS, filepath.Join(l.dir, "upstream")} {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, os.RemoveAll(l.dir))
	return errors.Join(errs...)
}
