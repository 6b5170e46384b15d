// This file implements idempotent create (SECURITY.md RL-08): under one API
// key, an idempotency key names the one sandbox its first create made. Calls in
// flight with the same key wait for that create and share its result; later
// calls find the key in the store (written in the create's commit transaction,
// so it survives a crash exactly when the sandbox does) for IdempotencyTTL.

package manager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/store"
)

// IdempotencyTTL is how long an idempotency key names its sandbox.
const IdempotencyTTL = 24 * time.Hour

// MaxIdempotencyKey bounds an idempotency key, in bytes.
const MaxIdempotencyKey = 255

type flightKey struct{ keyID, key string }

// flight is a create under an idempotency key in progress in this process.
type flight struct {
	hash string
	done chan struct{} // closed when sb and err are set
	sb   sandbox.Sandbox
	err  error
}

type idemCtx struct{}

// CheckIdempotencyKey reports whether key may be an idempotency key: 1 to
// MaxIdempotencyKey printable ASCII characters.
func CheckIdempotencyKey(key string) error {
	if key == "" || len(key) > MaxIdempotencyKey {
		return sandbox.Invalid("Idempotency-Key", "must be 1 to %d characters, is %d", MaxIdempotencyKey, len(key))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return sandbox.Invalid("Idempotency-Key", "must be printable ASCII without spaces; byte %d is 0x%02x", i, c)
		}
	}
	return nil
}

// requestHash is the hex SHA-256 of req's canonical form: its decoded fields
// in a fixed order (maps sorted), so spacing and key order do not matter.
func requestHash(req sandbox.CreateRequest) (string, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("hashing the request: %w", err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:]), nil
}

// CreateIdempotent is Create under idempotency key key of ctx's API key. The
// first call creates; a later call with the same request returns the same
// sandbox with replayed set, whether the first is still in flight (it waits for
// it), done, or from before a daemon restart. The same key with a different
// request fails with ErrExists (409) naming the key; a key whose sandbox is gone
// fails with ErrWrongState. When the first create fails nothing is recorded,
// so a retry creates afresh.
func (m *Manager) CreateIdempotent(ctx context.Context, req sandbox.CreateRequest, key string) (sb sandbox.Sandbox, replayed bool, err error) {
	const op = "create"
	if err := CheckIdempotencyKey(key); err != nil {
		return sandbox.Sandbox{}, false, &sandbox.Error{Op: op, Err: err}
	}
	hash, err := requestHash(req)
	if err != nil {
		return sandbox.Sandbox{}, false, &sandbox.Error{Op: op, Err: err}
	}
	caller := keyID(ctx)
	fk := flightKey{caller, key}

	m.idemMu.Lock()
	if f := m.flights[fk]; f != nil {
		m.idemMu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return sandbox.Sandbox{}, false, &sandbox.Error{Op: op, Err: fmt.Errorf(
				"waiting for the create under idempotency key %q: %w", key, context.Cause(ctx))}
		}
		if f.hash != hash {
			err := idemConflict(key, f.sb.ID)
			m.audit(ctx, f.sb.ID, "create", req.Template, "idempotency key conflict", err)
			return sandbox.Sandbox{}, false, err
		}
		if f.err != nil {
			return sandbox.Sandbox{}, false, f.err
		}
		m.audit(ctx, f.sb.ID, "create", f.sb.Spec.Template, "idempotent replay", nil)
		return f.sb, true, nil
	}
	f := &flight{hash: hash, done: make(chan struct{})}
	m.flights[fk] = f
	m.idemMu.Unlock()
	defer func() {
		m.idemMu.Lock()
		delete(m.flights, fk)
		m.idemMu.Unlock()
		close(f.done)
	}()

	f.sb, replayed, f.err = m.createOnce(ctx, req, store.Idempotency{KeyID: caller, Key: key, BodyHash: hash})
	return f.sb, replayed, f.err
}

