// This file implements recovery at daemon start (SECURITY.md RL-01): the store is
// reconciled with what the drivers hold; running sandboxes are re-adopted, and
// interrupted or unprovable ones are torn down.

package manager

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// recoverParallelism bounds the sandboxes recovered at once.
const recoverParallelism = 16

// Recover re-adopts the sandboxes the store lists (and whose drivers can reattach)
// and cleans up the rest, then starts the TTL reaper.
func (m *Manager) Recover(ctx context.Context) error {
	defer m.pool.start(m.lifetime)
	defer m.startReaper()
	rows, err := m.store.ListSandboxes(ctx)
	if err != nil {
		return fmt.Errorf("recovering: %w", err)
	}
	known := map[sandbox.ID]bool{}
	sem := make(chan struct{}, recoverParallelism)
	var wg sync.WaitGroup
	for _, sb := range rows {
		known[sb.ID] = true
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			m.recoverOne(ctx, sb)
		})
	}
	wg.Wait()
	if err := m.recountLimits(ctx); err != nil {
		return err
	}

	// Owned-but-unknown: resources a driver holds under this instance that no
	// record names (a crash between Start and the intent record cannot happen,
	// so these are leftovers of deleted records).
	for _, nd := range m.drivers {
		l, ok := nd.Driver.(backend.Lister)
		if !ok {
			continue
		}
		held, err := l.ListHeld(ctx)
		if err != nil {
			m.log.WarnContext(ctx, "listing held sandboxes", logkey.Backend, nd.Name, logkey.Err, err)
			continue
		}
		for _, id := range held {
			if known[id] {
				continue
			}
			m.log.InfoContext(ctx, "reaping resources no record names", logkey.Backend, nd.Name, logkey.SandboxID, id)
			cctx, cancel := cleanupContext(ctx)
			if err := nd.Driver.Destroy(cctx, id); err != nil {
				m.log.ErrorContext(ctx, "reaping unknown sandbox", logkey.Backend, nd.Name, logkey.SandboxID, id, logkey.Err, err)
			}
			cancel()
		}
	}
	return nil
}

// recoverOne reconciles one record.
func (m *Manager) recoverOne(ctx context.Context, sb sandbox.Sandbox) {
	log := m.log.With(logkey.SandboxID, sb.ID, logkey.Backend, sb.Backend)
	d := m.driver(sb.Backend)
	if d == nil {
		if sb.State == sandbox.StateRecoveryRequired {
			return
		}
		msg := fmt.Sprintf("backend %q is not configured; configure it to recover or delete the sandbox", sb.Backend)
		for _, u := range m.unopened {
			if u.Name == sb.Backend {
				msg = fmt.Sprintf("backend %q failed to open (%v); fix it to recover or delete the sandbox", sb.Backend, u.Err)
			}
		}
		log.WarnContext(ctx, "cannot recover sandbox", "reason", msg)
		m.store.UpdateSandbox(ctx, sb.ID, func(r *sandbox.Sandbox) error {
			r.State = sandbox.StateRecoveryRequired
			r.Error = msg
			return nil
		})
		return
	}
	switch sb.State {
	case sandbox.StateCreating:
		m.forget(ctx, d, sb, "create interrupted by a daemon restart")
	case sandbox.StateWarm:
		m.forget(ctx, d, sb, "warm sandbox of a previous daemon run")
	case sandbox.StateDeleting:
		m.forget(ctx, d, sb, "delete interrupted by a daemon restart")
	case sandbox.StateError, sandbox.StateQuarantined:
		m.forget(ctx, d, sb, "retrying teardown: "+sb.Error)
	case sandbox.StateRunning, sandbox.StateRecoveryRequired, sandbox.StateStopped:
		now := m.now()
		if !now.Before(sb.ExpiresAt) {
			m.forget(ctx, d, sb, "expired while the daemon was down")
			return
		}
		spec := sb.Spec
		spec.ID = sb.ID
		if err := m.useRules(spec); err != nil {
			log.WarnContext(ctx, "a recovered sandbox's network rules do not compile; it gets none", logkey.Err, err)
		}
		m.restoreSecrets(ctx, sb)
		inst, err := d.Recover(ctx, sb.ID, sb.Saved)
		if err != nil {
			m.forget(ctx, d, sb, "reattaching failed: "+err.Error())
			return
		}
		if inst.Applied.Backend == "" {
			inst.Applied.Backend = sb.Backend
		}
		// Monotonic from here on: the time left, measured once on the wall clock.
		left := sb.ExpiresAt.Sub(now)
		if _, err := m.store.UpdateSandbox(ctx, sb.ID, func(r *sandbox.Sandbox) error {
			r.State = sandbox.StateRunning
			r.Error = ""
			if inst.Saved != nil {
				r.Saved = inst.Saved
			}
			r.Isolation = inst.Applied
			return nil
		}); err != nil {
			log.ErrorContext(ctx, "recording a recovered sandbox", logkey.Err, err)
			return
		}
		m.adopt(sb.ID, sb.Backend, agentclient.New(sb.ID, inst.Dial), left)
		log.InfoContext(ctx, "sandbox re-adopted")
	default:
		log.WarnContext(ctx, "unknown sandbox state in the store; leaving it", "state", sb.State)
	}
}

// recountLimits counts, for the limits, every record that remains after
// recovery under its owner key: a sandbox holds its owner's place until its
// record is deleted. Warm sandboxes belong to nobody.
func (m *Manager) recountLimits(ctx context.Context) error {
	rows, err := m.store.ListSandboxes(ctx)
	if err != nil {
		return fmt.Errorf("recovering: counting sandboxes per key: %w", err)
	}
	owners := make(map[sandbox.ID]string, len(rows))
	for _, sb := range rows {
		if sb.State != sandbox.StateWarm {
			owners[sb.ID] = sb.OwnerKey
		}
	}
	m.limits.rebuild(owners)
	return nil
}

// forget destroys sb and deletes its record; when Destroy fails the record
// stays, quarantined: retried (quarantine.go), its resources never reused.
func (m *Manager) forget(ctx context.Context, d backend.Driver, sb sandbox.Sandbox, why string) {
	log := m.log.With(logkey.SandboxID, sb.ID, logkey.Backend, sb.Backend)
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	if err := d.Destroy(cctx, sb.ID); err != nil {
		log.ErrorContext(cctx, "destroying sandbox at recovery failed; quarantined, to be retried", "reason", why, logkey.Err, err)
		m.store.UpdateSandbox(cctx, sb.ID, func(r *sandbox.Sandbox) error {
			r.State = sandbox.StateQuarantined
			r.Error = "teardown failed: " + err.Error()
			return nil
		})
		return
	}
	if err := m.store.DeleteSandbox(cctx, sb.ID); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		log.ErrorContext(cctx, "deleting a recovered record", logkey.Err, err)
		return
	}
	m.limits.release(sb.ID)
	if sb.State != sandbox.StateWarm {
		m.auditor.record(sb.OwnerKey, sb.ID, "recover_destroy", "", why, nil)
	}
	log.InfoContext(cctx, "sandbox destroyed at recovery", "reason", why)
}
