// This file implements what every TCP server here shares: a listener that logs
// each connection and its first bytes, and tracks it so Close can end it.

package fakenet

import (
	"net"
	"sync"
)

// conns tracks the connections accepted in either namespace; Close closes them
// all, including those an HTTP server has handed off (WebSocket).
type conns struct {
	mu sync.Mutex
	// set and closed are guarded by mu. After closed, a new connection is
	// closed at once.
	set    map[net.Conn]struct{}
	closed bool
}

func (cs *conns) add(c net.Conn) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		return false
	}
	if cs.set == nil {
		cs.set = make(map[net.Conn]struct{})
	}
	cs.set[c] = struct{}{}
	return true
}

func (cs *conns) remove(c net.Conn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.set, c)
}

func (cs *conns) closeAll() {
	cs.mu.Lock()
	cs.closed = true
	all := cs.set
	cs.set = nil
	cs.mu.Unlock()
	for c := range all {
		c.Close()
	}
}

// logListener logs every accepted connection as kind (KindTCP or KindCanary)
// and wraps it to log its first bytes.
type logListener struct {
	net.Listener
	n        *Internet
	kind     Kind
	catchAll bool
}

func (l *logListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc := &logConn{Conn: c, l: l}
		l.n.log.add(Event{
			Kind: l.kind, Op: OpConnect, CatchAll: l.catchAll,
			Local: addrPort(c.LocalAddr()), Remote: addrPort(c.RemoteAddr()),
		})
		if !l.n.conns.add(lc) {
			c.Close() // closing down
			continue
		}
		return lc, nil
	}
}

// logConn logs the first bytes read from it.
type logConn struct {
	net.Conn
	l    *logListener
	once sync.Once
}

func (c *logConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.once.Do(func() {
			c.l.n.log.add(Event{
				Kind: c.l.kind, Op: OpData, CatchAll: c.l.catchAll,
				Local: addrPort(c.LocalAddr()), Remote: addrPort(c.RemoteAddr()),
				Data: append([]byte(nil), truncate(b[:n], maxData)...),
			})
		})
	}
	return n, err
}

func (c *logConn) Close() error {
	c.l.n.conns.remove(c)
	return c.Conn.Close()
}
