// This file implements one query to one nameserver: over UDP, and again over
// TCP when the answer comes back truncated.

package dns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// ednsSize is the UDP payload size sbx advertises and accepts (the DNS flag day
// 2020 value, which avoids IP fragmentation).
const ednsSize = 1232

// exchange asks server ("ip:port") the question q within timeout. A reply is
// taken only if it answers this query: same ID, same question.
func exchange(ctx context.Context, server string, q dnsmessage.Question, timeout time.Duration) (*dnsmessage.Message, error) {
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	id := uint16(rand.Uint32()) // math/rand/v2's global source is ChaCha8, seeded from the OS
	msg, err := buildQuery(id, q)
	if err != nil {
		return nil, err
	}
	m, err := exchangeUDP(tctx, server, id, q, msg)
	if err == nil && m.Header.Truncated {
		m, err = exchangeTCP(tctx, server, id, q, msg)
	}
	if err == nil {
		return m, nil
	}
	// The caller's deadline may be the one that fired, its context not yet
	// marked done: it is then the caller's error, not this server's.
	if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(dl) {
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout() || tctx.Err() != nil:
		return nil, fmt.Errorf("no answer within %v", timeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		return nil, errors.New("connection refused")
	}
	return nil, err
}

func buildQuery(id uint16, q dnsmessage.Question) ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), dnsmessage.Header{ID: id, RecursionDesired: true})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAdditionals(); err != nil {
		return nil, err
	}
	var opt dnsmessage.ResourceHeader
	if err := opt.SetEDNS0(ednsSize, dnsmessage.RCodeSuccess, false); err != nil {
		return nil, err
	}
	if err := b.OPTResource(opt, dnsmessage.OPTResource{}); err != nil {
		return nil, err
	}
	return b.Finish()
}

// deadlineFrom makes c's I/O end at ctx's deadline or cancellation; the
// returned function undoes the second.
func deadlineFrom(ctx context.Context, c net.Conn) (stop func() bool) {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	return context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
}

func exchangeUDP(ctx context.Context, server string, id uint16, q dnsmessage.Question, msg []byte) (*dnsmessage.Message, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", server)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	defer deadlineFrom(ctx, c)()
	if _, err := c.Write(msg); err != nil {
		return nil, err
	}
	buf := make([]byte, 65535)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		if m, ok := matchReply(buf[:n], id, q); ok {
			return m, nil
		}
		// Not the answer to this query (late, spoofed, garbage): keep waiting.
	}
}

func exchangeTCP(ctx context.Context, server string, id uint16, q dnsmessage.Question, msg []byte) (*dnsmessage.Message, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", server)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	defer deadlineFrom(ctx, c)()
	out := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(msg)), uint16(len(msg)))
	if _, err := c.Write(append(out, msg...)); err != nil {
		return nil, err
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	buf := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, buf); err != nil {
		return nil, err
	}
	m, ok := matchReply(buf, id, q)
	if !ok {
		return nil, errors.New("the answer over TCP does not match the query")
	}
	return m, nil
}

// matchReply parses b and says whether it is the reply to query id for q.
func matchReply(b []byte, id uint16, q dnsmessage.Question) (*dnsmessage.Message, bool) {
	var m dnsmessage.Message
	if err := m.Unpack(b); err != nil {
		return nil, false
	}
	if !m.Header.Response || m.Header.ID != id {
		return nil, false
	}
	if len(m.Questions) == 0 && m.Header.RCode != dnsmessage.RCodeSuccess && m.Header.RCode != dnsmessage.RCodeNameError {
		return &m, true // a refusal or failure that does not repeat the question
	}
	if len(m.Questions) != 1 {
		return nil, false
	}
	got := m.Questions[0]
	if got.Type != q.Type || got.Class != q.Class || !strings.EqualFold(got.Name.String(), q.Name.String()) {
		return nil, false
	}
	return &m, true
}
