// This file implements the secrets table: each API key's secrets, kept sealed
// (the caller seals and opens them; the store never sees a value in clear),
// one per owner and name.

package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// Secret is one secret's record. Ciphertext and Nonce are its sealed value;
// ListSecrets leaves them empty.
type Secret struct {
	Owner string // the API key id that owns it
	Name  string
	Mode  string // "env" or "proxy"
	// Hosts are the names a proxy-mode value may be sent to; none in env mode.
	Hosts      []string
	Ciphertext []byte
	Nonce      []byte
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// PutSecret creates sec, or replaces the value, mode and hosts of the
// secret of that owner and name, keeping its created_at. It returns the
// record as stored and whether it replaced one.
func (s *Store) PutSecret(ctx context.Context, sec Secret) (Secret, bool, error) {
	hosts, err := encodeHosts(sec.Hosts)
	if err != nil {
		return Secret{}, false, fmt.Errorf("putting secret %q: %w", sec.Name, err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Secret{}, false, fmt.Errorf("putting secret %q: %w", sec.Name, err)
	}
	defer tx.Rollback()
	var created int64
	err = tx.QueryRowContext(ctx, `SELECT created_at FROM secrets WHERE owner_key = ? AND name = ?`, sec.Owner, sec.Name).Scan(&created)
	replaced := err == nil
	switch {
	case replaced:
		sec.CreatedAt = fromMS(created)
		_, err = tx.ExecContext(ctx, `UPDATE secrets SET mode = ?, hosts = ?, ciphertext = ?, nonce = ?, updated_at = ?
			WHERE owner_key = ? AND name = ?`, sec.Mode, hosts, sec.Ciphertext, sec.Nonce, unixMS(sec.UpdatedAt), sec.Owner, sec.Name)
	case notFound(err):
		_, err = tx.ExecContext(ctx, `INSERT INTO secrets (owner_key, name, mode, hosts, ciphertext, nonce, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, sec.Owner, sec.Name, sec.Mode, hosts, sec.Ciphertext, sec.Nonce,
			unixMS(sec.CreatedAt), unixMS(sec.UpdatedAt))
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		if isConstraint(err) {
			return Secret{}, false, fmt.Errorf("putting secret %q: %w: %v", sec.Name, sandbox.ErrInvalid, err)
		}
		return Secret{}, false, fmt.Errorf("putting secret %q: %w", sec.Name, err)
	}
	sec.CreatedAt, sec.UpdatedAt = fromMS(unixMS(sec.CreatedAt)), fromMS(unixMS(sec.UpdatedAt))
	return sec, replaced, nil
}

// GetSecret returns owner's secret name with its sealed value, or an error
// wrapping sandbox.ErrNotFound: the same for a name no key has and for one
// only another key has.
func (s *Store) GetSecret(ctx context.Context, owner, name string) (Secret, error) {
	row := s.db.QueryRowContext(ctx, `SELECT name, mode, hosts, ciphertext, nonce, created_at, updated_at
		FROM secrets WHERE owner_key = ? AND name = ?`, owner, name)
	sec, err := scanSecret(row.Scan, true)
	if notFound(err) {
		return Secret{}, fmt.Errorf("secret %q %w", name, sandbox.ErrNotFound)
	}
	if err != nil {
		return Secret{}, fmt.Errorf("reading secret %q: %w", name, err)
	}
	sec.Owner = owner
	return sec, nil
}

// ListSecrets returns owner's secrets by name, without their sealed values.
func (s *Store) ListSecrets(ctx context.Context, owner string) ([]Secret, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, mode, hosts, created_at, updated_at
		FROM secrets WHERE owner_key = ? ORDER BY name`, owner)
	if err != nil {
		return nil, fmt.Errorf("listing secrets: %w", err)
	}
	defer rows.Close()
	var out []Secret
	for rows.Next() {
		sec, err := scanSecret(rows.Scan, false)
		if err != nil {
			return nil, fmt.Errorf("listing secrets: %w", err)
		}
		sec.Owner = owner
		out = append(out, sec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing secrets: %w", err)
	}
	return out, nil
}

// DeleteSecret deletes owner's secret name; it fails with
// sandbox.ErrNotFound when owner has none of that name.
func (s *Store) DeleteSecret(ctx context.Context, owner, name string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM secrets WHERE owner_key = ? AND name = ?`, owner, name)
	if err != nil {
		return fmt.Errorf("deleting secret %q: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("secret %q %w", name, sandbox.ErrNotFound)
	}
	return nil
}

func scanSecret(scan func(...any) error, sealed bool) (Secret, error) {
	var (
		sec              Secret
		hosts            string
		created, updated int64
	)
	dest := []any{&sec.Name, &sec.Mode, &hosts}
	if sealed {
		dest = append(dest, &sec.Ciphertext, &sec.Nonce)
	}
	if err := scan(append(dest, &created, &updated)...); err != nil {
		return Secret{}, err
	}
	if err := json.Unmarshal([]byte(hosts), &sec.Hosts); err != nil {
		return Secret{}, fmt.Errorf("secret %q: hosts %q: %w", sec.Name, hosts, err)
	}
	if len(sec.Hosts) == 0 {
		sec.Hosts = nil
	}
	sec.CreatedAt, sec.UpdatedAt = fromMS(created), fromMS(updated)
	return sec, nil
}

func encodeHosts(hosts []string) (string, error) {
	if hosts == nil {
		hosts = []string{}
	}
	b, err := json.Marshal(hosts)
	return string(b), err
}
