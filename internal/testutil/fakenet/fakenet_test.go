package fakenet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/testutil"
)

// nsInode returns the inode of the network namespace at path.
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

// ourAddrs are every address New puts in either namespace.
func ourAddrs() []netip.Addr {
	return append(append(webAddrs(), metadataAddrs()...), HostAddr, HostAddr6, InetAddr, InetAddr6, DNSAddr, DNSAddr6)
}

// linksAndAddrs lists, in the calling thread's namespace, each link's name and
// each address, read through netlink (nothing is sent on any network).
func linksAndAddrs() (links []string, addrs []netip.Addr, err error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, nil, err
	}
	defer h.Close()
	ls, err := h.LinkList()
	if err != nil {
		return nil, nil, err
	}
	for _, l := range ls {
		links = append(links, l.Attrs().Name)
	}
	as, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range as {
		ip, _ := netip.AddrFromSlice(a.IP)
		addrs = append(addrs, ip.Unmap())
	}
	return links, addrs, nil
}

// TestNamespacesAreWired checks each namespace holds what it should, read from
// inside it: host has the uplink and its addresses, inet the services'.
func TestNamespacesAreWired(t *testing.T) {
	n := New(t)
	for _, tc := range []struct {
		ns    string
		link  string
		addrs []netip.Addr
	}{
		{n.HostNS, HostLink, []netip.Addr{HostAddr, HostAddr6}},
		{n.InetNS, InetLink, append(append(webAddrs(), metadataAddrs()...), InetAddr, InetAddr6, DNSAddr, DNSAddr6)},
	} {
		err := n.Do(tc.ns, func() error {
			links, addrs, err := linksAndAddrs()
			if err != nil {
				return err
			}
			if !slices.Contains(links, tc.link) || len(links) != 2 {
				return fmt.Errorf("links %v, want lo and %s", links, tc.link)
			}
			for _, a := range tc.addrs {
				if !slices.Contains(addrs, a) {
					return fmt.Errorf("address %s missing from %v", a, addrs)
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(tc.ns), err)
		}
	}
}

// netState is what the test's own namespace holds, read through netlink
// (nothing is sent on any network): links, addresses, routes of every table,
// policy rules and nftables tables.
type netState struct {
	links, routes, rules, tables []string
	addrs                        []netip.Addr
}

func readNetState() (st netState, err error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return st, err
	}
	defer h.Close()
	if st.links, st.addrs, err = linksAndAddrs(); err != nil {
		return st, err
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return st, err
	}
	for _, r := range routes {
		st.routes = append(st.routes, r.String())
	}
	rules, err := h.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		return st, err
	}
	for _, r := range rules {
		st.rules = append(st.rules, r.String())
	}
	c, err := nftables.New()
	if err != nil {
		return st, err
	}
	tables, err := c.ListTables()
	if err != nil {
		return st, err
	}
	for _, t := range tables {
		st.tables = append(st.tables, t.Name)
	}
	for _, l := range [][]string{st.links, st.routes, st.rules, st.tables} {
		slices.Sort(l)
	}
	return st, nil
}

// testNetState reads netState in the test process's own namespace, entered
// explicitly so the thread's namespace is certain.
func testNetState(t *testing.T) netState {
	t.Helper()
	var st netState
	err := do("/proc/self/ns/net", func() (err error) {
		st, err = readNetState()
		return err
	})
	if err != nil {
		t.Fatalf("reading the test's namespace: %v", err)
	}
	return st
}

// TestTestNamespaceUntouched checks, from the namespace the test runs in, that
// New changed nothing there: links, addresses, routes, rules and nftables are
// as before, and both pins are other namespaces.
func TestTestNamespaceUntouched(t *testing.T) {
	before := testNetState(t)
	n := New(t)
	self := nsInode(t, "/proc/self/ns/net")
	for _, pin := range []string{n.HostNS, n.InetNS} {
		if nsInode(t, pin) == self {
			t.Errorf("%s pins the test's own namespace", pin)
		}
	}
	if nsInode(t, n.HostNS) == nsInode(t, n.InetNS) {
		t.Errorf("host and inet are one namespace")
	}
	// Use the fake internet, so anything it would do lazily has happened.
	c := n.HTTPClient(n.HostNS)
	defer c.CloseIdleConnections()
	get(t, c, http.MethodGet, "https://allowed.test/", nil, nil)

	after := testNetState(t)
	for _, d := range []struct {
		what          string
		before, after []string
	}{
		{"links", before.links, after.links},
		{"routes", before.routes, after.routes},
		{"rules", before.rules, after.rules},
		{"nftables tables", before.tables, after.tables},
	} {
		if !slices.Equal(d.before, d.after) {
			t.Errorf("%s of the test's namespace changed:\n%v\nwas\n%v", d.what, d.after, d.before)
		}
	}
	for _, a := range ourAddrs() {
		if slices.Contains(after.addrs, a) && !slices.Contains(before.addrs, a) {
			t.Errorf("address %s appeared in the test's namespace", a)
		}
	}
	for _, l := range []string{HostLink, InetLink} {
		if slices.Contains(after.links, l) {
			t.Errorf("link %s is in the test's namespace", l)
		}
	}
}

