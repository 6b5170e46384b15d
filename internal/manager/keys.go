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

	"sbx/internal/sandbox"
	"sbx/internal/store"
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
