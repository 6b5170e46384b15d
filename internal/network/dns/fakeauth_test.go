package dns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// rrset is what the fake authoritative server knows of one name.
type rrset struct {
	a, aaaa []string
	cname   string
	txt     string
	ttl     uint32 // 0 means 60
	rcode   dnsmessage.RCode
}

// seenQuery is one query the fake server received.
type seenQuery struct {
	name string // lower case, without the trailing dot
	typ  dnsmessage.Type
	tcp  bool
}

// fakeAuth is an authoritative DNS server on loopback, UDP and TCP on one port,
// that records every query it sees. Names under a "*.zone" key answer for the
// whole zone.
type fakeAuth struct {
	addr string // "127.0.0.1:port"

	mu    sync.Mutex
	zone  map[string]rrset // guarded by mu
	seen  []seenQuery      // guarded by mu
	hold  chan struct{}    // guarded by mu; when set, answers wait for it to close
	entry chan string      // guarded by mu; when set, receives each name asked before holding

	udp net.PacketConn
	tcp net.Listener
	wg  sync.WaitGroup
}

// newFakeAuth starts a fake server on ip, UDP and TCP on one port: port, or
// any free one when port is 0.
func newFakeAuth(t *testing.T, ip string, port int, zone map[string]rrset) *fakeAuth {
	t.Helper()
	f, err := startFakeAuth(ip, port, zone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.stop)
	return f
}

// newFakeAuthPair starts two fake servers on one port, at ip1 and ip2, as
// resolv.conf's nameservers (which name no port) would be.
func newFakeAuthPair(t *testing.T, ip1, ip2 string, zone func() map[string]rrset) (*fakeAuth, *fakeAuth) {
	t.Helper()
	var err error
	for range 20 { // the port free at ip1 may be taken at ip2: try another
		f1, err1 := startFakeAuth(ip1, 0, zone())
		if err1 != nil {
			t.Fatal(err1)
		}
		f2, err2 := startFakeAuth(ip2, f1.port(), zone())
		if err2 == nil {
			t.Cleanup(f1.stop)
			t.Cleanup(f2.stop)
			return f1, f2
		}
		f1.stop()
		err = err2
	}
	t.Fatal(err)
	return nil, nil
}

func startFakeAuth(ip string, port int, zone map[string]rrset) (*fakeAuth, error) {
	f := &fakeAuth{zone: zone}
	var err error
	for range 20 { // the port free for UDP may be taken for TCP: try another
		f.udp, err = net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("fake DNS: %w", err)
		}
		p := f.udp.LocalAddr().(*net.UDPAddr).Port
		f.tcp, err = net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p)))
		if err == nil {
			f.addr = net.JoinHostPort(ip, strconv.Itoa(p))
			break
		}
		f.udp.Close()
		if port != 0 {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("fake DNS: %w", err)
	}
	f.wg.Go(f.serveUDP)
	f.wg.Go(f.serveTCP)
	return f, nil
}

func (f *fakeAuth) stop() {
	f.release()
	f.udp.Close()
	f.tcp.Close()
	f.wg.Wait()
}

func (f *fakeAuth) port() int { return f.udp.LocalAddr().(*net.UDPAddr).Port }

// holdAnswers makes answers wait until release; each query's name is sent on
// the returned channel when it arrives.
func (f *fakeAuth) holdAnswers() <-chan string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold, f.entry = make(chan struct{}), make(chan string, 100)
	return f.entry
}

func (f *fakeAuth) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hold != nil {
		close(f.hold)
		f.hold = nil
	}
}

func (f *fakeAuth) set(name string, r rrset) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.zone[name] = r
}

// count returns how many queries for name (and type, unless 0) arrived.
func (f *fakeAuth) count(name string, t dnsmessage.Type) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, q := range f.seen {
		if q.name == name && (t == 0 || q.typ == t) {
			n++
		}
	}
	return n
}

// queries returns every query seen.
func (f *fakeAuth) queries() []seenQuery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenQuery(nil), f.seen...)
}

