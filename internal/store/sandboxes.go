// This file implements the sandboxes table: one row per sandbox the daemon owns,
// written before each side effect so a restart can reconcile it with the host.

package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

const sandboxColumns = `id, state, backend, spec, isolation, saved, labels, created_at, expires_at, error, owner_key`

// sandboxUpdate writes every column a record's life changes, in the order of
// encoded.set's values; its statements add which record.
const sandboxUpdate = `UPDATE sandboxes SET state = ?, saved = ?, isolation = ?, created_at = ?, expires_at = ?,
	labels = ?, spec = ?, error = ?, owner_key = ?, updated_at = ?`

// PutSandbox inserts a new record. It fails with sandbox.ErrExists when the id is
// taken. Spec.Env is not persisted: environment values may carry secrets.
func (s *Store) PutSandbox(ctx context.Context, sb sandbox.Sandbox) error {
	r, err := encode(sb)
	if err != nil {
		return err
	}
	_, err = s.stmtInsert.ExecContext(ctx,
		sb.ID, sb.State, sb.Backend, r.spec, r.isolation, sb.Saved, r.labels,
		unixMS(sb.CreatedAt), unixMS(sb.ExpiresAt), sb.Error, sb.OwnerKey, time.Now().UnixMilli())
	if isConstraint(err) {
		return fmt.Errorf("sandbox %s %w", sb.ID, sandbox.ErrExists)
	}
	if err != nil {
		return fmt.Errorf("inserting sandbox %s: %w", sb.ID, err)
	}
	return nil
}

// UpdateSandbox reads the record of id, lets fn change it, and writes back its
// state, saved, isolation, created_at, expires_at, labels, owner_key and error,
// atomically. fn must not call the store. It fails with sandbox.ErrNotFound when
// there is no such record, and returns fn's error unchanged (writing nothing)
// when fn fails.
func (s *Store) UpdateSandbox(ctx context.Context, id sandbox.ID, fn func(*sandbox.Sandbox) error) (sandbox.Sandbox, error) {
	return s.updateSandbox(ctx, id, fn, nil)
}

// CommitSandbox is UpdateSandbox that also records idem, naming id, in the same
// transaction: a create and the idempotency key that asked for it are stored
// together or not at all. A record of the same caller and key is replaced.
func (s *Store) CommitSandbox(ctx context.Context, id sandbox.ID, fn func(*sandbox.Sandbox) error, idem Idempotency) (sandbox.Sandbox, error) {
	idem.SandboxID = id
	return s.updateSandbox(ctx, id, fn, &idem)
}

