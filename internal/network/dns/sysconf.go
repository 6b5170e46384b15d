// This file implements the host's resolver configuration: /etc/hosts and
// /etc/resolv.conf, parsed, and read again when they change.

package dns

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	maxConfBytes   = 16 << 20 // a hosts file beyond this is read up to here
	maxNameservers = 3        // as glibc (MAXNS)
	defaultTimeout = 2 * time.Second
	defaultTries   = 2
	// racyWindow: a file modified this close to when it was read may have changed
	// again within the same timestamp tick, so it is read again at the next use.
	racyWindow = 2 * time.Second
)

// watchedFile holds the parsed contents of a file, read again at the next get
// after the file changes (another inode, size or modification time). A missing
// or unreadable file parses as empty.
type watchedFile[T any] struct {
	path  string
	parse func([]byte) T

	mu     sync.Mutex
	info   os.FileInfo // guarded by mu; nil before the first read or when missing
	readAt time.Time   // guarded by mu
	val    T           // guarded by mu
	loaded bool        // guarded by mu
}

func (w *watchedFile[T]) get() T {
	w.mu.Lock()
	defer w.mu.Unlock()
	fi, err := os.Stat(w.path)
	if err != nil {
		fi = nil
	}
	if w.loaded && sameVersion(w.info, fi) && (fi == nil || w.readAt.Sub(fi.ModTime()) > racyWindow) {
		return w.val
	}
	var data []byte
	if f, err := os.Open(w.path); err == nil {
		data, _ = io.ReadAll(io.LimitReader(f, maxConfBytes))
		f.Close()
	}
	w.val, w.info, w.readAt, w.loaded = w.parse(data), fi, time.Now(), true
	return w.val
}

func sameVersion(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// hostsTable maps a lower-case name without trailing dot to its addresses, in
// file order.
type hostsTable map[string][]netip.Addr

// parseHosts parses a hosts(5) file: an address then names, # comments.
// Addresses are unmapped and lose their zone; bad lines are skipped.
func parseHosts(data []byte) hostsTable {
	t := hostsTable{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil {
			continue
		}
		a = a.WithZone("").Unmap()
		for _, name := range f[1:] {
			n := strings.ToLower(strings.TrimSuffix(name, "."))
			if !containsAddr(t[n], a) {
				t[n] = append(t[n], a)
			}
		}
	}
	return t
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if a == b {
			return true
		}
	}
	return false
}

// resolvConf is what sbx takes from resolv.conf(5): the nameservers (at most
// three, as glibc), options timeout and attempts. Search domains are ignored:
// a sandbox's names are looked up as given.
type resolvConf struct {
	servers  []netip.Addr
	timeout  time.Duration // 0: not set
	attempts int           // 0: not set
}

func parseResolvConf(data []byte) resolvConf {
	var c resolvConf
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			a, err := netip.ParseAddr(f[1])
			if err != nil || len(c.servers) >= maxNameservers {
				continue
			}
			c.servers = append(c.servers, a.Unmap()) // a link-local server keeps its zone

		case "options":
			for _, o := range f[1:] {
				k, v, ok := strings.Cut(o, ":")
				n, err := strconv.Atoi(v)
				if !ok || err != nil {
					continue
				}
				switch k {
				case "timeout":
					c.timeout = time.Duration(min(max(n, 1), 30)) * time.Second
				case "attempts":
					c.attempts = min(max(n, 1), 5)
				}
			}
		}
	}
	return c
}

// serverAddrs returns the nameservers as "ip:port"; none means 127.0.0.1, as glibc.
func (c resolvConf) serverAddrs(port string) []string {
	if len(c.servers) == 0 {
		return []string{net.JoinHostPort("127.0.0.1", port)}
	}
	out := make([]string, len(c.servers))
	for i, a := range c.servers {
		out[i] = net.JoinHostPort(a.String(), port)
	}
	return out
}
