// This file implements the shared log every server writes to and the queries
// tests make of it.

package fakenet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Kind says which server recorded an Event.
type Kind string

const (
	KindDNS      Kind = "dns"      // a question at the DNS server, or a DNS query the catch-all caught
	KindHTTP     Kind = "http"     // a request to a web server (:80, or :443 with TLS set)
	KindTLS      Kind = "tls"      // a ClientHello at a web server's :443
	KindTCP      Kind = "tcp"      // a connection accepted in inet, or its first bytes
	KindUDP      Kind = "udp"      // a datagram that reached inet
	KindICMP     Kind = "icmp"     // an echo request that reached inet
	KindMetadata Kind = "metadata" // a request to the fake metadata service
	KindCanary   Kind = "canary"   // a connection to a host canary, or its first bytes
)

// Ops of TCP and canary events.
const (
	OpConnect = "connect" // the connection was accepted; Data is nil
	OpData    = "data"    // the connection's first bytes, in Data
)

// maxData caps the bytes an Event keeps of a stream or datagram.
const maxData = 4096

// Event is one thing that reached a server. Local is the address the client
// reached (for the catch-all, the original destination), Remote the client's.
type Event struct {
	Seq    int // order of arrival in this Internet, from 1
	Time   time.Time
	Kind   Kind
	Op     string // what happened: "query", "request", "hello", OpConnect, OpData, "datagram", "echo"
	Local  netip.AddrPort
	Remote netip.AddrPort
	// CatchAll is set when no server listens at Local: inet's catch-all took
	// the connection or datagram.
	CatchAll bool

	// Name is the DNS question's name, the HTTP request's host or the TLS
	// ClientHello's server name, without port or final dot; its case is the
	// client's (the helpers below ignore case).
	Name   string
	QType  string // DNS: the question's type ("A", "AAAA", "TXT", …)
	Proto  string // DNS: "udp" or "tcp"
	Method string // HTTP, metadata
	Path   string // HTTP, metadata: the request URI as sent
	Header http.Header
	TLS    bool   // HTTP: the request came over TLS
	SNI    string // HTTP over TLS: the server name the client sent
	Data   []byte // first bytes of a stream, a datagram, an echo's payload (at most 4 KiB)
	Detail string // the server's answer in brief: DNS records or rcode, metadata status
}

// String renders e on one line for test logs.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s %s %s -> %s", e.Seq, e.Kind, e.Op, e.Remote, e.Local)
	if e.CatchAll {
		b.WriteString(" (catch-all)")
	}
	for _, kv := range [][2]string{{"name", e.Name}, {"type", e.QType}, {"proto", e.Proto}, {"method", e.Method}, {"path", e.Path}, {"sni", e.SNI}, {"detail", e.Detail}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, " %s=%q", kv[0], kv[1])
		}
	}
	if e.TLS {
		b.WriteString(" tls")
	}
	if e.Data != nil {
		fmt.Fprintf(&b, " data=%q", truncate(e.Data, 64))
	}
	return b.String()
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// eventLog is the one log shared by every server; safe for concurrent use.
type eventLog struct {
	mu sync.Mutex
	// events, seq and changed are guarded by mu. changed is closed and
	// replaced whenever an event is added, waking Wait.
	events  []Event
	seq     int
	changed chan struct{}
}

func newEventLog() *eventLog { return &eventLog{changed: make(chan struct{})} }

func (l *eventLog) add(e Event) {
	e.Local = unmap(e.Local)
	e.Remote = unmap(e.Remote)
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	e.Seq = l.seq
	l.events = append(l.events, e)
	close(l.changed)
	l.changed = make(chan struct{})
}

// snapshot returns the events so far and a channel closed on the next add.
func (l *eventLog) snapshot() ([]Event, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.events...), l.changed
}

func (l *eventLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = nil
}

func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// addrPort converts a net.Addr of a TCP or UDP socket; anything else is zero.
func addrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		return unmap(a.AddrPort())
	case *net.UDPAddr:
		return unmap(a.AddrPort())
	}
	if a != nil {
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			return unmap(ap)
		}
	}
	return netip.AddrPort{}
}