func (s *Store) updateSandbox(ctx context.Context, id sandbox.ID, fn func(*sandbox.Sandbox) error, idem *Idempotency) (sandbox.Sandbox, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("updating sandbox %s: %w", id, err)
	}
	defer tx.Rollback()
	sb, err := scanSandbox(tx.StmtContext(ctx, s.stmtSelect).QueryRowContext(ctx, id))
	if notFound(err) {
		return sandbox.Sandbox{}, fmt.Errorf("sandbox %s %w", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("reading sandbox %s: %w", id, err)
	}
	if err := fn(&sb); err != nil {
		return sandbox.Sandbox{}, err
	}
	sb.ID = id
	r, err := encode(sb)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	_, err = tx.StmtContext(ctx, s.stmtUpdate).ExecContext(ctx, append(r.set(sb), id)...)
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("updating sandbox %s: %w", id, err)
	}
	if idem != nil {
		if err := putIdempotency(ctx, tx, *idem); err != nil {
			return sandbox.Sandbox{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("updating sandbox %s: %w", id, err)
	}
	return sb, nil
}

// GetSandbox returns the record of id, or an error wrapping sandbox.ErrNotFound.
func (s *Store) GetSandbox(ctx context.Context, id sandbox.ID) (sandbox.Sandbox, error) {
	sb, err := scanSandbox(s.stmtSelect.QueryRowContext(ctx, id))
	if notFound(err) {
		return sandbox.Sandbox{}, fmt.Errorf("sandbox %s %w", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("reading sandbox %s: %w", id, err)
	}
	return sb, nil
}

// SwapSandbox writes sb over the record of sb.ID, its state, saved,
// isolation, created_at, expires_at, labels, owner_key and error, if that
// record is in state from: UpdateSandbox for a caller that holds the whole
// record already, in one statement instead of a transaction that reads the
// record first. It fails with sandbox.ErrNotFound when no record of sb.ID
// is in state from.
func (s *Store) SwapSandbox(ctx context.Context, sb sandbox.Sandbox, from sandbox.State) error {
	r, err := encode(sb)
	if err != nil {
		return err
	}
	res, err := s.stmtSwap.ExecContext(ctx, append(r.set(sb), sb.ID, from)...)
	if err != nil {
		return fmt.Errorf("updating sandbox %s: %w", sb.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("sandbox %s in state %s %w", sb.ID, from, sandbox.ErrNotFound)
	}
	return nil
}

// SetSandboxState sets the state of id's record, in one statement, and
// returns the record's backend and owner key: UpdateSandbox for a change of
// state alone (a delete's mark). It fails with sandbox.ErrNotFound when
// there is no such record.
func (s *Store) SetSandboxState(ctx context.Context, id sandbox.ID, state sandbox.State) (backend, owner string, err error) {
	err = s.stmtState.QueryRowContext(ctx, state, time.Now().UnixMilli(), id).Scan(&backend, &owner)
	if notFound(err) {
		return "", "", fmt.Errorf("sandbox %s %w", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return "", "", fmt.Errorf("updating sandbox %s: %w", id, err)
	}
	return backend, owner, nil
}

// ListSandboxes returns every record, oldest first; with states, only those in
// one of them.
func (s *Store) ListSandboxes(ctx context.Context, states ...sandbox.State) ([]sandbox.Sandbox, error) {
	q := `SELECT ` + sandboxColumns + ` FROM sandboxes`
	var args []any
	if len(states) > 0 {
		q += ` WHERE state IN (?` + repeat(",?", len(states)-1) + `)`
		for _, st := range states {
			args = append(args, st)
		}
	}
	q += ` ORDER BY created_at, rowid`
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	defer rows.Close()
	var out []sandbox.Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("listing sandboxes: %w", err)
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	return out, nil
}

// DeleteSandbox removes the record of id, or fails with sandbox.ErrNotFound.
func (s *Store) DeleteSandbox(ctx context.Context, id sandbox.ID) error {
	res, err := s.stmtDelete.ExecContext(ctx, id)
	if err != nil {
		return fmt.Errorf("deleting sandbox %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("sandbox %s %w", id, sandbox.ErrNotFound)
	}
	return nil
}

type encoded struct {
	spec, isolation, labels string
}

// set is the values of sandboxUpdate for sb, encoded as r.
func (r encoded) set(sb sandbox.Sandbox) []any {
	return []any{sb.State, sb.Saved, r.isolation, unixMS(sb.CreatedAt), unixMS(sb.ExpiresAt), r.labels, r.spec,
		sb.Error, sb.OwnerKey, time.Now().UnixMilli()}
}

func encode(sb sandbox.Sandbox) (encoded, error) {
	spec := sb.Spec
	spec.Env = nil
	spec.Labels = nil // kept in their own column
	b, err := json.Marshal(spec)
	if err != nil {
		return encoded{}, fmt.Errorf("encoding spec of %s: %w", sb.ID, err)
	}
	iso, err := json.Marshal(sb.Isolation)
	if err != nil {
		return encoded{}, fmt.Errorf("encoding isolation of %s: %w", sb.ID, err)
	}
	labels := sb.Spec.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	lb, err := json.Marshal(labels)
	if err != nil {
		return encoded{}, fmt.Errorf("encoding labels of %s: %w", sb.ID, err)
	}
	return encoded{string(b), string(iso), string(lb)}, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanSandbox(row scanner) (sandbox.Sandbox, error) {
	var (
		sb                sandbox.Sandbox
		spec, iso, labels string
		created, expires  int64
		saved             []byte
		state             string
	)
	if err := row.Scan(&sb.ID, &state, &sb.Backend, &spec, &iso, &saved, &labels, &created, &expires, &sb.Error, &sb.OwnerKey); err != nil {
		return sandbox.Sandbox{}, err
	}
	sb.State = sandbox.State(state)
	if err := json.Unmarshal([]byte(spec), &sb.Spec); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("decoding spec of %s: %w", sb.ID, err)
	}
	if err := json.Unmarshal([]byte(iso), &sb.Isolation); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("decoding isolation of %s: %w", sb.ID, err)
	}
	var l map[string]string
	if err := json.Unmarshal([]byte(labels), &l); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("decoding labels of %s: %w", sb.ID, err)
	}
	if len(l) > 0 {
		sb.Spec.Labels = maps.Clone(l)
	}
	sb.Spec.ID = sb.ID
	if len(saved) > 0 {
		sb.Saved = saved
	}
	sb.CreatedAt = fromMS(created)
	sb.ExpiresAt = fromMS(expires)
	return sb, nil
}

func repeat(s string, n int) string {
	out := ""
	for range n {
		out += s
	}
	return out
}

var _ scanner = (*sql.Row)(nil)