// TestGuardRefusesForeignSockets checks the namespace guard every helper uses:
// a socket made outside the namespace is refused before it binds or connects.
func TestGuardRefusesForeignSockets(t *testing.T) {
	n := New(t)
	guard, err := nsGuard(n.HostNS)
	if err != nil {
		t.Fatal(err)
	}
	// This goroutine's thread is in the test's namespace; the target is its
	// loopback, so even a failed guard would send nothing off the machine.
	var errs []error
	do("/proc/self/ns/net", func() error {
		_, err := (&net.Dialer{Control: guard}).Dial("tcp", "127.0.0.1:9")
		errs = append(errs, err)
		_, err = (&net.ListenConfig{Control: guard}).Listen(context.Background(), "tcp", "127.0.0.1:0")
		errs = append(errs, err)
		return nil
	})
	for _, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "outside network namespace") {
			t.Errorf("guard let a foreign socket through: %v", err)
		}
	}
	// The same guard passes a socket made inside.
	l, err := n.Listen(n.HostNS, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening in host: %v", err)
	}
	l.Close()
}

// TestCmdRunsInNamespace runs programs with Cmd in each namespace and checks
// what they see, and that curl in host reaches allowed.test's server.
func TestCmdRunsInNamespace(t *testing.T) {
	n := New(t)
	out, err := n.Cmd(n.HostNS, "ip", "-o", "addr", "show", "dev", HostLink).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "198.18.0.1/24") {
		t.Errorf("ip addr in host: %v\n%s", err, out)
	}
	out, err = n.Cmd(n.InetNS, "ip", "-o", "addr", "show", "dev", "lo").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "198.18.1.10/32") {
		t.Errorf("ip addr in inet: %v\n%s", err, out)
	}
	// --resolve keeps curl off the host's resolver configuration.
	out, err = n.Cmd(n.HostNS, "curl", "-sS", "-m", "10", "--cacert", n.CACertFile,
		"--resolve", "allowed.test:443:198.18.1.10", "https://allowed.test/from-curl").CombinedOutput()
	if err != nil || string(out) != "hello from allowed.test" {
		t.Fatalf("curl in host: %v\n%s", err, out)
	}
	if got := n.HTTPRequests(AllowedName); len(got) != 1 || got[0].Path != "/from-curl" || !strings.HasPrefix(got[0].Header.Get("User-Agent"), "curl/") {
		t.Errorf("HTTPRequests(allowed.test) = %v", got)
	}
	// A program's own lookup goes to the test host's nameserver address,
	// which from host is routed to inet: the catch-all logs it.
	n.Cmd(n.HostNS, "timeout", "0.5", "getent", "hosts", "probe.evil.test").Run()
	e := waitFor(t, n, "the lookup through resolv.conf", func(e Event) bool { return e.Kind == KindDNS && e.Name == "probe.evil.test" })
	if !e.CatchAll || e.Local.Port() != 53 || e.Remote.Addr() != HostAddr {
		t.Errorf("logged %v, want the catch-all's", e)
	}
}

// fakenetMounts returns the mountinfo lines mentioning a fakenet pin directory.
func fakenetMounts(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "/"+pinPrefix) {
			out = append(out, line)
		}
	}
	return out
}

