// This file implements Upstream: the host's way of resolving names (hosts file,
// then nameservers), with a cache and one query in flight per name and type.

package dns

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"sbx.dev/sbx/internal/network/rules"
)

// ErrNotFound is the cause of a Lookup error when the name has no address:
// the nameservers answered NXDOMAIN or no A and AAAA records.
var ErrNotFound = errors.New("no such host")

const (
	minTTL      = 5 * time.Second
	maxTTL      = 300 * time.Second
	negativeTTL = 5 * time.Second
	maxCache    = 10000 // entries, one per name and type
)

// Upstream resolves names the way the host does: the hosts file first, then
// the nameservers. It is safe for concurrent use.
type Upstream struct {
	// Timeout bounds one attempt at one nameserver. 0 means resolv.conf's
	// "options timeout", else 2 s. Set it before the first Lookup.
	Timeout time.Duration
	// Attempts is how many times each nameserver is tried. 0 means resolv.conf's
	// "options attempts", else 2. Set it before the first Lookup.
	Attempts int

	servers []string                 // fixed "ip:port" list, or nil to use resolv
	resolv  *watchedFile[resolvConf] // nil when servers is fixed
	hosts   *watchedFile[hostsTable] //
	port    string                   // the port of resolv.conf's nameservers: "53"

	mu      sync.Mutex
	cache   map[cacheKey]cacheEntry // guarded by mu
	flights map[cacheKey]*flight    // guarded by mu
}

type cacheKey struct {
	name string
	typ  dnsmessage.Type
}

type cacheEntry struct {
	addrs   []netip.Addr // nil: a negative answer
	expires time.Time
}

// flight is one query in progress; others asking the same wait for it.
type flight struct {
	done     chan struct{}
	addrs    []netip.Addr
	err      error
	canceled bool // the query ended because its caller's context did
}

// NewUpstream returns an Upstream asking nameservers ("ip:port"; empty means
// those of /etc/resolv.conf, read again when it changes) after the hosts file
// (hostsFile; "" means /etc/hosts, read again when it changes).
func NewUpstream(nameservers []string, hostsFile string) *Upstream {
	if hostsFile == "" {
		hostsFile = "/etc/hosts"
	}
	u := newUpstream(nameservers, hostsFile, "/etc/resolv.conf")
	return u
}

func newUpstream(nameservers []string, hostsFile, resolvFile string) *Upstream {
	u := &Upstream{
		servers: append([]string(nil), nameservers...),
		hosts:   &watchedFile[hostsTable]{path: hostsFile, parse: parseHosts},
		port:    "53",
		cache:   map[cacheKey]cacheEntry{},
		flights: map[cacheKey]*flight{},
	}
	if len(nameservers) == 0 {
		u.resolv = &watchedFile[resolvConf]{path: resolvFile, parse: parseResolvConf}
	}
	return u
}

// Lookup returns the A and AAAA addresses of name (queried in parallel) from
// the hosts file, else from the nameservers, caching answers for their TTL
// clamped to [5 s, 300 s] and negative answers for 5 s. An IP literal is
// returned as it is. Errors name the name and say why; a name without
// addresses gives an error wrapping ErrNotFound.
func (u *Upstream) Lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	a, isIP, err := rules.ParseHost(name)
	switch {
	case err != nil:
		return nil, fmt.Errorf("lookup %q: %w", name, err)
	case isIP:
		return []netip.Addr{a}, nil
	}
	n := strings.ToLower(strings.TrimSuffix(name, "."))
	if addrs := u.hosts.get()[n]; len(addrs) > 0 {
		return append([]netip.Addr(nil), addrs...), nil
	}
	var v4, v6 []netip.Addr
	var err4, err6 error
	var wg sync.WaitGroup
	wg.Go(func() { v4, err4 = u.lookupType(ctx, n, dnsmessage.TypeA) })
	v6, err6 = u.lookupType(ctx, n, dnsmessage.TypeAAAA)
	wg.Wait()
	if addrs := append(v4, v6...); len(addrs) > 0 {
		return addrs, nil
	}
	switch {
	case err4 == nil && err6 == nil:
		return nil, fmt.Errorf("lookup %s: %w", n, ErrNotFound)
	case err4 == nil || err6 == nil:
		return nil, fmt.Errorf("lookup %s: %w", n, cmp.Or(err4, err6))
	}
	return nil, fmt.Errorf("lookup %s: %w; %w", n, err4, err6)
}

// lookupType returns the addresses of one type, nil and a nil error for a
// negative answer.
func (u *Upstream) lookupType(ctx context.Context, n string, t dnsmessage.Type) ([]netip.Addr, error) {
	key := cacheKey{n, t}
	for {
		u.mu.Lock()
		if e, ok := u.cache[key]; ok && time.Now().Before(e.expires) {
			u.mu.Unlock()
			return e.addrs, nil
		}
		if f, ok := u.flights[key]; ok {
			u.mu.Unlock()
			select {
			case <-f.done:
				if f.canceled && ctx.Err() == nil {
					continue // its caller gave up, this one has not: ask again
				}
				return f.addrs, f.err
			case <-ctx.Done():
				return nil, fmt.Errorf("%s: %w", typeName(t), context.Cause(ctx))
			}
		}
		f := &flight{done: make(chan struct{})}
		u.flights[key] = f
		u.mu.Unlock()

		addrs, ttl, err := u.query(ctx, n, t)
		f.addrs, f.err, f.canceled = addrs, err, err != nil && ctx.Err() != nil
		u.mu.Lock()
		delete(u.flights, key)
		if err == nil {
			u.store(key, addrs, ttl)
		}
		u.mu.Unlock()
		close(f.done)
		return addrs, err
	}
}

