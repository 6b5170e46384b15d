// This file implements the UDP relay of the full tier: a sandbox's UDP
// (DNS aside) arrives by TPROXY at one transparent socket the daemon holds in
// the router, which tells each datagram's original destination; the daemon
// checks it and relays the flow from its own namespace, answering the
// sandbox from the destination's address. Under allowlist UDP is refused:
// names cannot police it.

package network

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/network/rules"
)

// UDPPort is the relay's transparent socket in the router; udpMark marks
// the datagrams TPROXY sends it, udpTable routes them locally.
const (
	UDPPort  = 15055
	udpMark  = 0x73627875 // "sbxu"
	udpTable = 213
)

// udpIdle ends a flow with no datagram either way; udpFlowsPer bounds one
// sandbox's flows.
const (
	udpIdle     = 60 * time.Second
	udpFlowsPer = 256
)

type flowKey struct{ src, dst netip.AddrPort }

// udpFlow is one sandbox address and port talking to one destination.
type udpFlow struct {
	sandbox string
	up      *net.UDPConn // in the daemon's namespace, connected to dst
	back    *net.UDPConn // in the router, bound to dst, connected to src
}

// udpRelay is the full tier's UDP path.
type udpRelay struct {
	s  *Service
	ns *os.File
	pc *net.UDPConn

	mu    sync.Mutex
	flows map[flowKey]*udpFlow
	per   map[string]int
}

// transparent marks a socket as free to bind addresses that are not local
// and to receive datagrams TPROXY sends it, telling their destination.
func transparent(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		for _, o := range [][2]int{{unix.SOL_IP, unix.IP_TRANSPARENT}, {unix.SOL_IP, unix.IP_RECVORIGDSTADDR}, {unix.SOL_SOCKET, unix.SO_REUSEADDR}} {
			if serr = unix.SetsockoptInt(int(fd), o[0], o[1], 1); serr != nil {
				return
			}
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// listenUDP opens the relay's socket in ns.
func listenUDP(ns *os.File) (*net.UDPConn, error) {
	var pc *net.UDPConn
	err := inNetns(ns, func() error {
		lc := net.ListenConfig{Control: transparent}
		c, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", UDPPort))
		if err != nil {
			return err
		}
		pc = c.(*net.UDPConn)
		return nil
	})
	return pc, err
}

// serve relays until pc is closed.
func (u *udpRelay) serve() {
	buf := make([]byte, 64<<10)
	oob := make([]byte, 256)
	for {
		n, oobn, _, src, err := u.pc.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		dst, ok := origDst(oob[:oobn])
		if !ok {
			continue
		}
		u.datagram(netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), dst, buf[:n])
	}
}

// origDst reads IP_ORIGDSTADDR from a datagram's control messages.
func origDst(oob []byte) (netip.AddrPort, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.AddrPort{}, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_ORIGDSTADDR && len(m.Data) >= 8 {
			port := binary.BigEndian.Uint16(m.Data[2:4])
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte(m.Data[4:8])), port), true
		}
	}
	return netip.AddrPort{}, false
}

// datagram relays one datagram of a sandbox, opening its flow if new.
func (u *udpRelay) datagram(src, dst netip.AddrPort, b []byte) {
	u.mu.Lock()
	f := u.flows[flowKey{src, dst}]
	u.mu.Unlock()
	if f == nil {
		var err error
		if f, err = u.open(src, dst); err != nil {
			return
		}
	}
	f.up.Write(b)
}

// open judges a new flow and sets up both of its sockets.
func (u *udpRelay) open(src, dst netip.AddrPort) (*udpFlow, error) {
	sb, ok := u.s.policy(src.Addr())
	if !ok {
		return nil, errors.New("unknown source")
	}
	refuse := func(rule string) (*udpFlow, error) {
		u.s.record(Event{Time: time.Now(), Sandbox: sb.ID, Src: src.Addr(), Dst: dst.String(), Proto: "udp", Rule: rule})
		return nil, errors.New(rule)
	}
	if sb.Rules.Mode() != rules.Full {
		return refuse("UDP is refused under " + string(sb.Rules.Mode()) + " (names cannot police it)")
	}
	if bad, why := u.s.forbidden.Check(dst.Addr()); bad {
		return refuse(why)
	}
	if v := sb.Rules.Addr(dst.Addr()); !v.Allow {
		return refuse(v.Rule)
	}
	u.mu.Lock()
	if u.per[sb.ID] >= udpFlowsPer {
		u.mu.Unlock()
		return refuse(fmt.Sprintf("UDP flow limit (%d open)", udpFlowsPer))
	}
	u.per[sb.ID]++
	u.mu.Unlock()
	f := &udpFlow{sandbox: sb.ID}
	var err error
	f.up, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst))
	if err == nil {
		err = inNetns(u.ns, func() error {
			d := net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(dst), Control: transparent}
			c, err := d.Dial("udp4", src.String())
			if err == nil {
				f.back = c.(*net.UDPConn)
			}
			return err
		})
	}
	if err != nil {
		if f.up != nil {
			f.up.Close()
		}
		u.mu.Lock()
		u.per[sb.ID]--
		u.mu.Unlock()
		return refuse("relay: " + err.Error())
	}
	u.s.record(Event{Time: time.Now(), Sandbox: sb.ID, Src: src.Addr(), Dst: dst.String(), Proto: "udp", Rule: "full", Allowed: true})
	k := flowKey{src, dst}
	u.mu.Lock()
	u.flows[k] = f
	u.mu.Unlock()
	go u.answers(k, f)
	return f, nil
}

// answers relays a flow's answers back until it is idle or closed.
func (u *udpRelay) answers(k flowKey, f *udpFlow) {
	defer func() {
		u.mu.Lock()
		if u.flows[k] == f {
			delete(u.flows, k)
			u.per[f.sandbox]--
			if u.per[f.sandbox] <= 0 {
				delete(u.per, f.sandbox)
			}
		}
		u.mu.Unlock()
		f.up.Close()
		f.back.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		f.up.SetReadDeadline(time.Now().Add(udpIdle))
		n, err := f.up.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // an ICMP error for an earlier datagram: go on
		}
		f.back.Write(buf[:n])
	}
}

// cut ends sandbox id's flows (its rules changed, or it is gone).
func (u *udpRelay) cut(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, f := range u.flows {
		if f.sandbox == id {
			f.up.Close()
		}
	}
}

// close ends every flow and the relay's socket.
func (u *udpRelay) close() {
	u.pc.Close()
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, f := range u.flows {
		f.up.Close()
	}
}
