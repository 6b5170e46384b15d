// This file implements the servers below HTTP: raw TCP and UDP listeners, the
// catch-all's transparent sockets, the ICMP echo listener and the host
// canaries.

package fakenet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// banners are sent on connect by the raw TCP listeners whose protocol has the
// server speak first, so a client (ssh, an SMTP probe) sends its own bytes.
var banners = map[uint16]string{
	22: "SSH-2.0-fakenet\r\n",
	25: "220 " + AllowedName + " ESMTP fakenet\r\n",
}

// serveRaw accepts on l (a logListener: connects and first bytes are logged),
// sends the port's banner, and drains each connection until the client closes
// it or Close ends it.
func (n *Internet) serveRaw(l net.Listener, banner string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		n.wg.Go(func() {
			defer c.Close()
			if banner != "" {
				io.WriteString(c, banner)
			}
			io.Copy(io.Discard, c)
		})
	}
}

// serveUDP logs every datagram on pc, echoing it back when echo is set.
func (n *Internet) serveUDP(pc *net.UDPConn, echo bool) {
	buf := make([]byte, 65536)
	local := addrPort(pc.LocalAddr())
	for {
		m, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		n.log.add(Event{Kind: KindUDP, Op: "datagram", Local: local, Remote: from,
			Data: append([]byte(nil), truncate(buf[:m], maxData)...)})
		if echo {
			pc.WriteToUDPAddrPort(buf[:m], from)
		}
	}
}

// transparent sets what a catch-all socket needs before bind: IP(V6)_TRANSPARENT
// so TPROXY may hand it packets for any address, and for UDP the option that
// reports each datagram's original destination.
func transparent(udp bool) func(network, address string, c syscall.RawConn) error {
	return func(network, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			level, opt, orig := unix.SOL_IP, unix.IP_TRANSPARENT, unix.IP_RECVORIGDSTADDR
			if network == "tcp6" || network == "udp6" {
				level, opt, orig = unix.SOL_IPV6, unix.IPV6_TRANSPARENT, unix.IPV6_RECVORIGDSTADDR
			}
			if serr = unix.SetsockoptInt(int(fd), level, opt, 1); serr != nil {
				serr = fmt.Errorf("setting %s transparent: %w", network, serr)
				return
			}
			if udp {
				if serr = unix.SetsockoptInt(int(fd), level, orig, 1); serr != nil {
					serr = fmt.Errorf("asking for original destinations on %s: %w", network, serr)
				}
			}
		})
		if err != nil {
			return err
		}
		return serr
	}
}

// serveCatchTCP drains connections the catch-all took (logged by its
// logListener); a stream to port 53 is also logged as DNS queries.
func (n *Internet) serveCatchTCP(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		n.wg.Go(func() {
			defer c.Close()
			local := addrPort(c.LocalAddr())
			if local.Port() != 53 {
				io.Copy(io.Discard, c)
				return
			}
			var size [2]byte
			for {
				if _, err := io.ReadFull(c, size[:]); err != nil {
					return
				}
				msg := make([]byte, binary.BigEndian.Uint16(size[:]))
				if _, err := io.ReadFull(c, msg); err != nil {
					return
				}
				n.logCaughtDNS(msg, "tcp", local, addrPort(c.RemoteAddr()))
			}
		})
	}
}

// serveCatchUDP logs every datagram the catch-all took, at its original
// destination; one to port 53 is also logged as DNS queries. It never answers.
func (n *Internet) serveCatchUDP(pc *net.UDPConn) {
	buf := make([]byte, 65536)
	oob := make([]byte, 256)
	for {
		m, oobn, _, from, err := pc.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		to := origDst(oob[:oobn])
		n.log.add(Event{Kind: KindUDP, Op: "datagram", CatchAll: true, Local: to, Remote: from,
			Data: append([]byte(nil), truncate(buf[:m], maxData)...)})
		if to.Port() == 53 {
			n.logCaughtDNS(buf[:m], "udp", to, from)
		}
	}
}