func (f *fakeAuth) serveUDP() {
	buf := make([]byte, 65535)
	for {
		n, from, err := f.udp.ReadFrom(buf)
		if err != nil {
			return
		}
		req := append([]byte(nil), buf[:n]...)
		f.wg.Go(func() {
			if resp := f.respond(req, false); resp != nil {
				f.udp.WriteTo(resp, from)
			}
		})
	}
}

func (f *fakeAuth) serveTCP() {
	for {
		c, err := f.tcp.Accept()
		if err != nil {
			return
		}
		f.wg.Go(func() {
			defer c.Close()
			for {
				var l [2]byte
				if _, err := io.ReadFull(c, l[:]); err != nil {
					return
				}
				req := make([]byte, binary.BigEndian.Uint16(l[:]))
				if _, err := io.ReadFull(c, req); err != nil {
					return
				}
				resp := f.respond(req, true)
				if resp == nil {
					return
				}
				c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(resp))), resp...))
			}
		})
	}
}

// lookup finds the records of name, or of the nearest "*.parent" entry.
func (f *fakeAuth) lookup(name string) (rrset, bool) {
	if r, ok := f.zone[name]; ok {
		return r, true
	}
	for rest := name; strings.Contains(rest, "."); {
		rest = rest[strings.IndexByte(rest, '.')+1:]
		if r, ok := f.zone["*."+rest]; ok {
			return r, true
		}
	}
	return rrset{}, false
}

func (f *fakeAuth) respond(req []byte, tcp bool) []byte {
	var m dnsmessage.Message
	if err := m.Unpack(req); err != nil || len(m.Questions) != 1 {
		return nil
	}
	q := m.Questions[0]
	name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
	f.mu.Lock()
	f.seen = append(f.seen, seenQuery{name, q.Type, tcp})
	hold, entry := f.hold, f.entry
	f.mu.Unlock()
	if hold != nil {
		entry <- name
		<-hold
	}
	limit := 512
	for _, r := range m.Additionals {
		if r.Header.Type == dnsmessage.TypeOPT {
			limit = int(r.Header.Class)
		}
	}
	f.mu.Lock()
	r, ok := f.lookup(name)
	var answers []dnsmessage.Resource
	owner := q.Name
	for hops := 0; ok && r.cname != "" && hops < 8; hops++ {
		target := dnsmessage.MustNewName(r.cname + ".")
		answers = append(answers, dnsmessage.Resource{
			Header: dnsmessage.ResourceHeader{Name: owner, Type: dnsmessage.TypeCNAME, Class: dnsmessage.ClassINET, TTL: ttlOf(r)},
			Body:   &dnsmessage.CNAMEResource{CNAME: target},
		})
		owner = target
		r, ok = f.lookup(r.cname)
	}
	f.mu.Unlock()
	h := dnsmessage.Header{ID: m.Header.ID, Response: true, Authoritative: true, RecursionDesired: m.Header.RecursionDesired}
	switch {
	case !ok && len(answers) == 0:
		h.RCode = dnsmessage.RCodeNameError
	case ok && r.rcode != 0:
		h.RCode = r.rcode
	case ok:
		hdr := dnsmessage.ResourceHeader{Name: owner, Type: q.Type, Class: dnsmessage.ClassINET, TTL: ttlOf(r)}
		switch q.Type {
		case dnsmessage.TypeA:
			for _, s := range r.a {
				answers = append(answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AResource{A: netip.MustParseAddr(s).As4()}})
			}
		case dnsmessage.TypeAAAA:
			for _, s := range r.aaaa {
				answers = append(answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AAAAResource{AAAA: netip.MustParseAddr(s).As16()}})
			}
		case dnsmessage.TypeTXT:
			if r.txt != "" {
				answers = append(answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.TXTResource{TXT: []string{r.txt}}})
			}
		}
	}
	resp := dnsmessage.Message{Header: h, Questions: m.Questions, Answers: answers}
	b, err := resp.Pack()
	if err != nil {
		panic(errors.Join(errors.New("fake DNS: packing"), err))
	}
	if !tcp && len(b) > limit {
		resp.Header.Truncated, resp.Answers = true, nil
		b, _ = resp.Pack()
	}
	return b
}

func ttlOf(r rrset) uint32 {
	if r.ttl == 0 {
		return 60
	}
	return r.ttl
}
