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
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"sbx.dev/sbx/internal/sandbox"
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
	// Capabilities the key holds; nil means every capability.
	Capabilities []string
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
	return s.CreateKeyWith(ctx, name, nil)
}

// CreateKeyWith is CreateKey for a key holding only caps (nil: every capability).
func (s *Store) CreateKeyWith(ctx context.Context, name string, caps []string) (string, Key, error) {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand panics instead)
	secret := KeyPrefix + secretEncoding.EncodeToString(b[:])
	var idb [8]byte
	rand.Read(idb[:])
	k := Key{ID: "key_" + hex.EncodeToString(idb[:]), Name: name, CreatedAt: time.UnixMilli(time.Now().UnixMilli()),
		Capabilities: caps}
	_, err := s.db.ExecContext(ctx, `INSERT INTO api_keys (id, name, hash, created_at, capabilities) VALUES (?, ?, ?, ?, ?)`,
		k.ID, k.Name, HashSecret(secret), unixMS(k.CreatedAt), encodeCaps(caps))
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
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, hash, created_at, capabilities FROM api_keys WHERE revoked_at IS NULL`)
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
			caps    string
		)
		if err := rows.Scan(&k.ID, &k.Name, &hash, &created, &caps); err != nil {
			return Key{}, fmt.Errorf("looking up key: %w", err)
		}
		k.CreatedAt = fromMS(created)
		if k.Capabilities, err = decodeCaps(caps); err != nil {
			return Key{}, fmt.Errorf("looking up key: key %s: %w", k.ID, err)
		}
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
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, created_at, revoked_at, capabilities FROM api_keys ORDER BY created_at, rowid`)
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
			caps    string
		)
		if err := rows.Scan(&k.ID, &k.Name, &created, &revoked, &caps); err != nil {
			return nil, fmt.Errorf("listing keys: %w", err)
		}
		if k.Capabilities, err = decodeCaps(caps); err != nil {
			return nil, fmt.Errorf("listing keys: key %s: %w", k.ID, err)
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

// encodeCaps is the column form of caps: ” for nil (every capability), else
// a JSON array.
func encodeCaps(caps []string) string {
	if caps == nil {
		return ""
	}
	b, _ := json.Marshal(caps) // strings only: never fails
	return string(b)
}

func decodeCaps(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	caps := []string{}
	if err := json.Unmarshal([]byte(s), &caps); err != nil {
		return nil, fmt.Errorf("capabilities %q: %w", s, err)
	}
	return caps, nil
}
