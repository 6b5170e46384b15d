// This file implements TTL expiry: the deadline persisted is absolute (expires_at);
// the reaper sleeps until the earliest one and deletes what has expired.

package manager

import (
	"context"
	"time"

	"sbx/internal/logkey"
	"sbx/internal/sandbox"
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
		next := m.expireDue(ctx)
		sleep := maxReaperSleep
		if !next.IsZero() {
			sleep = min(max(next.Sub(m.now()), 0), maxReaperSleep)
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

// expireDue deletes the sandboxes whose deadline has passed and returns the
// earliest deadline still ahead (zero when none).
func (m *Manager) expireDue(ctx context.Context) time.Time {
	now := m.now()
	var due []sandbox.ID
	var next time.Time
	m.mu.Lock()
	for id, l := range m.live {
		switch {
		case !now.Before(l.deadline):
			due = append(due, id)
		case next.IsZero() || l.deadline.Before(next):
			next = l.deadline
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
	return next
}
