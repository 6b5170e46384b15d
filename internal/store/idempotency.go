// This file implements the idempotency table (SECURITY.md RL-08): a caller's
// Idempotency-Key names the one sandbox its first create made, with a hash of
// the request, so a replay returns that sandbox and a different request is told
// apart. Records are written with the create's commit, never before it.

package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// Idempotency is one caller's idempotency key and what it created.
type Idempotency struct {
	KeyID     string // the API key that sent it
	Key       string // the Idempotency-Key header
	BodyHash  string // hex SHA-256 of the canonical request
	SandboxID sandbox.ID
	CreatedAt time.Time
}

// GetIdempotency returns the record of caller keyID's idempotency key key, or an
// error wrapping sandbox.ErrNotFound.
func (s *Store) GetIdempotency(ctx context.Context, keyID, key string) (Idempotency, error) {
	r := Idempotency{KeyID: keyID, Key: key}
	var created int64
	err := s.db.QueryRowContext(ctx, `SELECT body_hash, sandbox_id, created_at FROM idempotency WHERE key_id = ? AND idem_key = ?`,
		keyID, key).Scan(&r.BodyHash, &r.SandboxID, &created)
	if notFound(err) {
		return Idempotency{}, fmt.Errorf("idempotency key %q %w", key, sandbox.ErrNotFound)
	}
	if err != nil {
		return Idempotency{}, fmt.Errorf("reading idempotency key %q: %w", key, err)
	}
	r.CreatedAt = fromMS(created)
	return r, nil
}

// putIdempotency records r in tx, replacing a record of the same caller and
// key (one older than the retention, which lookups already ignore).
func putIdempotency(ctx context.Context, tx *sql.Tx, r Idempotency) error {
	created := r.CreatedAt
	if created.IsZero() {
		created = time.Now()
	}
	_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO idempotency (key_id, idem_key, body_hash, sandbox_id, created_at)
		VALUES (?, ?, ?, ?, ?)`, r.KeyID, r.Key, r.BodyHash, r.SandboxID, created.UnixMilli())
	if err != nil {
		return fmt.Errorf("recording idempotency key %q for sandbox %s: %w", r.Key, r.SandboxID, err)
	}
	return nil
}

// PruneIdempotency deletes the records created before before; it returns how
// many went.
func (s *Store) PruneIdempotency(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM idempotency WHERE created_at < ?`, before.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("pruning idempotency keys older than %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}
