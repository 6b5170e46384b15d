// This file implements API key authentication against the store's hashes, with
// a short-lived cache of keys already checked: every API call authenticates, and
// a store query per call would cost more than the call's own work.

package manager

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/store"
)

// keyCacheTTL bounds how long a key found valid is trusted without the store.
// Keys are revoked today only at daemon start, before anything is cached; a
// revocation while serving must also empty the cache.
const keyCacheTTL = 10 * time.Second

// keyCacheMax bounds the cache; it is cleared when full. Only valid keys enter
// it, so invalid tokens cannot grow it.
const keyCacheMax = 1024

// keyCache maps the SHA-256 of a secret to its key. Holding hashes, it never
// holds a secret.
type keyCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]cachedKey
}

type cachedKey struct {
	key     Key
	expires time.Time
}

func (c *keyCache) get(h [sha256.Size]byte, now time.Time) (Key, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[h]
	if !ok || now.After(e.expires) {
		return Key{}, false
	}
	return e.key, true
}

func (c *keyCache) put(h [sha256.Size]byte, k Key, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= keyCacheMax {
		c.m = make(map[[sha256.Size]byte]cachedKey)
	}
	c.m[h] = cachedKey{key: k, expires: now.Add(keyCacheTTL)}
}

// Key is an API key's identity (never its secret).
type Key struct {
	ID   string
	Name string
	// Admin is set for the daemon's admin key (the secret in admin.key): it
	// reads every key's audit records. Limits apply to it as to any key.
	Admin bool
	// Capabilities the key holds; nil means every capability (Can).
	Capabilities []string
}

// AllCapabilities, in a key's capabilities, grants every capability.
const AllCapabilities = "*"

// Can reports whether the key holds capability c.
func (k Key) Can(c string) bool {
	return k.Capabilities == nil || slices.Contains(k.Capabilities, c) || slices.Contains(k.Capabilities, AllCapabilities)
}

type keyCtx struct{}

// WithKey returns ctx carrying the API key that made the request; the manager
// counts limits, records owners and audits calls under it. The API sets it once
// it has authenticated the request.
func WithKey(ctx context.Context, k Key) context.Context {
	return context.WithValue(ctx, keyCtx{}, k)
}

// KeyFrom returns the API key WithKey put in ctx.
func KeyFrom(ctx context.Context) (Key, bool) {
	k, ok := ctx.Value(keyCtx{}).(Key)
	return k, ok
}

// keyID is the id of ctx's key; empty for calls that carry none (the daemon's
// own, and in-process callers).
func keyID(ctx context.Context) string {
	k, _ := KeyFrom(ctx)
	return k.ID
}

// Authenticate returns the key whose secret is token (compared by hash, in
// constant time), or an error wrapping sandbox.ErrUnauthenticated.
func (m *Manager) Authenticate(ctx context.Context, token string) (Key, error) {
	if token == "" {
		return Key{}, fmt.Errorf("%w: no API key given", sandbox.ErrUnauthenticated)
	}
	h := sha256.Sum256([]byte(token))
	now := time.Now() // the cache's own clock, not the injected one
	if k, ok := m.keys.get(h, now); ok {
		return k, nil
	}
	k, err := m.store.LookupKey(ctx, token)
	if errors.Is(err, sandbox.ErrNotFound) {
		return Key{}, fmt.Errorf("%w: invalid API key", sandbox.ErrUnauthenticated) // never echo the token
	}
	if err != nil {
		return Key{}, fmt.Errorf("authenticating: %w", err)
	}
	key := Key{ID: k.ID, Name: k.Name, Admin: k.Name == store.AdminKeyName, Capabilities: k.Capabilities}
	m.keys.put(h, key, now)
	return key, nil
}

// KeyRecord is an API key as key management shows it (never its secret).
type KeyRecord = store.Key

// CreateKey makes an API key named name holding caps (nil: every
// capability) and returns its secret, shown this once. Only the admin key
// manages keys.
func (m *Manager) CreateKey(ctx context.Context, name string, caps []string) (string, KeyRecord, error) {
	const op = "create_key"
	if err := adminOnly(ctx, op); err != nil {
		return "", KeyRecord{}, err
	}
	if name == "" || len(name) > 64 || name == store.AdminKeyName {
		return "", KeyRecord{}, &sandbox.Error{Op: op, Err: sandbox.Invalid("name", "%q must be 1–64 characters and not %q", name, store.AdminKeyName)}
	}
	secret, k, err := m.store.CreateKeyWith(ctx, name, caps)
	if err != nil {
		return "", KeyRecord{}, &sandbox.Error{Op: op, Err: err}
	}
	m.audit(ctx, "", op, k.ID, "name "+clip(name, 64), nil)
	return secret, k, nil
}

// Keys lists every API key, revoked ones included.
func (m *Manager) Keys(ctx context.Context) ([]KeyRecord, error) {
	const op = "list_keys"
	if err := adminOnly(ctx, op); err != nil {
		return nil, err
	}
	ks, err := m.store.ListKeys(ctx)
	if err != nil {
		return nil, &sandbox.Error{Op: op, Err: err}
	}
	return ks, nil
}

// RevokeKey revokes key id at once: the cache of checked keys is emptied, so
// no call authenticates with it after this returns.
func (m *Manager) RevokeKey(ctx context.Context, id string) error {
	const op = "revoke_key"
	if err := adminOnly(ctx, op); err != nil {
		return err
	}
	if k, _ := KeyFrom(ctx); k.ID == id {
		return &sandbox.Error{Op: op, Err: sandbox.Invalid("id", "%s is the admin key itself", id)}
	}
	err := m.store.RevokeKey(ctx, id)
	m.keys.clear()
	m.owners.clear()
	m.audit(ctx, "", op, id, "", err)
	if err != nil {
		return &sandbox.Error{Op: op, Err: err}
	}
	return nil
}

func (c *keyCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = nil
}

// adminOnly refuses op to every key but the admin key.
func adminOnly(ctx context.Context, op string) error {
	if k, ok := KeyFrom(ctx); ok && !k.Admin {
		return &sandbox.Error{Op: op, Err: fmt.Errorf("%w: only the admin key manages API keys", sandbox.ErrDenied)}
	}
	return nil
}
