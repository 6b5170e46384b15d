// This file implements quarantine: a sandbox whose teardown failed keeps its
// record in state quarantined, with the reason, and its host resources (its
// uid range among them) stay its own until a retry of the teardown succeeds.

package manager

import (
	"context"
	"time"

	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// quarantineRetry is how often quarantined teardowns are tried again.
const quarantineRetry = 5 * time.Second

// retryQuarantined tries the teardown of every quarantined sandbox again,
// every quarantineRetry, until the manager closes.
func (m *Manager) retryQuarantined() {
	ctx := m.lifetime
	t := time.NewTicker(quarantineRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, id := range m.Quarantined(ctx) {
			if err := m.destroy(ctx, "quarantine_retry", id, "retry"); err == nil {
				m.log.InfoContext(ctx, "a quarantined sandbox's teardown succeeded", logkey.SandboxID, id)
			}
		}
	}
}

// Quarantined lists the sandboxes whose teardown failed and is retried.
func (m *Manager) Quarantined(ctx context.Context) []sandbox.ID {
	sbs, err := m.store.ListSandboxes(ctx, sandbox.StateQuarantined)
	if err != nil {
		return nil
	}
	out := make([]sandbox.ID, 0, len(sbs))
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	return out
}
