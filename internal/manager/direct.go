// This file implements what a data plane that reaches a sandbox's agent
// directly needs of the manager (the E2B-compatible server forwards envd's
// routes to the agent): a per-sandbox access token that needs no storage,
// the key that owns a sandbox (whose capabilities and limits then apply), an
// HTTP client onto the agent, and the admission and audit of a process start.

package manager

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/store"
)

// accessToken is sandbox id's access token: hex(HMAC-SHA256(secret,
// "access\x00" + id)), keyed like preview tokens but never equal to one. It
// is the same across restarts of a daemon with the same secret.
func (k previewKey) accessToken(id sandbox.ID) string {
	mac := hmac.New(sha256.New, k)
	mac.Write([]byte("access\x00"))
	mac.Write([]byte(id))
	return hex.EncodeToString(mac.Sum(nil))
}

// AccessToken returns the access token of sandbox id, for ctx's key: a
// sandbox another key owns is not found. The token lets its holder reach the
// sandbox's agent through the data plane, as the owner.
func (m *Manager) AccessToken(ctx context.Context, id sandbox.ID) (string, error) {
	if err := m.findOwned(ctx, "access_token", id); err != nil {
		return "", err
	}
	return m.preview.accessToken(id), nil
}

// AccessTokenValid reports whether token is sandbox id's access token, in
// constant time. It touches neither the sandbox nor the store.
func (m *Manager) AccessTokenValid(id sandbox.ID, token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(m.preview.accessToken(id))) == 1
}

// ownerCacheTTL bounds how long an owner's key is trusted without the store;
// a revocation empties the cache at once.
const ownerCacheTTL = 10 * time.Second

// ownerCache maps key ids to their records, for OwnerKey.
type ownerCache struct {
	mu sync.Mutex
	m  map[string]ownerEntry
}

type ownerEntry struct {
	key     Key
	expires time.Time
}

func (c *ownerCache) clear() {
	c.mu.Lock()
	c.m = nil
	c.mu.Unlock()
}

// OwnerKey returns the key that owns sandbox id, for a caller authenticated
// by the sandbox's access token rather than an API key: its capabilities
// and limits then apply to what the caller does. A sandbox that does not
// exist, is not running or is a warm one is not found; a revoked owner is
// ErrUnauthenticated.
func (m *Manager) OwnerKey(ctx context.Context, id sandbox.ID) (Key, error) {
	const op = "lookup"
	if err := checkID(op, id); err != nil {
		return Key{}, err
	}
	owner, known := m.limits.ownerOf(id)
	if !known {
		sb, err := m.store.GetSandbox(ctx, id)
		if err != nil || sb.State != sandbox.StateRunning {
			return Key{}, notFound(op, id)
		}
		owner = sb.OwnerKey
	}
	now := time.Now()
	m.owners.mu.Lock()
	e, ok := m.owners.m[owner]
	m.owners.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.key, nil
	}
	ks, err := m.store.ListKeys(ctx)
	if err != nil {
		return Key{}, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	for _, k := range ks {
		if k.ID != owner {
			continue
		}
		if !k.RevokedAt.IsZero() {
			break
		}
		key := Key{ID: k.ID, Name: k.Name, Admin: k.Name == store.AdminKeyName, Capabilities: k.Capabilities}
		m.owners.mu.Lock()
		if m.owners.m == nil || len(m.owners.m) >= keyCacheMax {
			m.owners.m = make(map[string]ownerEntry)
		}
		m.owners.m[owner] = ownerEntry{key: key, expires: now.Add(ownerCacheTTL)}
		m.owners.mu.Unlock()
		return key, nil
	}
	return Key{}, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("%w: the API key that created the sandbox was revoked", sandbox.ErrUnauthenticated)}
}

// AgentHTTP returns an HTTP client whose requests reach running sandbox id's
// agent (any host: the URL's path and query are what the agent sees), for
// ctx's key. Every request ends when the agent is declared lost.
func (m *Manager) AgentHTTP(ctx context.Context, id sandbox.ID) (*http.Client, error) {
	c, err := m.client(ctx, "forward", id)
	if err != nil {
		return nil, err
	}
	return c.HTTP(), nil
}

// AdmitDirectStart takes a token of ctx's key's exec rate for a process
// that a data plane starts in sandbox id by calling its agent directly, and
// audits the start as Exec does (argv0 only: arguments may hold secrets).
// done, called with the start's outcome, audits its failure; a nil error
// return means the start may go ahead.
func (m *Manager) AdmitDirectStart(ctx context.Context, id sandbox.ID, argv0 string) (done func(error), err error) {
	if err := m.limits.allowExec(keyID(ctx), m.now()); err != nil {
		err = &sandbox.Error{Op: "exec", ID: id, Err: err}
		m.audit(ctx, id, "exec_start", argv0, "direct", err)
		return nil, err
	}
	return func(err error) {
		if err != nil && errors.Is(err, context.Canceled) {
			err = nil // the caller went away after the start: not the start's failure
		}
		m.audit(ctx, id, "exec_start", argv0, "direct", err)
	}, nil
}
