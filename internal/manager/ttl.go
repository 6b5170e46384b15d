// This file implements TTL expiry. The deadline persisted is absolute
// (expires_at, on the wall clock); the running one is the time left on the
// monotonic clock. The reaper sleeps until the earliest and deletes what has
// expired.

package manager

import (
	"context"
	"time"

	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// maxReaperSleep bounds one sleep of the reaper, so a clock the tests inject (or
// a lost nudge) is looked at again in bounded time.
const maxReaperSleep = time.Minute

// nudge wakes the reaper to look at the deadlines again.
func (m *Manager) nudge() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// startReaper starts the reaper once; it runs until Close.
func (m *Manager) startReaper() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reaperStarted || m.closed {
		return
	}
	m.reaperStarted = true
	m.reaper.Go(m.reap)
	m.reaper.Go(m.retryQuarantined)
}

func (m *Manager) reap() {
	ctx := m.lifetime
	for {
		next, ok := m.expireDue(ctx)
		sleep := maxReaperSleep
		if ok {
			sleep = min(max(next-m.elapsed(), 0), maxReaperSleep)
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-m.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// expireDue deletes the sandboxes whose time is up and returns the earliest
// due time still ahead on the monotonic clock (ok false when none).
func (m *Manager) expireDue(ctx context.Context) (next time.Duration, ok bool) {
	now := m.elapsed()
	var due []sandbox.ID
	m.mu.Lock()
	for id, l := range m.live {
		switch {
		case now >= l.due:
			due = append(due, id)
		case !ok || l.due < next:
			next, ok = l.due, true
		}
	}
	m.mu.Unlock()
	for _, id := range due {
		if ctx.Err() != nil {
			break
		}
		m.log.InfoContext(ctx, "sandbox expired", logkey.SandboxID, id)
		if err := m.destroy(ctx, "expire", id, "ttl"); err != nil {
			m.log.WarnContext(ctx, "deleting an expired sandbox", logkey.SandboxID, id, logkey.Err, err)
		}
	}
	return next, ok
}
