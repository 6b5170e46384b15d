// Package store keeps sandbox records, API keys, the audit log, idempotency
// records and sealed secrets in an embedded SQLite file (modernc.org/sqlite,
// pure Go), with versioned migrations. It keeps records only: it knows nothing
// of drivers, the manager or the servers, and never holds a secret in clear.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// Store is safe for concurrent use.
type Store struct {
	db *sql.DB
	// The statements of every sandbox's life, prepared once: SQLite parses
	// and plans a statement each time it is prepared.
	stmtInsert, stmtSelect, stmtUpdate, stmtSwap, stmtState, stmtDelete, stmtAudit *sql.Stmt
}

// Open opens (creating when missing) the database file at path and migrates it to
// the current schema. The file and its WAL are made mode 0600 (the daemon also
// keeps them in a 0700 directory).
func Open(ctx context.Context, path string) (*Store, error) {
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("opening store %s: path must not contain '?' or '#'", path)
	}
	q := "_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	db, err := sql.Open("sqlite", path+"?"+q)
	if err != nil {
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	// One connection: writes serialize in SQLite anyway, and a single connection
	// rules out SQLITE_BUSY between our own connections. Reads are short.
	db.SetMaxOpenConns(1)
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrating store %s: %w", path, err)
	}
	if err := s.prepare(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening store %s: %w", path, err)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(f, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			db.Close()
			return nil, fmt.Errorf("securing store file: %w", err)
		}
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// prepare prepares the statements of a sandbox's life.
func (s *Store) prepare(ctx context.Context) error {
	for _, p := range []struct {
		stmt **sql.Stmt
		q    string
	}{
		{&s.stmtInsert, `INSERT INTO sandboxes (` + sandboxColumns + `, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&s.stmtSelect, `SELECT ` + sandboxColumns + ` FROM sandboxes WHERE id = ?`},
		{&s.stmtUpdate, sandboxUpdate + ` WHERE id = ?`},
		{&s.stmtSwap, sandboxUpdate + ` WHERE id = ? AND state = ?`},
		{&s.stmtState, `UPDATE sandboxes SET state = ?, updated_at = ? WHERE id = ? RETURNING backend, owner_key`},
		{&s.stmtDelete, `DELETE FROM sandboxes WHERE id = ?`},
		{&s.stmtAudit, `INSERT INTO audit_log (at, key_id, sandbox_id, action, target, outcome, detail) VALUES (?, ?, ?, ?, ?, ?, ?)`},
	} {
		stmt, err := s.db.PrepareContext(ctx, p.q)
		if err != nil {
			return fmt.Errorf("preparing %.40q: %w", p.q, err)
		}
		*p.stmt = stmt
	}
	return nil
}

// migrations are the ordered schema steps; step i brings user_version to i+1.
// Never edit a released step: append a new one.
var migrations = []string{
	`CREATE TABLE sandboxes (
		id         TEXT PRIMARY KEY,
		state      TEXT NOT NULL,
		backend    TEXT NOT NULL,
		spec       TEXT NOT NULL,
		isolation  TEXT NOT NULL DEFAULT '{}',
		saved      BLOB,
		labels     TEXT NOT NULL DEFAULT '{}',
		created_at INTEGER NOT NULL,
		expires_at INTEGER NOT NULL DEFAULT 0,
		error      TEXT NOT NULL DEFAULT '',
		updated_at INTEGER NOT NULL
	);
	CREATE INDEX sandboxes_state ON sandboxes(state);
	CREATE TABLE api_keys (
		id         TEXT PRIMARY KEY,
		name       TEXT NOT NULL,
		hash       TEXT NOT NULL UNIQUE,
		created_at INTEGER NOT NULL,
		revoked_at INTEGER
	);`,
	// 2: the API key that created each sandbox (SECURITY.md AP-11); rows from
	// before it have none.
	`ALTER TABLE sandboxes ADD COLUMN owner_key TEXT NOT NULL DEFAULT '';`,
	// 3: the audit log (AP-14): who did what to which sandbox, never contents.
	`CREATE TABLE audit_log (
		id         INTEGER PRIMARY KEY AUTOINCREMENT,
		at         INTEGER NOT NULL,
		key_id     TEXT NOT NULL,
		sandbox_id TEXT NOT NULL,
		action     TEXT NOT NULL,
		target     TEXT NOT NULL,
		outcome    TEXT NOT NULL,
		detail     TEXT NOT NULL
	);
	CREATE INDEX audit_log_at ON audit_log(at);
	CREATE INDEX audit_log_sandbox ON audit_log(sandbox_id, id);
	CREATE INDEX audit_log_key ON audit_log(key_id, id);`,
	// 4: idempotent creates (RL-08): a caller's key names one sandbox.
	`CREATE TABLE idempotency (
		key_id     TEXT NOT NULL,
		idem_key   TEXT NOT NULL,
		body_hash  TEXT NOT NULL,
		sandbox_id TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		PRIMARY KEY (key_id, idem_key)
	);
	CREATE INDEX idempotency_created ON idempotency(created_at);`,
	// 5: what each key may call (a JSON array of capabilities); '' is every
	// capability, as keys had before.
	`ALTER TABLE api_keys ADD COLUMN capabilities TEXT NOT NULL DEFAULT '';`,
	// preview ports: the ports of each sandbox its owner made public (served
	// without a preview token); they go with the sandbox's row.
	`CREATE TABLE preview_public_ports (
		sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
		port       INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
		PRIMARY KEY (sandbox_id, port)
	);`,
	// secrets: each API key's secrets, sealed (the value never in clear);
	// hosts is a JSON array of the names a proxy-mode value may go to.
	`CREATE TABLE secrets (
		owner_key  TEXT NOT NULL,
		name       TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 128 AND name NOT GLOB '*[^A-Za-z0-9._-]*'),
		mode       TEXT NOT NULL CHECK (mode IN ('env', 'proxy')),
		hosts      TEXT NOT NULL DEFAULT '[]',
		ciphertext BLOB NOT NULL,
		nonce      BLOB NOT NULL,
		created_at INTEGER NOT NULL,
		updated_at INTEGER NOT NULL,
		PRIMARY KEY (owner_key, name)
	);`,
}

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("reading user_version: %w", err)
	}
	if v > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this sbx knows (%d)", v, len(migrations))
	}
	for i := v; i < len(migrations); i++ {
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			return fmt.Errorf("applying migration %d: %w", i+1, err)
		}
		// PRAGMA takes no bound parameters; i is ours.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", i+1)); err != nil {
			return fmt.Errorf("setting user_version %d: %w", i+1, err)
		}
	}
	return tx.Commit()
}

// SchemaVersion returns the schema version of the open database.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

func unixMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

func isConstraint(err error) bool {
	return err != nil && strings.Contains(err.Error(), "constraint failed")
}

var errNoRow = sql.ErrNoRows

func notFound(err error) bool { return errors.Is(err, errNoRow) }
