// This file keeps each key to its own sandboxes (SECURITY.md AP-02): a
// sandbox another key created is, to a key that is not the admin key, exactly
// what an unknown id is: 404 sandbox not found, on every route.

package manager

import (
	"context"

	"sbx.dev/sbx/internal/sandbox"
)

// owns reports whether ctx's key may act on a sandbox owned by owner: the
// owner itself, the admin key, and the daemon's own calls (no key).
func owns(ctx context.Context, owner string) bool {
	k, ok := KeyFrom(ctx)
	return !ok || k.Admin || k.ID == owner
}

// authorize fails with the not-found error of op unless ctx's key may act on
// sandbox id. The owner of a live sandbox is known in memory (the limiter's
// count); of any other, the store's record says.
func (m *Manager) authorize(ctx context.Context, op string, id sandbox.ID) error {
	k, ok := KeyFrom(ctx)
	if !ok || k.Admin {
		return nil
	}
	owner, known := m.limits.ownerOf(id)
	if !known {
		sb, err := m.store.GetSandbox(ctx, id)
		if err != nil {
			return nil // the call itself reports the missing sandbox
		}
		owner = sb.OwnerKey
	}
	if owner != k.ID {
		return notFound(op, id)
	}
	return nil
}

// ownerOf returns the key that owns counted sandbox id.
func (l *limiter) ownerOf(id sandbox.ID) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	key, ok := l.owner[id]
	return key, ok
}
