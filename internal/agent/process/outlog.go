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
	if since < 0 || since > l.End() {
		return OutputChunk{}, &CursorError{ID: p.ID, Cursor: since, End: l.End()}
	}
	ch, err := l.Next(ctx, &p.mu, since, maxBytes, linger, deadline, nil)
	if err != nil {
		return OutputChunk{}, err
	}
	c := OutputChunk{Data: ch.Data, Start: ch.Start, Cursor: ch.Start + int64(len(ch.Data)), End: ch.End, Alive: ch.Alive}
	if !ch.Alive {
		c.Result = p.result
	}
	return c, nil
}