// Log returns every event since New or the last Reset, in order. Events share
// their Header and Data with the log: read them, do not change them.
func (n *Internet) Log() []Event {
	ev, _ := n.log.snapshot()
	return ev
}

// Events returns the events match accepts, in order.
func (n *Internet) Events(match func(Event) bool) []Event {
	var out []Event
	for _, e := range n.Log() {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

// Count returns how many events match accepts.
func (n *Internet) Count(match func(Event) bool) int { return len(n.Events(match)) }

// Seen reports whether any event so far is accepted by match.
func (n *Internet) Seen(match func(Event) bool) bool { return n.Count(match) > 0 }

// Wait returns the first event match accepts, waiting for one to arrive until
// ctx is done. Servers log asynchronously: a client's connect can return before
// the server has accepted, so a test that expects an event waits for it.
func (n *Internet) Wait(ctx context.Context, match func(Event) bool) (Event, error) {
	for {
		ev, changed := n.log.snapshot()
		for _, e := range ev {
			if match(e) {
				return e, nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Event{}, fmt.Errorf("waiting for an event in the fake internet's log: %w", context.Cause(ctx))
		}
	}
}

// Reset empties the log and restarts rebind.test's alternation.
func (n *Internet) Reset() {
	n.log.reset()
	n.dns.resetRebind()
}

// Is returns a matcher for events of kind k.
func Is(k Kind) func(Event) bool { return func(e Event) bool { return e.Kind == k } }

// At returns a matcher for events whose Local address is a (any port).
func At(a netip.Addr) func(Event) bool {
	return func(e Event) bool { return e.Local.Addr() == a.Unmap() }
}

// underName reports whether name is suffix or a name under it, ignoring case.
func underName(name, suffix string) bool {
	name, suffix = strings.ToLower(name), strings.TrimSuffix(strings.ToLower(suffix), ".")
	return name == suffix || strings.HasSuffix(name, "."+suffix)
}

// sameName reports whether two names are equal, ignoring case and a final dot.
func sameName(a, b string) bool {
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// DNSQueries counts the DNS questions for suffix or any name under it that
// reached inet: at the DNS server, or sent to any other address and caught by
// the catch-all (NW-06 counts both).
func (n *Internet) DNSQueries(suffix string) int {
	return n.Count(func(e Event) bool { return e.Kind == KindDNS && underName(e.Name, suffix) })
}

// HTTPRequests returns the HTTP requests (plain or TLS, to any address) whose
// host is host.
func (n *Internet) HTTPRequests(host string) []Event {
	return n.Events(func(e Event) bool { return e.Kind == KindHTTP && sameName(e.Name, host) })
}

// TLSHellos returns the TLS ClientHellos whose server name is sni ("" for
// hellos without one).
func (n *Internet) TLSHellos(sni string) []Event {
	return n.Events(func(e Event) bool { return e.Kind == KindTLS && sameName(e.Name, sni) })
}

// Connects counts TCP connections accepted at addr, by any server in inet, by
// the catch-all, or by a host canary.
func (n *Internet) Connects(addr netip.AddrPort) int {
	addr = unmap(addr)
	return n.Count(func(e Event) bool {
		return (e.Kind == KindTCP || e.Kind == KindCanary) && e.Op == OpConnect && e.Local == addr
	})
}

// Datagrams returns the UDP datagrams that reached addr.
func (n *Internet) Datagrams(addr netip.AddrPort) []Event {
	addr = unmap(addr)
	return n.Events(func(e Event) bool { return e.Kind == KindUDP && e.Local == addr })
}

// MetadataRequests returns every request the fake metadata service received.
func (n *Internet) MetadataRequests() []Event { return n.Events(Is(KindMetadata)) }

// Reached returns every event at addr, whatever the port or kind: for a test
// that something logs nothing at all.
func (n *Internet) Reached(addr netip.Addr) []Event { return n.Events(At(addr)) }
