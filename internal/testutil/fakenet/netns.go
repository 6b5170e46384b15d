// This file implements the two namespaces: making and pinning them, and running
// code, programs and sockets inside them from the test process.

package fakenet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/osthread"
)

// pinPrefix starts the name of the temporary directory holding one Internet's
// namespace pins: fakenet-<pid>-<random>, so a later New can tell the pins of a
// test process that died without cleaning up.
const pinPrefix = "fakenet-"

// makeNamespaces creates two new network namespaces and pins them with bind
// mounts at host and inet (existing empty files). It never enters a namespace
// on a thread that goes back to the scheduler.
func makeNamespaces(host, inet string) error {
	return osthread.Discarded(func() error {
		for _, pin := range []string{host, inet} {
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("creating a network namespace: %w", err)
			}
			if err := unix.Mount("/proc/thread-self/ns/net", pin, "", unix.MS_BIND, ""); err != nil {
				return fmt.Errorf("pinning a network namespace at %s: %w", pin, err)
			}
		}
		return nil
	})
}

// unpin unmounts a namespace pin; a pin that is not mounted is not an error.
func unpin(pin string) error {
	err := unix.Unmount(pin, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmounting namespace pin %s: %w", pin, err)
	}
	return nil
}

// sweepStale removes the pins of Internets whose test process is gone (killed
// before its cleanup ran), so they do not pile up across runs.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), pinPrefix+"*"))
	for _, dir := range dirs {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(dir), pinPrefix), "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat("/proc/" + pidText); err == nil {
			continue // still running
		}
		failed := false
		for _, pin := range []string{"host", "inet"} {
			if unpin(filepath.Join(dir, pin)) != nil {
				failed = true
			}
		}
		if !failed {
			os.RemoveAll(dir)
		}
	}
}

// Do runs fn on a locked OS thread that has entered the network namespace
// pinned at ns (HostNS, InetNS, or any nsfs path such as /proc/self/ns/net), and
// that ends when fn returns. Sockets fn creates stay in that namespace and may
// be used from any goroutine afterwards.
//
// Only fn's own thread is in ns: a socket the Go runtime makes on another
// goroutine is not. net.Dial of a name with several addresses does exactly
// that (it races them on new goroutines), and its name lookup reads the test
// host's resolv.conf; use Dial, Listen, ListenPacket, Resolver or HTTPClient,
// which resolve through the fake DNS server, dial one address at a time, and
// refuse any socket outside ns before it sends.
func (n *Internet) Do(ns string, fn func() error) error { return do(ns, fn) }

func do(ns string, fn func() error) error {
	f, err := os.Open(ns)
	if err != nil {
		return fmt.Errorf("opening network namespace: %w", err)
	}
	defer f.Close()
	return osthread.Discarded(func() error {
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("entering network namespace %s: %w", ns, err)
		}
		return fn()
	})
}

// Cmd returns a command that runs name with args in the network namespace ns,
// through util-linux's nsenter; the rest of its context (mounts, so /etc and
// /sys, pid namespace, environment) is the test process's. In host, a name it
// looks up through the test host's resolv.conf goes to that nameserver's
// address, which routes to inet's catch-all: logged, never answered. Give it
// addresses (curl --resolve) or point it at Nameserver.
func (n *Internet) Cmd(ns string, name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + ns, "--", name}, args...)...)
}

// nsGuard returns a socket Control function that fails unless the socket
// belongs to the network namespace pinned at ns. Sockets here are made on a
// thread inside ns, but the Go runtime may make one on a goroutine of its own
// (a dual-stack dial races its addresses on new goroutines, on threads outside
// ns): the guard stops such a socket before it binds or sends anything.
func nsGuard(ns string) (func(network, address string, c syscall.RawConn) error, error) {
	var want unix.Stat_t
	if err := unix.Stat(ns, &want); err != nil {
		return nil, fmt.Errorf("reading network namespace %s: %w", ns, err)
	}
	return func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			nsfd, err := unix.IoctlRetInt(int(fd), unix.SIOCGSKNS)
			if err != nil {
				serr = fmt.Errorf("finding the network namespace of a %s socket: %w", network, err)
				return
			}
			defer unix.Close(nsfd)
			var got unix.Stat_t
			if err := unix.Fstat(nsfd, &got); err != nil {
				serr = fmt.Errorf("finding the network namespace of a %s socket: %w", network, err)
				return
			}
			if got.Dev != want.Dev || got.Ino != want.Ino {
				serr = fmt.Errorf("a %s socket for %s is outside network namespace %s: refusing to use it", network, address, ns)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}, nil
}