// createOnce returns the sandbox idem's key names in the store, or creates one
// and records the key with its commit.
func (m *Manager) createOnce(ctx context.Context, req sandbox.CreateRequest, idem store.Idempotency) (sandbox.Sandbox, bool, error) {
	const op = "create"
	rec, err := m.store.GetIdempotency(ctx, idem.KeyID, idem.Key)
	switch {
	case err == nil && m.now().Sub(rec.CreatedAt) < IdempotencyTTL:
		if rec.BodyHash != idem.BodyHash {
			err := idemConflict(idem.Key, rec.SandboxID)
			m.audit(ctx, rec.SandboxID, "create", req.Template, "idempotency key conflict", err)
			return sandbox.Sandbox{}, false, err
		}
		sb, err := m.store.GetSandbox(ctx, rec.SandboxID)
		if errors.Is(err, sandbox.ErrNotFound) || (err == nil && sb.State == sandbox.StateWarm) {
			err := &sandbox.Error{Op: op, ID: rec.SandboxID, Err: fmt.Errorf(
				"%w: idempotency key %q created sandbox %s, which no longer exists; use a new key", sandbox.ErrWrongState, idem.Key, rec.SandboxID)}
			m.audit(ctx, rec.SandboxID, "create", req.Template, "idempotent replay of a deleted sandbox", err)
			return sandbox.Sandbox{}, false, err
		}
		if err != nil {
			return sandbox.Sandbox{}, false, &sandbox.Error{Op: op, ID: rec.SandboxID, Err: err}
		}
		m.audit(ctx, sb.ID, "create", sb.Spec.Template, "idempotent replay", nil)
		return sb, true, nil
	case err == nil, errors.Is(err, sandbox.ErrNotFound):
		// Unknown, or older than the TTL (and not pruned yet): create.
	default:
		return sandbox.Sandbox{}, false, &sandbox.Error{Op: op, Err: err}
	}
	idem.CreatedAt = m.now()
	sb, err := m.Create(context.WithValue(ctx, idemCtx{}, idem), req)
	return sb, false, err
}

// idemConflict is the error of an idempotency key reused with another request.
func idemConflict(key string, id sandbox.ID) error {
	msg := fmt.Errorf("%w: idempotency key %q was used with a different request; use a new key", sandbox.ErrExists, key)
	return &sandbox.Error{Op: "create", ID: id, Err: msg}
}

// commitCreate writes sb, a create's success, over its record, which must
// still be in state from (creating, or warm for a hand-out); when ctx
// carries an idempotency key (CreateIdempotent) it is recorded in the same
// transaction. The manager holds everything the record has (it wrote the
// rest), so without a key this is one conditional statement, not a
// transaction that reads the record back first: that was three quarters of
// a hand-out's CPU (BEGIN and COMMIT parsed anew each time, the SELECT, the
// JSON decode).
func (m *Manager) commitCreate(ctx context.Context, sb sandbox.Sandbox, from sandbox.State) (sandbox.Sandbox, error) {
	// As the store keeps them, and a read gives them back.
	sb.CreatedAt, sb.ExpiresAt = sb.CreatedAt.Truncate(time.Millisecond), sb.ExpiresAt.Truncate(time.Millisecond)
	if idem, ok := ctx.Value(idemCtx{}).(store.Idempotency); ok {
		return m.store.CommitSandbox(ctx, sb.ID, func(r *sandbox.Sandbox) error {
			if r.State != from {
				return wrongState(r.State)
			}
			*r = sb
			return nil
		}, idem)
	}
	if err := m.store.SwapSandbox(ctx, sb, from); err != nil {
		return sandbox.Sandbox{}, err
	}
	return sb, nil
}

// pruneIdempotency deletes the idempotency keys older than IdempotencyTTL; the
// audit writer runs it each time it prunes the audit log.
func (m *Manager) pruneIdempotency(ctx context.Context) {
	if _, err := m.store.PruneIdempotency(ctx, m.now().Add(-IdempotencyTTL)); err != nil {
		m.log.WarnContext(ctx, "pruning idempotency keys", logkey.Err, err)
	}
}