// origDst finds IP(V6)_ORIGDSTADDR in a datagram's control messages.
func origDst(oob []byte) netip.AddrPort {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.AddrPort{}
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_ORIGDSTADDR && len(m.Data) >= 8:
			a := netip.AddrFrom4([4]byte(m.Data[4:8]))
			return netip.AddrPortFrom(a, binary.BigEndian.Uint16(m.Data[2:4]))
		case m.Header.Level == unix.SOL_IPV6 && m.Header.Type == unix.IPV6_ORIGDSTADDR && len(m.Data) >= 24:
			a := netip.AddrFrom16([16]byte(m.Data[8:24]))
			return netip.AddrPortFrom(a, binary.BigEndian.Uint16(m.Data[2:4]))
		}
	}
	return netip.AddrPort{}
}

// serveICMP4 logs every echo request reaching inet over IPv4, whatever its
// destination (nft.go delivers them all locally). The kernel answers those to
// inet's own addresses; others may go unanswered.
func (n *Internet) serveICMP4(c *icmp.PacketConn) {
	p := c.IPv4PacketConn()
	if err := p.SetControlMessage(ipv4.FlagDst, true); err != nil {
		return
	}
	buf := make([]byte, 65536)
	for {
		m, cm, src, err := p.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		var dst netip.Addr
		if cm != nil {
			dst, _ = netip.AddrFromSlice(cm.Dst)
		}
		n.logEcho(buf[:m], 1, dst, src)
	}
}

// serveICMP6 is serveICMP4 for IPv6; a filter passes only echo requests.
func (n *Internet) serveICMP6(c *icmp.PacketConn) {
	p := c.IPv6PacketConn()
	var f ipv6.ICMPFilter
	f.SetAll(true)
	f.Accept(ipv6.ICMPTypeEchoRequest)
	if err := p.SetICMPFilter(&f); err != nil {
		return
	}
	if err := p.SetControlMessage(ipv6.FlagDst, true); err != nil {
		return
	}
	buf := make([]byte, 65536)
	for {
		m, cm, src, err := p.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		var dst netip.Addr
		if cm != nil {
			dst, _ = netip.AddrFromSlice(cm.Dst)
		}
		n.logEcho(buf[:m], 58, dst, src)
	}
}

func (n *Internet) logEcho(b []byte, proto int, dst netip.Addr, src net.Addr) {
	msg, err := icmp.ParseMessage(proto, b)
	if err != nil || (msg.Type != ipv4.ICMPTypeEcho && msg.Type != ipv6.ICMPTypeEchoRequest) {
		return
	}
	e := Event{Kind: KindICMP, Op: "echo", Local: netip.AddrPortFrom(dst.Unmap(), 0)}
	if ip, ok := src.(*net.IPAddr); ok {
		a, _ := netip.AddrFromSlice(ip.IP)
		e.Remote = netip.AddrPortFrom(a.Unmap(), 0)
	}
	if echo, ok := msg.Body.(*icmp.Echo); ok {
		e.Detail = fmt.Sprintf("id=%d seq=%d", echo.ID, echo.Seq)
		e.Data = append([]byte(nil), truncate(echo.Data, maxData)...)
	}
	n.log.add(e)
}

// Canary is the host canary service: TCP listeners in the host namespace that
// log each connection (as KindCanary) and never answer. Nothing in a sandbox
// may reach them (NW-09).
type Canary struct {
	Loopback  netip.AddrPort // on 127.0.0.1
	Loopback6 netip.AddrPort // on ::1
	Uplink    netip.AddrPort // on HostAddr, the daemon's own address
}

// All returns the canary's addresses.
func (c Canary) All() []netip.AddrPort { return []netip.AddrPort{c.Loopback, c.Loopback6, c.Uplink} }