// listenConfig returns a ListenConfig whose sockets must be in ns; more runs
// after the guard, before bind.
func listenConfig(ns string, more func(network, address string, c syscall.RawConn) error) (*net.ListenConfig, error) {
	guard, err := nsGuard(ns)
	if err != nil {
		return nil, err
	}
	return &net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		if err := guard(network, address, c); err != nil {
			return err
		}
		if more != nil {
			return more(network, address, c)
		}
		return nil
	}}, nil
}

// Listen announces on the local address addr in the network namespace ns
// ("tcp", "tcp4", "tcp6", "unix").
func (n *Internet) Listen(ns, network, addr string) (net.Listener, error) {
	lc, err := listenConfig(ns, nil)
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	err = do(ns, func() (err error) {
		ln, err = lc.Listen(context.Background(), network, addr)
		return err
	})
	return ln, err
}

// ListenPacket announces on the local address addr in the network namespace ns
// ("udp", "udp4", "udp6").
func (n *Internet) ListenPacket(ns, network, addr string) (net.PacketConn, error) {
	lc, err := listenConfig(ns, nil)
	if err != nil {
		return nil, err
	}
	var pc net.PacketConn
	err = do(ns, func() (err error) {
		pc, err = lc.ListenPacket(context.Background(), network, addr)
		return err
	})
	return pc, err
}

// Dial connects to addr ("host:port") over network ("tcp", "tcp4", "tcp6",
// "udp", …) from the network namespace ns. A name is resolved by the fake DNS
// server (see Resolver), never by the test host's resolver, and its addresses
// are tried one after the other.
func (n *Internet) Dial(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	guard, err := nsGuard(ns)
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", addr, err)
	}
	ips, err := n.lookup(ctx, ns, network, host)
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", addr, err)
	}
	// One literal address at a time: the dial then runs on the calling
	// goroutine, locked to the thread in ns.
	d := net.Dialer{Control: guard}
	var errs []error
	for _, ip := range ips {
		var c net.Conn
		err := do(ns, func() (err error) {
			c, err = d.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
			return err
		})
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// lookup returns host's addresses usable on network: host itself when it is a
// literal, else what the fake DNS server says.
func (n *Internet) lookup(ctx context.Context, ns, network, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	family := "ip"
	switch {
	case strings.HasSuffix(network, "4"):
		family = "ip4"
	case strings.HasSuffix(network, "6"):
		family = "ip6"
	}
	ips, err := n.Resolver(ns).LookupNetIP(ctx, family, host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("no %s address for %s", family, host)
	}
	return ips, nil
}

// Resolver returns a resolver that asks the fake DNS server, from the network
// namespace ns, whatever /etc/resolv.conf says.
func (n *Internet) Resolver(ns string) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			guard, err := nsGuard(ns)
			if err != nil {
				return nil, err
			}
			d := net.Dialer{Control: guard}
			var c net.Conn
			err = do(ns, func() (err error) {
				c, err = d.DialContext(ctx, network, Nameserver)
				return err
			})
			return c, err
		},
	}
}

// HTTPClient returns a client whose connections start in the network namespace
// ns, resolve names with the fake DNS server and trust the fake internet's CA
// (and nothing else). It uses no proxy from the environment.
func (n *Internet) HTTPClient(ns string) *http.Client {
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return n.Dial(ctx, ns, network, addr)
		},
		TLSClientConfig:   &tls.Config{RootCAs: n.CAPool},
		ForceAttemptHTTP2: true,
		IdleConnTimeout:   time.Second,
	}
	n.mu.Lock()
	n.transports = append(n.transports, tr) // Close drops their idle connections
	n.mu.Unlock()
	return &http.Client{
		Transport: tr,
		Timeout:   30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a test sees a redirect, it does not follow it
		},
	}
}