// store caches an answer; u.mu is held.
func (u *Upstream) store(key cacheKey, addrs []netip.Addr, ttl time.Duration) {
	now := time.Now()
	if len(u.cache) >= maxCache {
		for k, e := range u.cache {
			if !now.Before(e.expires) {
				delete(u.cache, k)
			}
		}
		for k := range u.cache { // still full: drop an arbitrary tenth
			if len(u.cache) < maxCache*9/10 {
				break
			}
			delete(u.cache, k)
		}
	}
	if addrs == nil {
		ttl = negativeTTL
	}
	u.cache[key] = cacheEntry{addrs: addrs, expires: now.Add(min(max(ttl, minTTL), maxTTL))}
}

// config returns the nameservers, the timeout of one attempt and the attempts.
func (u *Upstream) config() ([]string, time.Duration, int) {
	servers, timeout, attempts := u.servers, u.Timeout, u.Attempts
	if u.resolv != nil {
		c := u.resolv.get()
		servers = c.serverAddrs(u.port)
		if timeout == 0 {
			timeout = c.timeout
		}
		if attempts == 0 {
			attempts = c.attempts
		}
	}
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	if attempts <= 0 {
		attempts = defaultTries
	}
	return servers, timeout, attempts
}

// query asks the nameservers in turn, each up to attempts times, for the
// records of type t of n. A negative answer is nil addresses and a nil error;
// an error means no nameserver gave an answer.
func (u *Upstream) query(ctx context.Context, n string, t dnsmessage.Type) ([]netip.Addr, time.Duration, error) {
	servers, timeout, attempts := u.config()
	qname, err := dnsmessage.NewName(n + ".")
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", typeName(t), err)
	}
	q := dnsmessage.Question{Name: qname, Type: t, Class: dnsmessage.ClassINET}
	last := map[string]error{} // the last failure of each server
	for range attempts {
		for _, server := range servers {
			if ctx.Err() != nil {
				return nil, 0, fmt.Errorf("%s: %w", typeName(t), context.Cause(ctx))
			}
			resp, err := exchange(ctx, server, q, timeout)
			if err != nil && ctx.Err() != nil {
				return nil, 0, fmt.Errorf("%s: %w", typeName(t), context.Cause(ctx))
			}
			if err != nil {
				last[server] = err
				continue
			}
			switch resp.Header.RCode {
			case dnsmessage.RCodeSuccess:
				addrs, ttl := addresses(resp, q)
				return addrs, ttl, nil
			case dnsmessage.RCodeNameError:
				return nil, negativeTTL, nil
			default:
				last[server] = fmt.Errorf("answered %s", rcodeName(resp.Header.RCode))
			}
		}
	}
	var why []string
	for _, s := range servers {
		why = append(why, fmt.Sprintf("%s: %v", s, last[s]))
	}
	return nil, 0, fmt.Errorf("%s: no nameserver answered after %d attempts each (%s)", typeName(t), attempts, strings.Join(why, "; "))
}

// addresses returns the records of q's type owned by q's name or by a name it
// is a CNAME of (in the answer), and the lowest TTL among them and the CNAMEs.
func addresses(m *dnsmessage.Message, q dnsmessage.Question) ([]netip.Addr, time.Duration) {
	owners := map[string]bool{strings.ToLower(q.Name.String()): true}
	ttl := uint32(maxTTL / time.Second)
	for range 16 { // follow a chain of CNAMEs, at most 16 long
		grew := false
		for _, r := range m.Answers {
			c, ok := r.Body.(*dnsmessage.CNAMEResource)
			if !ok {
				continue
			}
			target := strings.ToLower(c.CNAME.String())
			if owners[strings.ToLower(r.Header.Name.String())] && !owners[target] {
				owners[target], grew = true, true
				ttl = min(ttl, r.Header.TTL)
			}
		}
		if !grew {
			break
		}
	}
	var out []netip.Addr
	for _, r := range m.Answers {
		if r.Header.Type != q.Type || r.Header.Class != dnsmessage.ClassINET || !owners[strings.ToLower(r.Header.Name.String())] {
			continue
		}
		var a netip.Addr
		switch b := r.Body.(type) {
		case *dnsmessage.AResource:
			a = netip.AddrFrom4(b.A)
		case *dnsmessage.AAAAResource:
			a = netip.AddrFrom16(b.AAAA) // a mapped form stays an AAAA answer; checks unmap it
		default:
			continue
		}
		if !containsAddr(out, a) {
			out = append(out, a)
		}
		ttl = min(ttl, r.Header.TTL)
	}
	if len(out) == 0 {
		return nil, negativeTTL
	}
	return out, time.Duration(ttl) * time.Second
}
