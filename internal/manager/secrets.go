// This file implements the secret store (seed 001): each API key's secrets,
// sealed at rest (package secrets) and seen, used and deleted by that key
// alone, and their use by create, exec and sandbox.exec. An env-mode secret's
// value goes into the process's environment; a proxy-mode secret's process
// sees a placeholder, which the egress proxy (ProxySecrets) swaps for the
// value in requests to the secret's hosts. A value is never logged, audited,
// put in an error or returned.

package manager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/network/rules"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/secrets"
	"sbx.dev/sbx/internal/store"
)

// ProxySecrets is the egress proxy's side of proxy-mode secrets (network.Service implements it).
type ProxySecrets interface {
	// Placeholder registers value for sandbox id's outbound requests to hosts and returns the
	// string the sandbox sees in its place (unique per sandbox and secret, unguessable).
	Placeholder(id sandbox.ID, secret string, value []byte, hosts []string) (string, error)
	// Restore registers value again under a placeholder Placeholder gave
	// sandbox id before a daemon restart.
	Restore(id sandbox.ID, placeholder, secret string, value []byte, hosts []string) error
	// ForgetSecrets drops what was registered for sandbox id.
	ForgetSecrets(id sandbox.ID)
}

// The modes of a secret.
const (
	// SecretEnv puts the value in the process's environment, where
	// everything in the sandbox can read it.
	SecretEnv = secrets.ModeEnv
	// SecretProxy puts a placeholder there; the egress proxy sends the value
	// in its place to the secret's hosts only.
	SecretProxy = secrets.ModeProxy
)

// MaxSecretHosts bounds a proxy-mode secret's hosts.
const MaxSecretHosts = 64

// SecretInfo is a secret as its owner sees it: never its value.
type SecretInfo struct {
	Name string
	Mode string
	// Hosts are the names (example.com) and wildcards (*.example.com) a
	// proxy-mode value may be sent to; none in env mode.
	Hosts     []string
	CreatedAt time.Time
	UpdatedAt time.Time
}

func secretInfo(s store.Secret) SecretInfo {
	return SecretInfo{Name: s.Name, Mode: s.Mode, Hosts: s.Hosts, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
}

// errNoSecretStore answers every secret call of a manager without a key.
var errNoSecretStore = fmt.Errorf("%w: this daemon keeps no secrets (it has no secrets key)", sandbox.ErrUnavailable)

// SetSecret makes ctx's key's secret name hold value in mode ("" is env),
// to be sent to hosts in proxy mode, replacing a secret of that name (replaced
// says so). Errors name the field: name, value, mode, hosts. The value is
// sealed before it reaches the store and is never in an error.
func (m *Manager) SetSecret(ctx context.Context, name string, value []byte, mode string, hosts []string) (_ SecretInfo, replaced bool, retErr error) {
	const op = "set_secret"
	if mode == "" {
		mode = SecretEnv
	}
	defer func() {
		detail := "mode=" + clip(mode, 16)
		if len(hosts) > 0 {
			detail += " hosts=" + strings.Join(hosts, ",")
		}
		if replaced {
			detail += " replaced"
		}
		m.audit(ctx, "", op, clip(name, secrets.MaxNameBytes), detail, retErr)
	}()
	if m.box == nil {
		return SecretInfo{}, false, &sandbox.Error{Op: op, Err: errNoSecretStore}
	}
	var errs []error
	if err := secrets.CheckName(name); err != nil {
		errs = append(errs, sandbox.Invalid("name", "%v", err))
	}
	if err := secrets.CheckMode(mode); err != nil {
		errs = append(errs, sandbox.Invalid("mode", "%v", err))
	} else if err := secrets.CheckValue(mode, value); err != nil {
		errs = append(errs, sandbox.Invalid("value", "%v", err))
	}
	norm, err := secretHosts(mode, hosts)
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return SecretInfo{}, false, &sandbox.Error{Op: op, Err: err}
	}
	hosts = norm
	owner := keyID(ctx)
	ct, nonce, err := m.box.Seal(owner, name, value)
	if err != nil {
		return SecretInfo{}, false, &sandbox.Error{Op: op, Err: err}
	}
	now := m.now()
	rec, replaced, err := m.store.PutSecret(ctx, store.Secret{Owner: owner, Name: name, Mode: mode, Hosts: hosts,
		Ciphertext: ct, Nonce: nonce, CreatedAt: now, UpdatedAt: now})
	if err != nil {
		return SecretInfo{}, false, &sandbox.Error{Op: op, Err: err}
	}
	return secretInfo(rec), replaced, nil
}

