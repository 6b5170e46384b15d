// Package ringlog is a process's output log: the last N bytes of its output,
// addressed by absolute offset, for readers that come back with a cursor
// instead of following a stream. The in-sandbox agent keeps one per process
// that asks, and so does the e2b backend's adapter, which serves the same
// protocol in the daemon. A Log does no locking: its owner's lock guards it,
// and Next releases that lock while it waits.
package ringlog

import (
	"context"
	"sync"
	"time"
)

// Log is a ring of the last size bytes written. The byte at offset o is the
// o-th written, held at buf[o%size] while End()-size <= o < End(). The ring
// grows to size as output comes, so a large log costs only what is written.
type Log struct {
	size   int64
	buf    []byte    // len(buf) == end until it reaches size
	end    int64     // bytes written in all: the offset of the next one
	last   time.Time // when the last chunk came
	closed bool      // nothing more comes
	// wake is closed, and set to nil, on the next write or at the close; it
	// is made only when a reader waits, so a log nobody waits on costs no
	// allocation per chunk.
	wake chan struct{}
}

// New returns an empty log that holds the last size bytes (size > 0).
func New(size int64) *Log { return &Log{size: max(size, 1)} }

// Write appends p, overwriting the oldest bytes once the ring is full: it
// never waits for a reader. A closed log takes nothing.
func (l *Log) Write(p []byte, now time.Time) {
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

// Close marks the end of the output and wakes every reader.
func (l *Log) Close() {
	l.closed = true
	l.signal()
}

// Closed reports whether Close was called.
func (l *Log) Closed() bool { return l.closed }

// Start is the offset of the oldest byte held.
func (l *Log) Start() int64 { return l.end - min(l.end, l.size) }

// End is the offset of the next byte written.
func (l *Log) End() int64 { return l.end }

// Held is the memory the log's bytes take.
func (l *Log) Held() int64 { return int64(len(l.buf)) }

// Read returns a copy of the bytes held from offset from on, at most n.
func (l *Log) Read(from, n int64) []byte {
	from = max(min(l.end, from), l.Start())
	to := min(l.end, from+n)
	out := make([]byte, 0, to-from)
	for from < to {
		i := from % l.size
		seg := l.buf[i:min(int64(len(l.buf)), i+to-from)]
		out = append(out, seg...)
		from += int64(len(seg))
	}
	return out
}

// Chunk is what Next returns.
type Chunk struct {
	Data []byte
	// Start is the offset of Data[0]: greater than the since asked for when
	// the log no longer holds what came between. End is the offset of the
	// next byte written.
	Start, End int64
	// Alive is false once the log is closed and all it will hold is in.
	Alive bool
}

// Next returns what the log holds from offset since on, at most maxBytes.
// When nothing is there yet it waits until deadline for some, or for the
// close. Once some is there it lingers: it keeps collecting as long as each
// chunk comes within linger of the one before, until deadline and until
// maxBytes. The caller holds mu, the log's guard, which Next releases while
// it waits; since must not be past End (the caller says why not). ctx ending
// while it waits for the first output is its error, wrapped by wrap (nil:
// as it is).
func (l *Log) Next(ctx context.Context, mu sync.Locker, since, maxBytes int64, linger time.Duration, deadline time.Time, wrap func(error) error) (Chunk, error) {
	for l.end <= since && !l.closed {
		woken, err := l.wait(ctx, mu, deadline)
		if err != nil {
			if wrap != nil {
				err = wrap(err)
			}
			return Chunk{}, err
		}
		if !woken {
			break
		}
	}
	for l.end > since && !l.closed && l.end-max(since, l.Start()) < maxBytes {
		until := l.last.Add(linger)
		if until.After(deadline) {
			until = deadline
		}
		if !time.Now().Before(until) {
			break
		}
		if woken, err := l.wait(ctx, mu, until); !woken || err != nil {
			break
		}
	}
	from := max(since, l.Start())
	return Chunk{Data: l.Read(from, maxBytes), Start: from, End: l.end, Alive: !l.closed}, nil
}

// wait waits, with mu released, for the log to change until deadline; it
// reports whether it changed. ctx ending is its error.
func (l *Log) wait(ctx context.Context, mu sync.Locker, deadline time.Time) (bool, error) {
	d := time.Until(deadline)
	if d <= 0 {
		return false, nil
	}
	if l.wake == nil {
		l.wake = make(chan struct{})
	}
	ch := l.wake
	t := time.NewTimer(d)
	defer t.Stop()
	mu.Unlock()
	defer mu.Lock()
	select {
	case <-ch:
		return true, nil
	case <-t.C:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

func (l *Log) signal() {
	if l.wake != nil {
		close(l.wake)
		l.wake = nil
	}
}
