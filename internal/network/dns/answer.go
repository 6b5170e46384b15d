// This file implements answering one query: parse, judge under the source's
// rules, look up, filter, and build the reply.

package dns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"sbx.dev/sbx/internal/network/rules"
)

const (
	maxUDPPlain  = 512 // a UDP answer without EDNS (RFC 1035)
	maxAnswers   = 64  // addresses in one answer
	rcodeBadVers = dnsmessage.RCode(16)
)

// query is what answering needs of a parsed request.
type query struct {
	h        dnsmessage.Header
	q        dnsmessage.Question
	qOK      bool  // exactly one question, parsed
	nq       int   // questions parsed
	err      error // a section did not parse
	edns     bool  // an OPT record came with it
	ednsSize int   // its UDP payload size
	ednsVer  uint8
}

// parseQuery parses req; ok is false when not even the header parses.
func parseQuery(req []byte) (m query, ok bool) {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return m, false
	}
	m.h = h
	qs, err := p.AllQuestions()
	if err != nil {
		m.err = err
		return m, true
	}
	m.nq = len(qs)
	if len(qs) == 1 {
		m.q, m.qOK = qs[0], true
	}
	if err := p.SkipAllAnswers(); err != nil {
		m.err = err
		return m, true
	}
	if err := p.SkipAllAuthorities(); err != nil {
		m.err = err
		return m, true
	}
	for {
		rh, err := p.AdditionalHeader()
		if err == dnsmessage.ErrSectionDone {
			return m, true
		}
		if err != nil {
			m.err = err
			return m, true
		}
		if rh.Type == dnsmessage.TypeOPT {
			if m.edns || rh.Name.String() != "." {
				m.err = errors.New("more than one OPT record, or one not owned by the root")
				return m, true
			}
			m.edns, m.ednsSize, m.ednsVer = true, int(rh.Class), uint8(rh.TTL>>16)
		}
		if err := p.SkipAdditional(); err != nil {
			m.err = err
			return m, true
		}
	}
}

// nameOf returns the question's name as events and rules see it: lower case,
// without the trailing dot.
func (m *query) nameOf() string {
	if m.nq == 0 {
		return ""
	}
	return strings.ToLower(strings.TrimSuffix(m.q.Name.String(), "."))
}

func (m *query) typeOf() string {
	if m.nq == 0 {
		return ""
	}
	return typeName(m.q.Type)
}

// answer returns the reply to req from src, or nil when there is none to give
// (not a query, or too short to answer).
func (s *Server) answer(ctx context.Context, src netip.Addr, req []byte, tcp bool) []byte {
	s.init()
	m, ok := parseQuery(req)
	if !ok || m.h.Response {
		return nil
	}
	var (
		set   *rules.Set
		id    string
		known bool
	)
	if s.Policy != nil {
		set, id, known = s.Policy(src)
	}
	ev := Event{Sandbox: id, Src: src, Name: m.nameOf(), Type: m.typeOf()}
	switch {
	case !known:
		ev.Sandbox = ""
		s.emit(ev, "unknown source")
		return m.reply(tcp, dnsmessage.RCodeRefused, nil, 0)
	case m.h.OpCode != 0:
		return m.reply(tcp, dnsmessage.RCodeNotImplemented, nil, 0)
	case m.err != nil, !m.qOK, m.q.Class != dnsmessage.ClassINET, len(ev.Name) > 253:
		return m.reply(tcp, dnsmessage.RCodeFormatError, nil, 0)
	case m.edns && m.ednsVer != 0:
		return m.reply(tcp, rcodeBadVers, nil, 0)
	}

	addr, isIP, err := rules.ParseHost(ev.Name)
	if err != nil {
		s.emit(ev, "invalid name")
		return m.reply(tcp, dnsmessage.RCodeNameError, nil, 0)
	}
	var v rules.Verdict
	if isIP {
		v = set.Addr(addr)
		if forbidden, why := s.Forbidden.Check(addr); v.Allow && forbidden {
			v = rules.Verdict{Rule: fmt.Sprintf("%s is %s", addr, why)}
		}
	} else {
		v = set.Name(ev.Name)
	}
	if !v.Allow {
		s.emit(ev, v.Rule)
		return m.reply(tcp, dnsmessage.RCodeNameError, nil, 0)
	}

	if m.q.Type != dnsmessage.TypeA && m.q.Type != dnsmessage.TypeAAAA {
		// Never forwarded: TXT, MX, SRV, HTTPS… are channels out, and no
		// sandbox needs them to connect.
		if s.notServed.add(id + "\x00" + ev.Name + "\x00" + ev.Type) {
			s.emit(ev, "type "+ev.Type+" not served")
		}
		return m.reply(tcp, dnsmessage.RCodeSuccess, nil, 0)
	}
	ttl := min(orDefault(s.AnswerTTL, DefaultAnswerTTL), MaxAnswerTTL)
	if isIP {
		return m.reply(tcp, dnsmessage.RCodeSuccess, s.ofType(m.q.Type, []netip.Addr{addr}), ttl)
	}
	if s.Upstream == nil {
		return m.reply(tcp, dnsmessage.RCodeServerFailure, nil, 0)
	}
	lctx, cancel := context.WithTimeout(ctx, orDefault(s.LookupTimeout, DefaultLookupTimeout))
	addrs, err := s.Upstream.Lookup(lctx, ev.Name)
	cancel()
	switch {
	case errors.Is(err, ErrNotFound):
		return m.reply(tcp, dnsmessage.RCodeNameError, nil, 0)
	case err != nil:
		return m.reply(tcp, dnsmessage.RCodeServerFailure, nil, 0)
	}
	kept := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if forbidden, why := s.Forbidden.Check(a); forbidden {
			s.emit(ev, fmt.Sprintf("rebinding: %s is %s", a.Unmap(), why))
			continue
		}
		if blocked, rule := set.Blocked(a); blocked {
			s.emit(ev, fmt.Sprintf("rebinding: %s is in %s", a.Unmap(), rule))
			continue
		}
		kept = append(kept, a)
	}
	if len(kept) == 0 {
		return m.reply(tcp, dnsmessage.RCodeNameError, nil, 0)
	}
	return m.reply(tcp, dnsmessage.RCodeSuccess, s.ofType(m.q.Type, kept), ttl)
}

