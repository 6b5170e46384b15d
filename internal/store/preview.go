// This file implements the preview_public_ports table: the ports of a sandbox
// its owner made public, served by preview URLs without a token. A port's row
// goes when its sandbox's does.

package store

import (
	"context"
	"fmt"
	"slices"

	"sbx.dev/sbx/internal/sandbox"
)

// SetPortPublic makes port of sandbox id public or not; setting what is
// already set changes nothing. It fails with sandbox.ErrNotFound when there
// is no record of id.
func (s *Store) SetPortPublic(ctx context.Context, id sandbox.ID, port int, public bool) error {
	var err error
	if public {
		_, err = s.db.ExecContext(ctx, `INSERT INTO preview_public_ports (sandbox_id, port) VALUES (?, ?) ON CONFLICT DO NOTHING`, id, port)
	} else {
		_, err = s.db.ExecContext(ctx, `DELETE FROM preview_public_ports WHERE sandbox_id = ? AND port = ?`, id, port)
	}
	if isConstraint(err) {
		if _, gerr := s.GetSandbox(ctx, id); gerr != nil {
			return gerr
		}
	}
	if err != nil {
		return fmt.Errorf("setting port %d of sandbox %s public=%v: %w", port, id, public, err)
	}
	if !public {
		// Unlike an insert, a delete does not tell a missing sandbox.
		if _, err := s.GetSandbox(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// PortPublic reports whether port of sandbox id is public.
func (s *Store) PortPublic(ctx context.Context, id sandbox.ID, port int) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM preview_public_ports WHERE sandbox_id = ? AND port = ?`, id, port).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("reading port %d of sandbox %s: %w", port, id, err)
	}
	return n > 0, nil
}

// PublicPorts returns the public ports of the sandboxes in ids, each list
// sorted; a sandbox without any is absent. No ids means every sandbox.
func (s *Store) PublicPorts(ctx context.Context, ids ...sandbox.ID) (map[sandbox.ID][]int, error) {
	q := `SELECT sandbox_id, port FROM preview_public_ports`
	var args []any
	if len(ids) > 0 {
		q += ` WHERE sandbox_id IN (?` + repeat(",?", len(ids)-1) + `)`
		for _, id := range ids {
			args = append(args, id)
		}
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY sandbox_id, port`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing public ports: %w", err)
	}
	defer rows.Close()
	out := map[sandbox.ID][]int{}
	for rows.Next() {
		var id sandbox.ID
		var port int
		if err := rows.Scan(&id, &port); err != nil {
			return nil, fmt.Errorf("listing public ports: %w", err)
		}
		out[id] = append(out[id], port)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing public ports: %w", err)
	}
	for id := range out {
		slices.Sort(out[id])
	}
	return out, nil
}