// secretHosts checks and normalises a secret's hosts: in proxy mode one or
// more names or wildcards, as the network lists spell them (no addresses:
// the proxy verifies the host's certificate by name); in env mode none.
func secretHosts(mode string, hosts []string) ([]string, error) {
	switch {
	case mode == SecretEnv && len(hosts) > 0:
		return nil, sandbox.Invalid("hosts", "env mode takes no hosts: its value is in the environment, from where anything in the sandbox may send it anywhere")
	case mode == SecretProxy && len(hosts) == 0:
		return nil, sandbox.Invalid("hosts", "proxy mode needs at least one host")
	case len(hosts) > MaxSecretHosts:
		return nil, sandbox.Invalid("hosts", "%d hosts, at most %d", len(hosts), MaxSecretHosts)
	}
	var (
		out  []string
		errs []error
	)
	for i, h := range hosts {
		field := fmt.Sprintf("hosts[%d]", i)
		set, err := rules.Compile(rules.Allowlist, []string{h}, nil)
		if err != nil {
			var re *rules.Error
			if errors.As(err, &re) {
				err = sandbox.Invalid(field, "%s", re.Reason)
			}
			errs = append(errs, err)
			continue
		}
		allow, _ := set.Lists()
		if len(allow) != 1 || strings.Contains(allow[0], "/") {
			errs = append(errs, sandbox.Invalid(field, "%q is an address; a proxy-mode secret goes to names (example.com, *.example.com), whose certificates the proxy verifies", clip(h, 80)))
			continue
		}
		if !slices.Contains(out, allow[0]) {
			out = append(out, allow[0])
		}
	}
	return out, errors.Join(errs...)
}

// Secrets lists ctx's key's secrets by name, without values.
func (m *Manager) Secrets(ctx context.Context) ([]SecretInfo, error) {
	const op = "list_secrets"
	if m.box == nil {
		return nil, &sandbox.Error{Op: op, Err: errNoSecretStore}
	}
	recs, err := m.store.ListSecrets(ctx, keyID(ctx))
	if err != nil {
		return nil, &sandbox.Error{Op: op, Err: err}
	}
	out := make([]SecretInfo, 0, len(recs))
	for _, r := range recs {
		out = append(out, secretInfo(r))
	}
	return out, nil
}

// Secret returns ctx's key's secret name, without its value. Another key's
// secret of that name is not found, as an unknown name is.
func (m *Manager) Secret(ctx context.Context, name string) (SecretInfo, error) {
	const op = "get_secret"
	if m.box == nil {
		return SecretInfo{}, &sandbox.Error{Op: op, Err: errNoSecretStore}
	}
	rec, err := m.store.GetSecret(ctx, keyID(ctx), clip(name, secrets.MaxNameBytes+1))
	if err != nil {
		return SecretInfo{}, &sandbox.Error{Op: op, Err: err}
	}
	return secretInfo(rec), nil
}

// DeleteSecret deletes ctx's key's secret name. Sandboxes that have its
// value (env mode) or a placeholder for it (proxy mode) keep them until they
// end; new creates and execs cannot name it.
func (m *Manager) DeleteSecret(ctx context.Context, name string) (retErr error) {
	const op = "delete_secret"
	name = clip(name, secrets.MaxNameBytes+1)
	defer func() { m.audit(ctx, "", op, name, "", retErr) }()
	if m.box == nil {
		return &sandbox.Error{Op: op, Err: errNoSecretStore}
	}
	if err := m.store.DeleteSecret(ctx, keyID(ctx), name); err != nil {
		return &sandbox.Error{Op: op, Err: err}
	}
	return nil
}

// openedSecret is a secret a create or an exec names, opened for its use.
type openedSecret struct {
	env   string // the variable it goes in
	name  string
	mode  string
	hosts []string
	value []byte
}

