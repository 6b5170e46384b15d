// This file implements a process's output log: the last N bytes of its
// combined output, addressed by absolute offset, for readers that come back
// with a cursor (ReadOutput) instead of following a stream.

package process

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Output log bounds.
const (
	// MaxOutputLog bounds Spec.OutputLogBytes: a log is held in memory for
	// as long as its process is kept.
	MaxOutputLog = 64 << 20
	// DefaultReadOutput and MaxReadOutput bound one ReadOutput.
	DefaultReadOutput = 1 << 20
	MaxReadOutput     = 16 << 20
)

// ErrNoOutputLog is returned by ReadOutput for a process started without an
// output log.
var ErrNoOutputLog = errors.New("not started with an output log")

// CursorError is a ReadOutput cursor past the end of the output (or
// negative).
type CursorError struct {
	ID          string
	Cursor, End int64
}

func (e *CursorError) Error() string {
	if e.Cursor < 0 {
		return fmt.Sprintf("process %s: cursor %d is negative", e.ID, e.Cursor)
	}
	return fmt.Sprintf("process %s: cursor %d is past the end of the output (%d)", e.ID, e.Cursor, e.End)
}

// outputLog is a ring of the last size bytes a process wrote, stdout and
// stderr in the order the agent read them. Offsets are absolute: the byte at
// offset o is the o-th the process wrote, held at buf[o%size] while
// end-size <= o < end. The ring grows to size as output comes, so a large
// log costs only what the process writes. Its Proc's mu guards it.
type outputLog struct {
	size   int64
	buf    []byte    // len(buf) == end until it reaches size
	end    int64     // bytes written in all: the offset of the next one
	last   time.Time // when the last chunk came
	closed bool      // the process's result is sealed: nothing more comes
	// wake is closed, and set to nil, on the next write or at the close; it
	// is made only when a reader waits, so a log nobody waits on costs no
	// allocation per chunk.
	wake chan struct{}
}

func newOutputLog(size int64) *outputLog { return &outputLog{size: size} }

// write appends p, overwriting the oldest bytes once the ring is full: it
// never waits for a reader.
func (l *outputLog) write(p []byte, now time.Time) {
	if len(p) == 0 || l.closed {
		return
	}
	l.last = now
	if n := int64(len(p)); n > l.size { // only the last size bytes can be held
		l.end += n - l.size
		p = p[n-l.size:]
	}
	if int64(len(l.buf)) < l.size {
		if l.end == int64(len(l.buf)) && l.end+int64(len(p)) <= l.size {
			l.buf = append(l.buf, p...) // still growing, no wrap
			l.end += int64(len(p))
			l.signal()
			return
		}
		full := make([]byte, l.size) // from now on a ring
		copy(full, l.buf)
		l.buf = full
	}
	for len(p) > 0 {
		k := copy(l.buf[l.end%l.size:], p)
		p = p[k:]
		l.end += int64(k)
	}
	l.signal()
}

// start is the offset of the oldest byte held.
func (l *outputLog) start() int64 { return l.end - min(l.end, l.size) }

// read returns a copy of the bytes held from offset from on, at most max.
func (l *outputLog) read(from, max int64) []byte {
	from = min(l.end, from)
	to := min(l.end, from+max)
	out := make([]byte, 0, to-from)
	for from < to {
		i := from % l.size
		seg := l.buf[i:min(int64(len(l.buf)), i+to-from)]
		out = append(out, seg...)
		from += int64(len(seg))
	}
	return out
}

// waiter returns a channel closed at the next change.
func (l *outputLog) waiter() <-chan struct{} {
	if l.wake == nil {
		l.wake = make(chan struct{})
	}
	return l.wake
}

func (l *outputLog) signal() {
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
}

// close marks the end of the output and wakes every reader.
func (l *outputLog) close() {
	l.closed = true
	l.signal()
}

// OutputChunk is what ReadOutput returns.
type OutputChunk struct {
	Data []byte
	// Start is the offset of Data[0]: greater than the since asked for when
	// the log no longer holds what came between. Cursor is Start+len(Data),
	// the next since; End is the offset of the next byte the process writes.
	Start, Cursor, End int64
	// Alive is false once the process exited and all its output is in the
	// log; Result is then set.
	Alive  bool
	Result *Result
}

// ReadOutput returns the logged output at offsets from since on (0: from the
// oldest byte held), at most maxBytes of it (0: DefaultReadOutput; capped at
// MaxReadOutput). When none is there yet it waits up to wait for some, or for
// the process's end. Once some is there it lingers: it keeps collecting as
// long as each chunk comes within linger of the one before, within wait in
// all and until maxBytes. Waiting readers are woken by the writes themselves.
// A since past the end of the output is a *CursorError; a process without a
// log, ErrNoOutputLog. ctx ending before any output came is its error.
func (p *Proc) ReadOutput(ctx context.Context, since int64, wait, linger time.Duration, maxBytes int64) (OutputChunk, error) {
	deadline := time.Now().Add(max(wait, 0))
	if maxBytes <= 0 {
		maxBytes = DefaultReadOutput
	}
	maxBytes = min(maxBytes, MaxReadOutput)
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.log
	if l == nil {
		return OutputChunk{}, fmt.Errorf("process %s: %w", p.ID, ErrNoOutputLog)
	}
	if since < 0 || since > l.end {
		return OutputChunk{}, &CursorError{ID: p.ID, Cursor: since, End: l.end}
	}
	for l.end <= since && !l.closed {
		woken, err := p.waitLocked(ctx, l, deadline)
		if err != nil {
			return OutputChunk{}, err
		}
		if !woken {
			break
		}
	}
	for l.end > since && !l.closed && l.end-max(since, l.start()) < maxBytes {
		until := l.last.Add(linger)
		if until.After(deadline) {
			until = deadline
		}
		if !time.Now().Before(until) {
			break
		}
		if woken, err := p.waitLocked(ctx, l, until); !woken || err != nil {
			break
		}
	}
	from := max(since, l.start())
	c := OutputChunk{Data: l.read(from, maxBytes), Start: from, End: l.end, Alive: !l.closed}
	c.Cursor = c.Start + int64(len(c.Data))
	if l.closed {
		c.Result = p.result
	}
	return c, nil
}

// waitLocked waits, with p.mu released, for the log to change until
// deadline; it reports whether it changed. ctx ending is its error.
func (p *Proc) waitLocked(ctx context.Context, l *outputLog, deadline time.Time) (bool, error) {
	d := time.Until(deadline)
	if d <= 0 {
		return false, nil
	}
	ch := l.waiter()
	t := time.NewTimer(d)
	defer t.Stop()
	p.mu.Unlock()
	defer p.mu.Lock()
	select {
	case <-ch:
		return true, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}
