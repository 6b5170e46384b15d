// This file implements the audit_log table (SECURITY.md AP-14): one row per call
// on a sandbox, naming who, what and on which path or process, never contents,
// environment values, stdin or secrets. Rows are pruned by age and count.

package store

import (
	"context"
	"fmt"
	"time"
)

// AuditRecord is one audited call.
type AuditRecord struct {
	ID        int64 // assigned by the store; increases with each record
	At        time.Time
	KeyID     string // the API key that made the call; for an expiry, the owner's
	SandboxID string // empty when no sandbox exists (a refused create)
	Action    string // create, delete, expire, exec_start, exec_end, write_file, …
	Target    string // a path, argv[0] or a process id; never contents
	Outcome   string // "ok" or the error's code (not_found, resource_exhausted, …)
	Detail    string // exit code and reason, signal, byte count, …; never contents
}

// AuditQuery selects audit records. Empty fields select everything.
type AuditQuery struct {
	SandboxID string
	KeyID     string
	Since     time.Time // records at or after Since
	Limit     int       // at most this many, newest first; 0 means 100
}

// AppendAudit stores recs in one transaction.
func (s *Store) AppendAudit(ctx context.Context, recs []AuditRecord) error {
	if len(recs) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("appending %d audit records: %w", len(recs), err)
	}
	defer tx.Rollback()
	stmt := tx.StmtContext(ctx, s.stmtAudit)
	for _, r := range recs {
		if _, err := stmt.ExecContext(ctx, unixMS(r.At), r.KeyID, r.SandboxID, r.Action, r.Target, r.Outcome, r.Detail); err != nil {
			return fmt.Errorf("appending %d audit records: %w", len(recs), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("appending %d audit records: %w", len(recs), err)
	}
	return nil
}

// ListAudit returns the records q selects, newest first.
func (s *Store) ListAudit(ctx context.Context, q AuditQuery) ([]AuditRecord, error) {
	sqlq := `SELECT id, at, key_id, sandbox_id, action, target, outcome, detail FROM audit_log WHERE 1 = 1`
	var args []any
	if q.SandboxID != "" {
		sqlq += ` AND sandbox_id = ?`
		args = append(args, q.SandboxID)
	}
	if q.KeyID != "" {
		sqlq += ` AND key_id = ?`
		args = append(args, q.KeyID)
	}
	if !q.Since.IsZero() {
		sqlq += ` AND at >= ?`
		args = append(args, q.Since.UnixMilli())
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	sqlq += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, sqlq, args...)
	if err != nil {
		return nil, fmt.Errorf("listing audit records: %w", err)
	}
	defer rows.Close()
	out := []AuditRecord{}
	for rows.Next() {
		var (
			r  AuditRecord
			at int64
		)
		if err := rows.Scan(&r.ID, &at, &r.KeyID, &r.SandboxID, &r.Action, &r.Target, &r.Outcome, &r.Detail); err != nil {
			return nil, fmt.Errorf("listing audit records: %w", err)
		}
		r.At = fromMS(at)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing audit records: %w", err)
	}
	return out, nil
}

// PruneAudit deletes the records older than before (none when before is zero)
// and all but the newest keep (none when keep is 0); it returns how many went.
func (s *Store) PruneAudit(ctx context.Context, before time.Time, keep int) (int64, error) {
	var n int64
	if !before.IsZero() {
		res, err := s.db.ExecContext(ctx, `DELETE FROM audit_log WHERE at < ?`, before.UnixMilli())
		if err != nil {
			return n, fmt.Errorf("pruning audit records older than %s: %w", before.UTC().Format(time.RFC3339), err)
		}
		d, _ := res.RowsAffected()
		n += d
	}
	if keep > 0 {
		res, err := s.db.ExecContext(ctx, `DELETE FROM audit_log WHERE id <= (SELECT id FROM audit_log ORDER BY id DESC LIMIT 1 OFFSET ?)`, keep)
		if err != nil {
			return n, fmt.Errorf("pruning audit records beyond the newest %d: %w", keep, err)
		}
		d, _ := res.RowsAffected()
		n += d
	}
	return n, nil
}