// openSecrets opens the secrets refs names (variable → secret name) of ctx's
// key, for processes of a sandbox on network tier. A name the key has no
// secret of (another key's included, which looks the same) fails with
// ErrInvalid naming it; so does a proxy-mode secret where no egress proxy
// would carry it. Nothing is registered anywhere yet.
func (m *Manager) openSecrets(ctx context.Context, refs map[string]string, tier sandbox.Network) ([]openedSecret, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	if m.box == nil {
		return nil, errNoSecretStore
	}
	owner := keyID(ctx)
	var (
		out  []openedSecret
		errs []error
	)
	for _, env := range slices.Sorted(maps.Keys(refs)) {
		name := refs[env]
		rec, err := m.store.GetSecret(ctx, owner, clip(name, secrets.MaxNameBytes+1))
		if errors.Is(err, sandbox.ErrNotFound) {
			errs = append(errs, sandbox.Invalid("secrets", "%s: no secret named %q", env, clip(name, secrets.MaxNameBytes)))
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("secrets: %s: %w", env, err))
			continue
		}
		if rec.Mode == SecretProxy {
			if why := m.proxyRefusal(tier); why != "" {
				errs = append(errs, sandbox.Invalid("secrets", "%s: secret %q is proxy mode, which %s", env, name, why))
				continue
			}
		}
		value, err := m.box.Open(owner, rec.Name, rec.Ciphertext, rec.Nonce)
		if err != nil {
			errs = append(errs, fmt.Errorf("secrets: %s: secret %q: %w", env, name, err))
			continue
		}
		out = append(out, openedSecret{env: env, name: rec.Name, mode: rec.Mode, hosts: rec.Hosts, value: value})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// proxyRefusal says why a proxy-mode secret cannot serve a sandbox on tier,
// or "" when it can.
func (m *Manager) proxyRefusal(tier sandbox.Network) string {
	switch {
	case m.proxy == nil:
		return "needs the daemon's egress proxy; this daemon offers no proxy-mode secrets"
	case tier == sandbox.NetworkHost:
		return "needs the daemon's egress proxy, and this sandbox's backend uses the host's network"
	case !networked(tier):
		return fmt.Sprintf("needs network allowlist or full; this sandbox's network is %s", tier)
	}
	return ""
}

// secretEnv returns the variables opened gives the processes of sandbox id
// on tier: each env-mode value as it is, and for each proxy-mode one a
// placeholder the egress proxy registers for id. On error the caller calls
// forgetSecrets(id).
func (m *Manager) secretEnv(id sandbox.ID, tier sandbox.Network, opened []openedSecret) (env, placeholders map[string]string, _ error) {
	if len(opened) == 0 {
		return nil, nil, nil
	}
	env = make(map[string]string, len(opened))
	for _, s := range opened {
		if s.mode != SecretProxy {
			env[s.env] = string(s.value)
			continue
		}
		if why := m.proxyRefusal(tier); why != "" {
			return nil, nil, sandbox.Invalid("secrets", "%s: secret %q is proxy mode, which %s", s.env, s.name, why)
		}
		ph, err := m.proxy.Placeholder(id, s.name, s.value, slices.Clone(s.hosts))
		if err != nil {
			return nil, nil, fmt.Errorf("secrets: %s: registering secret %q with the egress proxy: %w", s.env, s.name, err)
		}
		// The placeholder is what the sandbox sees: never the value, nothing
		// a process cannot hold in its environment.
		if ph == "" || strings.IndexByte(ph, 0) >= 0 || bytes.Contains([]byte(ph), s.value) {
			return nil, nil, fmt.Errorf("secrets: %s: the egress proxy gave secret %q an unusable placeholder", s.env, s.name)
		}
		env[s.env] = ph
		if placeholders == nil {
			placeholders = map[string]string{}
		}
		placeholders[ph] = s.name
	}
	return env, placeholders, nil
}

// restoreSecrets registers again, after a daemon restart, the proxy-mode
// secrets behind the placeholders sandbox sb's processes hold. A secret
// deleted meanwhile is not: its placeholder goes out as it is.
func (m *Manager) restoreSecrets(ctx context.Context, sb sandbox.Sandbox) {
	if m.proxy == nil || m.box == nil {
		return
	}
	for _, ph := range slices.Sorted(maps.Keys(sb.Spec.ProxySecrets)) {
		name := sb.Spec.ProxySecrets[ph]
		log := m.log.With(logkey.SandboxID, sb.ID, "secret", name)
		rec, err := m.store.GetSecret(ctx, sb.OwnerKey, name)
		if err != nil {
			log.WarnContext(ctx, "a recovered sandbox's proxy-mode secret is gone; its placeholder is no longer substituted", logkey.Err, err)
			continue
		}
		value, err := m.box.Open(sb.OwnerKey, rec.Name, rec.Ciphertext, rec.Nonce)
		if err == nil {
			err = m.proxy.Restore(sb.ID, ph, rec.Name, value, rec.Hosts)
		}
		if err != nil {
			log.WarnContext(ctx, "registering a recovered sandbox's proxy-mode secret", logkey.Err, err)
		}
	}
}

// forgetSecrets drops the proxy-mode secrets registered for id once it is gone.
func (m *Manager) forgetSecrets(id sandbox.ID) {
	if m.proxy != nil {
		m.proxy.ForgetSecrets(id)
	}
}

// execSecrets opens the secrets refs names for one exec in running sandbox
// id and returns the variables they give it.
func (m *Manager) execSecrets(ctx context.Context, id sandbox.ID, refs map[string]string) (map[string]string, error) {
	if len(refs) == 0 {
		return nil, nil
	}
	sb, err := m.store.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	opened, err := m.openSecrets(ctx, refs, sb.Spec.Network)
	if err != nil {
		return nil, err
	}
	env, placeholders, err := m.secretEnv(id, sb.Spec.Network, opened)
	if err != nil || len(placeholders) == 0 {
		return env, err
	}
	// Kept with the sandbox, for a restarted daemon to register again.
	if _, err := m.store.UpdateSandbox(ctx, id, func(r *sandbox.Sandbox) error {
		if r.Spec.ProxySecrets == nil {
			r.Spec.ProxySecrets = map[string]string{}
		}
		maps.Copy(r.Spec.ProxySecrets, placeholders)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("secrets: recording the placeholders: %w", err)
	}
	return env, nil
}

// secretsDetail is the audit detail of the secrets refs names: their names,
// never their values.
func secretsDetail(refs map[string]string) string {
	if len(refs) == 0 {
		return ""
	}
	names := slices.Compact(slices.Sorted(maps.Values(refs)))
	return "secrets=" + strings.Join(names, ",")
}

// withEnv returns env with more's variables added, as a new map.
func withEnv(env, more map[string]string) map[string]string {
	if len(more) == 0 {
		return env
	}
	out := maps.Clone(env)
	if out == nil {
		out = make(map[string]string, len(more))
	}
	maps.Copy(out, more)
	return out
}
