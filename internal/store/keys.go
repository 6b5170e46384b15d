// This file implements the api_keys table: only a SHA-256 hash of each secret is
// stored, and lookups compare hashes in constant time (SECURITY.md AP-06).

package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"sbx/internal/sandbox"
)

// KeyPrefix starts every API key secret.
const KeyPrefix = "sbx_"

// AdminKeyName names the daemon's admin key, whose secret is in the data dir's
// admin.key: it may read every key's audit records.
const AdminKeyName = "admin"

// Key is an API key's record; it never holds the secret.
type Key struct {
	ID        string
	Name      string
	CreatedAt time.Time
	RevokedAt time.Time // zero while the key is valid
}

var secretEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// HashSecret returns the hex SHA-256 of secret, the form the store keeps.
func HashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// CreateKey makes a key named name and returns its secret, shown this once:
// "sbx_" and 32 random bytes in lower-case base32. Only its hash is stored.
func (s *Store) CreateKey(ctx context.Context, name string) (string, Key, error) {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand panics instead)
	secret := KeyPrefix + secretEncoding.EncodeToString(b[:])
	var idb [8]byte
	rand.Read(idb[:])
	k := Key{ID: "key_" + hex.EncodeToString(idb[:]), Name: name, CreatedAt: time.UnixMilli(time.Now().UnixMilli())}
	_, err := s.db.ExecContext(ctx, `INSERT INTO api_keys (id, name, hash, created_at) VALUES (?, ?, ?, ?)`,
		k.ID, k.Name, HashSecret(secret), unixMS(k.CreatedAt))
	if err != nil {
		return "", Key{}, fmt.Errorf("inserting key %s: %w", name, err)
	}
	return secret, k, nil
}

// LookupKey returns the valid (unrevoked) key whose secret is secret, or an error
// wrapping sandbox.ErrNotFound. Every valid key's hash is compared, each in
// constant time, so the answer's timing says nothing about near misses.
func (s *Store) LookupKey(ctx context.Context, secret string) (Key, error) {
	want := HashSecret(secret)
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, hash, created_at FROM api_keys WHERE revoked_at IS NULL`)
	if err != nil {
		return Key{}, fmt.Errorf("looking up key: %w", err)
	}
	defer rows.Close()
	var (
		found Key
		ok    int
	)
	for rows.Next() {
		var (
			k       Key
			hash    string
			created int64
		)
		if err := rows.Scan(&k.ID, &k.Name, &hash, &created); err != nil {
			return Key{}, fmt.Errorf("looking up key: %w", err)
		}
		k.CreatedAt = fromMS(created)
		if subtle.ConstantTimeCompare([]byte(hash), []byte(want)) == 1 {
			found, ok = k, 1
		}
	}
	if err := rows.Err(); err != nil {
		return Key{}, fmt.Errorf("looking up key: %w", err)
	}
	if ok == 0 || !strings.HasPrefix(secret, KeyPrefix) {
		return Key{}, fmt.Errorf("key %w", sandbox.ErrNotFound)
	}
	return found, nil
}

// ListKeys returns every key, revoked ones included, oldest first.
func (s *Store) ListKeys(ctx context.Context) ([]Key, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, created_at, revoked_at FROM api_keys ORDER BY created_at, rowid`)
	if err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		var (
			k       Key
			created int64
			revoked sql.NullInt64
		)
		if err := rows.Scan(&k.ID, &k.Name, &created, &revoked); err != nil {
			return nil, fmt.Errorf("listing keys: %w", err)
		}
		k.CreatedAt = fromMS(created)
		if revoked.Valid {
			k.RevokedAt = fromMS(revoked.Int64)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

// RevokeKey marks key id revoked; it fails with sandbox.ErrNotFound when no valid
// key has that id.
func (s *Store) RevokeKey(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`,
		time.Now().UnixMilli(), id)
	if err != nil {
		return fmt.Errorf("revoking key %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("key %s %w", id, sandbox.ErrNotFound)
	}
	return nil
}
