// This file implements create admission: a bounded number of creates run at once,
// the rest wait in line up to QueueTimeout instead of failing under a burst.

package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// RetryError is a refusal (ErrUnavailable, ErrLimit, ErrWrongState) that says
// when a retry may succeed.
type RetryError struct {
	Err   error
	After time.Duration
}

func (e *RetryError) Error() string { return e.Err.Error() }
func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter returns how long a caller should wait before retrying err, when err
// says so (the HTTP layer's Retry-After).
func RetryAfter(err error) (time.Duration, bool) {
	var re *RetryError
	if errors.As(err, &re) {
		return re.After, true
	}
	return 0, false
}

// acquire waits for a create slot until the queue timeout, ctx or Close.
func (m *Manager) acquire(ctx context.Context) error {
	select { // fast path, and a slot beats a concurrent timeout
	case m.slots <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(m.queueTimeout)
	defer t.Stop()
	select {
	case m.slots <- struct{}{}:
		return nil
	case <-t.C:
		return &RetryError{
			Err:   fmt.Errorf("%w: %d creates in flight and the queue wait passed %s; retry later", sandbox.ErrUnavailable, cap(m.slots), m.queueTimeout),
			After: time.Second + m.queueTimeout/10,
		}
	case <-m.closing:
		return &RetryError{Err: errShutdown, After: 5 * time.Second}
	case <-ctx.Done():
		return fmt.Errorf("waiting in the create queue: %w", context.Cause(ctx))
	}
}

func (m *Manager) release() { <-m.slots }