// ofType keeps the addresses a question of type t asks for: IPv4 for A, IPv6
// for AAAA (none when the sandboxes have no IPv6), at most maxAnswers.
func (s *Server) ofType(t dnsmessage.Type, addrs []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		if len(out) < maxAnswers && (t == dnsmessage.TypeA && a.Is4() || t == dnsmessage.TypeAAAA && s.IPv6 && a.Is6()) {
			out = append(out, a)
		}
	}
	return out
}

func (s *Server) emit(ev Event, rule string) {
	ev.Rule = rule
	s.log(ev, false)
}

// logQuery reports a query refused before it was parsed for answering.
func (s *Server) logQuery(src netip.Addr, req []byte, rule string) {
	if s.Log == nil {
		return
	}
	m, _ := parseQuery(req)
	s.log(Event{Src: src, Name: m.nameOf(), Type: m.typeOf(), Rule: rule}, true)
}

// refuse returns a reply with rcode to req, nil when req is no query.
func (s *Server) refuse(req []byte, rcode dnsmessage.RCode) []byte {
	m, ok := parseQuery(req)
	if !ok || m.h.Response {
		return nil
	}
	return m.reply(false, rcode, nil, 0)
}

// reply builds the reply to m: its ID, opcode and RD, RA set, the question
// echoed when there was exactly one, an OPT record when m had one. Over UDP an
// answer that does not fit (512 bytes, or the EDNS size up to 1232) loses its
// records and gets TC, for the client to ask again over TCP.
func (m *query) reply(tcp bool, rcode dnsmessage.RCode, addrs []netip.Addr, ttl time.Duration) []byte {
	limit := 65535
	if !tcp {
		limit = maxUDPPlain
		if m.edns {
			limit = min(max(m.ednsSize, maxUDPPlain), ednsSize)
		}
	}
	b, err := m.build(rcode, addrs, ttl, false)
	if err == nil && len(b) > limit {
		b, err = m.build(rcode, nil, 0, true)
	}
	if err != nil {
		return nil // only a question that cannot be packed again; nothing sane to say
	}
	return b
}

func (m *query) build(rcode dnsmessage.RCode, addrs []netip.Addr, ttl time.Duration, truncated bool) ([]byte, error) {
	h := dnsmessage.Header{
		ID:                 m.h.ID,
		Response:           true,
		OpCode:             m.h.OpCode,
		RecursionDesired:   m.h.RecursionDesired,
		RecursionAvailable: true,
		Truncated:          truncated,
		RCode:              rcode & 0xf, // the upper bits travel in the OPT record
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if m.qOK {
		if err := b.Question(m.q); err != nil {
			return nil, err
		}
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	rh := dnsmessage.ResourceHeader{Name: m.q.Name, Class: dnsmessage.ClassINET, TTL: uint32(ttl / time.Second)}
	for _, a := range addrs {
		var err error
		if a.Is4() {
			rh.Type = dnsmessage.TypeA
			err = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		} else {
			rh.Type = dnsmessage.TypeAAAA
			err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	if m.edns {
		if err := b.StartAdditionals(); err != nil {
			return nil, err
		}
		var opt dnsmessage.ResourceHeader
		if err := opt.SetEDNS0(ednsSize, rcode, false); err != nil {
			return nil, err
		}
		if err := b.OPTResource(opt, dnsmessage.OPTResource{}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