func pinDirs(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), pinPrefix+strconv.Itoa(os.Getpid())+"-*"))
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestCloseLeavesNothing uses an Internet (HTTP with kept-alive connections, a
// held TCP connection, DNS), closes it, and checks nothing remains: no pin
// mount or directory, no link in the test's namespace, no fd or goroutine,
// the veth gone from inet even while the test still holds inet open, and a
// second Close is harmless.
func TestCloseLeavesNothing(t *testing.T) {
	testutil.CheckLeaks(t) // runs last: after the Close below and New's cleanup
	mounts, dirs := fakenetMounts(t), pinDirs(t)
	links := testNetState(t).links

	n := New(t)
	if got := fakenetMounts(t); len(got) != len(mounts)+2 {
		t.Fatalf("mounts after New: %v, want two pins more than %v", got, mounts)
	}
	c := n.HTTPClient(n.HostNS)
	for _, u := range []string{"http://allowed.test/", "https://blocked.test/"} {
		resp, _ := get(t, c, http.MethodGet, u, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", u, resp.StatusCode)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	held, err := n.Dial(ctx, n.HostNS, "tcp", "198.18.1.10:9000")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	waitFor(t, n, "the held connection", func(e Event) bool { return e.Local == netip.MustParseAddrPort("198.18.1.10:9000") })
	inet, err := os.Open(n.InetNS)
	if err != nil {
		t.Fatal(err)
	}
	defer inet.Close()

	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// The server's end of the held connection was closed.
	held.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("reading the held connection after Close: %v, want EOF or reset", err)
	}
	held.Close()
	if got := fakenetMounts(t); !slices.Equal(got, mounts) {
		t.Errorf("mounts after Close: %v, want %v", got, mounts)
	}
	if got := pinDirs(t); !slices.Equal(got, dirs) {
		t.Errorf("pin directories after Close: %v, want %v", got, dirs)
	}
	if _, err := os.Stat(n.HostNS); !os.IsNotExist(err) {
		t.Errorf("host pin after Close: %v", err)
	}
	if after := testNetState(t).links; !slices.Equal(after, links) {
		t.Errorf("links of the test's namespace after Close: %v, was %v", after, links)
	}
	// inet lives on only through the fd held above: the veth is gone from it.
	err = do("/proc/self/fd/"+strconv.Itoa(int(inet.Fd())), func() error {
		links, _, err := linksAndAddrs()
		if err != nil {
			return err
		}
		if !slices.Equal(links, []string{"lo"}) {
			return fmt.Errorf("links left in inet: %v", links)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	inet.Close()
	for _, pin := range []string{n.HostNS, n.InetNS} {
		if _, err := os.Stat(pin); !os.IsNotExist(err) {
			t.Errorf("%s after Close: %v", pin, err)
		}
	}
}

// TestSweepStale checks New removes the pins left by a test process that died
// before its cleanup, and leaves a live process's alone.
func TestSweepStale(t *testing.T) {
	testutil.RequireRoot(t)
	dead := 1 << 22 // above pid_max's ceiling: never a live process
	stale, err := os.MkdirTemp("", pinPrefix+strconv.Itoa(dead)+"-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(stale)
	live, err := os.MkdirTemp("", pinPrefix+"1-") // pid 1 always exists
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(live)
	for _, d := range []string{stale, live} {
		for _, pin := range []string{"host", "inet"} {
			if err := os.WriteFile(filepath.Join(d, pin), nil, 0o444); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A stale pin still mounted: bind a fresh namespace's file as New would.
	if err := makeNamespaces(filepath.Join(stale, "host"), filepath.Join(stale, "inet")); err != nil {
		t.Fatal(err)
	}
	New(t)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		unpin(filepath.Join(stale, "host"))
		unpin(filepath.Join(stale, "inet"))
		t.Errorf("the dead process's pins survived New: %v", err)
	}
	if _, err := os.Stat(filepath.Join(live, "host")); err != nil {
		t.Errorf("a live process's pins were removed: %v", err)
	}
}

// TestWaitAndReset checks Wait returns an event already logged or one that
// arrives later, gives up with its context, and that Reset empties the log.
func TestWaitAndReset(t *testing.T) {
	n := New(t)
	n.log.add(Event{Kind: KindUDP, Op: "datagram"})
	if e := waitFor(t, n, "an old event", Is(KindUDP)); e.Seq != 1 {
		t.Errorf("got %v", e)
	}
	go func() {
		time.Sleep(10 * time.Millisecond)
		n.log.add(Event{Kind: KindICMP, Op: "echo"})
	}()
	if e := waitFor(t, n, "a later event", Is(KindICMP)); e.Seq != 2 {
		t.Errorf("got %v", e)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := n.Wait(ctx, Is(KindCanary)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait for nothing: %v, want the context's deadline", err)
	}
	n.Reset()
	if got := n.Log(); len(got) != 0 {
		t.Errorf("Log after Reset: %v", got)
	}
}

// TestParallelInternets runs several Internets at once and checks each sees
// only its own traffic: tests that build one each may run in parallel.
func TestParallelInternets(t *testing.T) {
	for i := range 3 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			n := New(t)
			c := n.HTTPClient(n.HostNS)
			defer c.CloseIdleConnections()
			path := "/internet-" + strconv.Itoa(i)
			for range 5 {
				get(t, c, http.MethodGet, "https://allowed.test"+path, nil, nil)
			}
			reqs := n.HTTPRequests(AllowedName)
			if len(reqs) != 5 {
				t.Fatalf("%d requests logged, want 5\n%s", len(reqs), dump(n))
			}
			for _, e := range reqs {
				if e.Path != path {
					t.Errorf("logged another Internet's request: %v", e)
				}
			}
		})
	}
}

// BenchmarkNew measures building and closing a fake internet.
func BenchmarkNew(b *testing.B) {
	for b.Loop() {
		n := New(b)
		if err := n.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
