// This file implements what preview URLs need of the manager: a sandbox's
// preview token, the ports its owner made public, and connections to its
// ports (DialPort), each behind the owner check every call has. A preview
// token is not an API key: only the preview proxy checks it.

package manager

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// PreviewSecretBytes is the size of a preview secret (Options.PreviewSecret).
const PreviewSecretBytes = 32

// PortDialTimeout bounds a connect to a sandbox's port: a listener whose
// backlog is full never answers, and a preview must not hang on it.
const PortDialTimeout = 5 * time.Second

// portDialTimeout is PortDialTimeout; tests shorten it.
var portDialTimeout = PortDialTimeout

// previewKey is the secret that signs preview tokens.
type previewKey []byte

func newPreviewKey(secret []byte) previewKey {
	if len(secret) == 0 {
		secret = make([]byte, PreviewSecretBytes)
		rand.Read(secret)
	}
	return previewKey(bytes.Clone(secret))
}

// token is sandbox id's preview token: base64url(HMAC-SHA256(secret,
// "preview\x00" + id)). It needs no storage and is the same across restarts
// of a daemon with the same secret.
func (k previewKey) token(id sandbox.ID) string {
	mac := hmac.New(sha256.New, k)
	mac.Write([]byte("preview\x00"))
	mac.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// PortAccess is how a port of a sandbox may be reached from outside.
type PortAccess struct {
	// Token is the sandbox's preview token (the same for all its ports).
	Token string
	// Public: the port is served without a token.
	Public bool
}

// checkPort refuses a port outside [1, 65535].
func checkPort(port int) error {
	if port < 1 || port > 65535 {
		return sandbox.Invalid("port", "%d is outside [1, 65535]", port)
	}
	return nil
}

// findOwned fails with the not-found error of op unless sandbox id exists,
// is not a warm one, and ctx's key may act on it, as Get does.
func (m *Manager) findOwned(ctx context.Context, op string, id sandbox.ID) error {
	if err := checkID(op, id); err != nil {
		return err
	}
	sb, err := m.store.GetSandbox(ctx, id)
	if errors.Is(err, sandbox.ErrNotFound) || sb.State == sandbox.StateWarm || (err == nil && !owns(ctx, sb.OwnerKey)) {
		return notFound(op, id)
	}
	if err != nil {
		return &sandbox.Error{Op: op, ID: id, Err: err}
	}
	return nil
}

// PortAccess returns the token of sandbox id and whether port is public, for
// ctx's key: a sandbox another key owns is not found.
func (m *Manager) PortAccess(ctx context.Context, id sandbox.ID, port int) (PortAccess, error) {
	const op = "preview_url"
	if err := m.findOwned(ctx, op, id); err != nil {
		return PortAccess{}, err
	}
	if err := checkPort(port); err != nil {
		return PortAccess{}, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	public, err := m.store.PortPublic(ctx, id, port)
	if err != nil {
		return PortAccess{}, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	return PortAccess{Token: m.preview.token(id), Public: public}, nil
}

// SetPortPublic makes port of sandbox id public (served without a token) or
// not, for ctx's key, and returns its access. It is kept in the store, so a
// restarted daemon keeps it, and is audited.
func (m *Manager) SetPortPublic(ctx context.Context, id sandbox.ID, port int, public bool) (_ PortAccess, retErr error) {
	const op = "set_port_public"
	defer func() {
		m.audit(ctx, id, op, strconv.Itoa(port), fmt.Sprintf("public=%v", public), retErr)
	}()
	if err := m.findOwned(ctx, op, id); err != nil {
		return PortAccess{}, err
	}
	if err := checkPort(port); err != nil {
		return PortAccess{}, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	if err := m.store.SetPortPublic(ctx, id, port, public); err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return PortAccess{}, notFound(op, id)
		}
		return PortAccess{}, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	return PortAccess{Token: m.preview.token(id), Public: public}, nil
}

// PreviewTokenValid reports whether token is sandbox id's preview token. It
// answers the same whether or not id exists.
func (m *Manager) PreviewTokenValid(id sandbox.ID, token string) bool {
	return token != "" && hmac.Equal([]byte(token), []byte(m.preview.token(id)))
}

// PortPublic reports whether port of sandbox id is public; false for an
// unknown sandbox, and when the store cannot say (logged).
func (m *Manager) PortPublic(ctx context.Context, id sandbox.ID, port int) bool {
	if checkID("proxy", id) != nil || checkPort(port) != nil {
		return false
	}
	public, err := m.store.PortPublic(ctx, id, port)
	if err != nil {
		m.log.WarnContext(ctx, "reading whether a port is public", logkey.SandboxID, id, logkey.Err, err)
		return false
	}
	return public
}

// PublicPorts returns the public ports of the sandboxes in ids (every
// sandbox when none is given), each list sorted; a sandbox without any is
// absent. It checks no key: call it for records Get or List returned.
func (m *Manager) PublicPorts(ctx context.Context, ids ...sandbox.ID) (map[sandbox.ID][]int, error) {
	ports, err := m.store.PublicPorts(ctx, ids...)
	if err != nil {
		return nil, &sandbox.Error{Op: "public_ports", Err: err}
	}
	return ports, nil
}

// PortError is a port of a running sandbox the daemon could not use: nothing
// listens there, it did not accept in time, or it answered with no valid
// HTTP response. It is sandbox.ErrTimeout when Timeout is set, else
// sandbox.ErrUnavailable; the API answers 504 or 502.
type PortError struct {
	Port int
	// Msg says what went wrong, naming the port.
	Msg     string
	Timeout bool
	// Err is the cause, if any.
	Err error
}

func (e *PortError) Error() string { return e.Msg }

func (e *PortError) Unwrap() []error {
	class := sandbox.ErrUnavailable
	if e.Timeout {
		class = sandbox.ErrTimeout
	}
	if e.Err == nil {
		return []error{class}
	}
	return []error{class, e.Err}
}

// DialPort opens a TCP connection to 127.0.0.1:port inside running sandbox
// id, for ctx's key; it is what the preview proxy forwards through. The
// connect is bounded by PortDialTimeout. Nothing listening, or no answer in
// time, is a *PortError; a port outside [1, 65535] is ErrInvalid; a backend
// that cannot reach ports is errors.ErrUnsupported.
func (m *Manager) DialPort(ctx context.Context, id sandbox.ID, port int) (net.Conn, error) {
	const op = "dial_port"
	if _, err := m.client(ctx, op, id); err != nil { // shape, owner, running, reachable
		return nil, err
	}
	if err := checkPort(port); err != nil {
		return nil, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	m.mu.Lock()
	l := m.live[id]
	m.mu.Unlock()
	if l == nil { // deleted meanwhile
		return nil, notFound(op, id)
	}
	pd, ok := m.driver(l.backend).(backend.PortDialer)
	if !ok {
		return nil, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("%w: backend %s cannot reach a sandbox's ports", errors.ErrUnsupported, l.backend)}
	}
	dctx, cancel := context.WithTimeout(ctx, portDialTimeout)
	defer cancel()
	c, err := pd.DialPort(dctx, id, port)
	switch {
	case err == nil:
		return c, nil
	case refused(err):
		return nil, &sandbox.Error{Op: op, ID: id, Err: &PortError{Port: port, Err: err,
			Msg: fmt.Sprintf("sandbox has nothing listening on port %d", port)}}
	case ctx.Err() == nil && dctx.Err() != nil:
		return nil, &sandbox.Error{Op: op, ID: id, Err: &PortError{Port: port, Timeout: true, Err: err,
			Msg: fmt.Sprintf("port %d did not accept a connection within %s", port, portDialTimeout)}}
	case errors.Is(err, sandbox.ErrNotFound): // it ended meanwhile
		return nil, notFound(op, id)
	}
	return nil, sandbox.Wrap(op, id, err)
}

// refused reports whether err says nothing could be reached at the port.
func refused(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ENETUNREACH, syscall.EHOSTUNREACH} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// AuditProxied records one request the preview proxy forwarded to sandbox
// id, under ctx's key (none for a token or a public port: detail says which):
// target is the method, port and path, never the query or a body.
func (m *Manager) AuditProxied(ctx context.Context, id sandbox.ID, target, detail string, err error) {
	m.audit(ctx, id, "proxy", target, detail, err)
}
