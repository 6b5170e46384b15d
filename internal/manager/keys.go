// This file implements API key authentication against the store's hashes.

package manager

import (
	"context"
	"errors"
	"fmt"

	"sbx/internal/sandbox"
)

// Key is an API key's identity (never its secret).
type Key struct {
	ID   string
	Name string
}

// Authenticate returns the key whose secret is token (compared by hash, in
// constant time), or an error wrapping sandbox.ErrUnauthenticated.
func (m *Manager) Authenticate(ctx context.Context, token string) (Key, error) {
	if token == "" {
		return Key{}, fmt.Errorf("%w: no API key given", sandbox.ErrUnauthenticated)
	}
	k, err := m.store.LookupKey(ctx, token)
	if errors.Is(err, sandbox.ErrNotFound) {
		return Key{}, fmt.Errorf("%w: invalid API key", sandbox.ErrUnauthenticated) // never echo the token
	}
	if err != nil {
		return Key{}, fmt.Errorf("authenticating: %w", err)
	}
	return Key{ID: k.ID, Name: k.Name}, nil
}
