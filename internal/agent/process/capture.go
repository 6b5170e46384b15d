// This file implements output capture: the first half of the cap in a head
// buffer, the last half in a ring, and the whole stream spilled to a file once
// the cap is exceeded.

package process

import (
	"fmt"
	"os"
)

// capture holds one stream of one process. Its owner's mutex guards it.
type capture struct {
	headCap, tailCap int64
	head             []byte
	tail             []byte // ring once len(tail) == tailCap
	tpos             int    // next write position in a full ring
	total            int64

	spill       *os.File
	spillPath   string // wire path
	spillLimit  int64
	spilled     int64
	spillCapped bool
	spillFailed bool // or not wanted (Spec.NoSpill): no spill file is made
}

func newCapture(limit, spillLimit int64) *capture {
	if limit < 2 {
		limit = 2
	}
	return &capture{headCap: limit / 2, tailCap: limit - limit/2, spillLimit: spillLimit}
}

// write records p. open creates the spill file when the cap is first exceeded.
func (c *capture) write(p []byte, open func() (*os.File, string, error)) {
	prev := c.total
	c.total += int64(len(p))
	if c.total > c.headCap+c.tailCap && prev <= c.headCap+c.tailCap && !c.spillFailed {
		f, path, err := open()
		if err != nil {
			c.spillFailed = true
		} else {
			c.spill, c.spillPath = f, path
			c.spillWrite(c.head)
			c.spillWrite(c.tailBytes())
		}
	}
	if c.spill != nil {
		c.spillWrite(p)
	}
	if n := c.headCap - int64(len(c.head)); n > 0 {
		k := min(n, int64(len(p)))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 {
		return
	}
	if int64(len(p)) >= c.tailCap { // the new data alone fills the ring
		p = p[int64(len(p))-c.tailCap:]
		if int64(cap(c.tail)) < c.tailCap {
			c.tail = make([]byte, 0, c.tailCap)
		}
		c.tail = append(c.tail[:0], p...)
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

func (c *capture) spillWrite(p []byte) {
	if c.spill == nil || c.spillCapped || len(p) == 0 {
		return
	}
	if c.spillLimit > 0 && c.spilled+int64(len(p)) > c.spillLimit {
		p = p[:c.spillLimit-c.spilled]
		c.spillCapped = true
	}
	n, err := c.spill.Write(p)
	c.spilled += int64(n)
	if err != nil {
		c.spillCapped = true
	}
}

// tailBytes returns the ring's contents, oldest first.
func (c *capture) tailBytes() []byte {
	if c.tpos == 0 {
		return c.tail
	}
	out := make([]byte, 0, len(c.tail))
	out = append(out, c.tail[c.tpos:]...)
	return append(out, c.tail[:c.tpos]...)
}

func (c *capture) dropped() int64 { return c.total - int64(len(c.head)) - int64(len(c.tail)) }

// notice is the line put between head and tail when bytes were dropped.
func (c *capture) notice() string {
	switch {
	case c.spillPath == "":
		return fmt.Sprintf("\n[sbx: %d bytes dropped; the full output could not be saved]\n", c.dropped())
	case c.spillCapped:
		return fmt.Sprintf("\n[sbx: %d bytes dropped; the first %d bytes of the output are in %s]\n", c.dropped(), c.spilled, c.spillPath)
	default:
		return fmt.Sprintf("\n[sbx: %d bytes dropped; full output in %s]\n", c.dropped(), c.spillPath)
	}
}

// bytes returns head, the notice when bytes were dropped, and tail.
func (c *capture) bytes() []byte {
	t := c.tailBytes()
	out := make([]byte, 0, len(c.head)+len(t)+128)
	out = append(out, c.head...)
	if c.dropped() > 0 {
		out = append(out, c.notice()...)
	}
	return append(out, t...)
}

// closeSpill closes the spill file, if any.
func (c *capture) closeSpill() {
	if c.spill != nil {
		c.spill.Close()
		c.spill = nil
	}
}
