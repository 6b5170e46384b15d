// This file implements what the adapter keeps of a process's output, as the
// agent does: head and tail of each stream under a cap (capture), the last N
// bytes of the combined output by offset (outputLog), and followers' queues
// (sub), complete or bounded. The remote keeps no output: what the adapter
// did not read is gone.

package e2b

import (
	"fmt"
	"sync"
)

// capture holds one stream of one process: the first half of the cap in
// head, the last half in a ring. The adapter has no file to spill the whole
// stream to, as the agent does past the cap; the notice says so. Its proc's
// mu guards it.
type capture struct {
	headCap, tailCap int64
	head             []byte
	tail             []byte // a ring once len(tail) == tailCap
	tpos             int    // next write position in a full ring
	total            int64
}

func newCapture(limit int64) *capture {
	limit = max(limit, 2)
	return &capture{headCap: limit / 2, tailCap: limit - limit/2}
}

func (c *capture) write(p []byte) {
	c.total += int64(len(p))
	if n := c.headCap - int64(len(c.head)); n > 0 {
		k := min(n, int64(len(p)))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return
	}
	if int64(len(p)) >= c.tailCap { // the new data alone fills the ring
		c.tail = append(c.tail[:0], p[int64(len(p))-c.tailCap:]...)
		c.tpos = 0
		return
	}
	if room := c.tailCap - int64(len(c.tail)); room > 0 {
		k := min(room, int64(len(p)))
		c.tail = append(c.tail, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 { // the ring is full: overwrite the oldest bytes
		n := copy(c.tail[c.tpos:], p)
		p = p[n:]
		c.tpos = (c.tpos + n) % len(c.tail)
	}
}

// tailBytes returns the ring's contents, oldest first.
func (c *capture) tailBytes() []byte {
	out := make([]byte, 0, len(c.tail))
	out = append(out, c.tail[c.tpos:]...)
	return append(out, c.tail[:c.tpos]...)
}

func (c *capture) dropped() int64 { return c.total - int64(len(c.head)) - int64(len(c.tail)) }

// bytes returns head, a notice when bytes were dropped, and tail, as the
// agent words it when it could not save the full output.
func (c *capture) bytes() []byte {
	t := c.tailBytes()
	out := make([]byte, 0, len(c.head)+len(t)+96)
	out = append(out, c.head...)
	if d := c.dropped(); d > 0 {
		out = fmt.Appendf(out, "\n[sbx: %d bytes dropped; the full output could not be saved]\n", d)
	}
	return append(out, t...)
}

// Output log bounds, the agent's.
const (
	maxOutputLog      = 64 << 20
	defaultReadOutput = 1 << 20
	maxReadOutput     = 16 << 20
)

// Streams, numbered as sbxagent.Stream.
const (
	stdout = 1
	stderr = 2
)

// event is a chunk of output, or, with dropped set, the bytes of stream a
// follower did not get at this point.
type event struct {
	stream  int
	data    []byte
	dropped int64
}

// subMax bounds what waits in one follower's queue: a complete follower
// that far behind holds the remote stream (and so the process, as its
// pipes fill), a bounded one loses what does not fit.
const subMax = 1 << 20

// sub follows the output of one process (the agent's process.Sub).
type sub struct {
	bounded bool
	ready   chan struct{} // signalled when events are queued

	mu     sync.Mutex
	room   chan struct{} // guarded by mu: closed and replaced when the queue shrinks or the sub closes
	q      []event       // guarded by mu
	size   int           // guarded by mu
	lost   [2]int64      // guarded by mu: bytes dropped per stream since the last event queued
	closed bool          // guarded by mu
}

func newSub(bounded bool) *sub {
	return &sub{bounded: bounded, ready: make(chan struct{}, 1), room: make(chan struct{})}
}

// drain returns the queued events and makes room.
func (s *sub) drain() []event {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.appendLost(s.q)
	s.q, s.size = nil, 0
	close(s.room)
	s.room = make(chan struct{})
	return q
}

func (s *sub) appendLost(q []event) []event {
	for i, n := range s.lost {
		if n > 0 {
			q = append(q, event{stream: i + 1, dropped: n})
			s.lost[i] = 0
		}
	}
	return q
}

// push queues ev; it reports whether a complete sub's queue is full, so the
// reader must wait for room before reading on.
func (s *sub) push(ev event) (full bool) {
	s.mu.Lock()
	switch {
	case s.closed:
	case s.bounded && ev.dropped == 0 && s.size+len(ev.data) > subMax:
		s.lost[ev.stream-1] += int64(len(ev.data))
	default:
		if s.bounded {
			s.q = s.appendLost(s.q)
		}
		s.q = append(s.q, ev)
		s.size += len(ev.data)
		full = !s.bounded && s.size >= subMax
	}
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
	return full
}

// waitRoom blocks while the queue is full and the sub followed, or until
// done closes.
func (s *sub) waitRoom(done <-chan struct{}) {
	for {
		s.mu.Lock()
		full, room := s.size >= subMax && !s.closed, s.room
		s.mu.Unlock()
		if !full {
			return
		}
		select {
		case <-room:
		case <-done:
			return
		}
	}
}

// close ends following: the queue goes, a reader waiting for room goes on.
func (s *sub) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.q, s.size = nil, 0
		close(s.room)
		s.room = make(chan struct{})
	}
}
