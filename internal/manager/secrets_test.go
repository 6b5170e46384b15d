package manager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/fake"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/secrets"
	"sbx.dev/sbx/internal/testutil"
)

// fakeProxy is the egress proxy's side of proxy-mode secrets as the
// manager sees it: it hands out placeholders and records what it was given.
type fakeProxy struct {
	mu        sync.Mutex
	placed    []placed
	forgotten []sandbox.ID
	fail      error // Placeholder's error, when set
}

type placed struct {
	id          sandbox.ID
	secret      string
	value       string
	hosts       []string
	placeholder string
}

func (p *fakeProxy) Placeholder(id sandbox.ID, secret string, value []byte, hosts []string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return "", p.fail
	}
	ph := fmt.Sprintf("SBX_PLACEHOLDER_%s_%s_%d", id, secret, len(p.placed))
	p.placed = append(p.placed, placed{id, secret, string(value), hosts, ph})
	return ph, nil
}

func (p *fakeProxy) Restore(id sandbox.ID, placeholder, secret string, value []byte, hosts []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.placed = append(p.placed, placed{id: id, secret: secret, value: string(value), hosts: hosts, placeholder: placeholder})
	return nil
}

func (p *fakeProxy) ForgetSecrets(id sandbox.ID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forgotten = append(p.forgotten, id)
}

func (p *fakeProxy) state() ([]placed, []sandbox.ID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.placed), slices.Clone(p.forgotten)
}

// envDriver is the fake driver that also keeps the environment each
// sandbox was started with.
type envDriver struct {
	*fake.Driver
	mu   sync.Mutex
	envs map[sandbox.ID]map[string]string
}

func (d *envDriver) Start(ctx context.Context, spec sandbox.Spec) (*backend.Instance, error) {
	d.mu.Lock()
	d.envs[spec.ID] = maps.Clone(spec.Env)
	d.mu.Unlock()
	return d.Driver.Start(ctx, spec)
}

func (d *envDriver) env(id sandbox.ID) map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.envs[id]
}

// secretEnv is a manager with a secret store over an envDriver, the proxy
// (nil: none), and the daemon's log in logs.
type secretsEnv struct {
	*env
	d     *envDriver
	proxy *fakeProxy
	logs  *testutil.SyncBuffer
}

func newSecretsEnv(t *testing.T, proxy *fakeProxy, tweak func(*Options)) *secretsEnv {
	t.Helper()
	box, err := secrets.NewBox(bytes.Repeat([]byte{3}, secrets.KeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	se := &secretsEnv{proxy: proxy, logs: &testutil.SyncBuffer{}}
	se.env = newEnv(t, func(o *Options) {
		se.d = &envDriver{Driver: o.Drivers[0].Driver.(*fake.Driver), envs: map[sandbox.ID]map[string]string{}}
		o.Drivers[0].Driver = se.d
		o.SecretBox = box
		if proxy != nil {
			o.ProxySecrets = proxy
		}
		o.Log = slog.New(slog.NewTextHandler(se.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		if tweak != nil {
			tweak(o)
		}
	})
	return se
}

func (se *secretsEnv) set(t *testing.T, ctx context.Context, name, value, mode string, hosts ...string) SecretInfo {
	t.Helper()
	info, _, err := se.m.SetSecret(ctx, name, []byte(value), mode, hosts)
	if err != nil {
		t.Fatalf("SetSecret(%s) = %v", name, err)
	}
	return info
}

// noValue fails t when the daemon's log or audit records hold any of values.
func (se *secretsEnv) noValue(t *testing.T, values ...string) {
	t.Helper()
	recs, err := se.m.Audit(WithKey(t.Context(), admin), AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	audit := fmt.Sprintf("%+v", recs)
	for _, v := range values {
		if strings.Contains(se.logs.String(), v) {
			t.Errorf("the daemon's log holds a secret's value")
		}
		if strings.Contains(audit, v) {
			t.Errorf("the audit log holds a secret's value")
		}
	}
}

func TestSecretSetListDelete(t *testing.T) {
	e := newSecretsEnv(t, nil, nil)
	ctx := as(t.Context(), "key_a")
	info, replaced, err := e.m.SetSecret(ctx, "api", []byte("v1-value"), "proxy", []string{"API.example.com.", "*.example.org", "api.example.com"})
	if err != nil || replaced {
		t.Fatalf("SetSecret(new) = %+v, replaced %v, %v", info, replaced, err)
	}
	if info.Name != "api" || info.Mode != SecretProxy || !slices.Equal(info.Hosts, []string{"api.example.com", "*.example.org"}) ||
		!info.CreatedAt.Equal(e.clock.Now()) || !info.UpdatedAt.Equal(info.CreatedAt) {
		t.Errorf("SetSecret = %+v; want hosts normalised and deduplicated, times now", info)
	}
	e.clock.Advance(10_000_000_000) // 10 s
	env, replaced, err := e.m.SetSecret(ctx, "db", []byte("db-value"), "", nil)
	if err != nil || replaced || env.Mode != SecretEnv || env.Hosts != nil {
		t.Errorf("SetSecret(mode \"\") = %+v, %v, %v; want env mode", env, replaced, err)
	}
	again, replaced, err := e.m.SetSecret(ctx, "api", []byte("v2-value"), "env", nil)
	if err != nil || !replaced || again.Mode != SecretEnv || !again.CreatedAt.Equal(info.CreatedAt) || !again.UpdatedAt.Equal(e.clock.Now()) {
		t.Errorf("SetSecret(replace) = %+v, replaced %v, %v; want created_at kept, updated_at now", again, replaced, err)
	}
	list, err := e.m.Secrets(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "api" || list[1].Name != "db" {
		t.Fatalf("Secrets = %+v, %v", list, err)
	}
	if got, err := e.m.Secret(ctx, "db"); err != nil || got.Name != "db" || got.Mode != SecretEnv {
		t.Errorf("Secret(db) = %+v, %v", got, err)
	}
	// The replaced value is the one a sandbox gets.
	sb, err := e.m.Create(ctx, sandbox.CreateRequest{Secrets: map[string]string{"API": "api"}})
	if err != nil || e.d.env(sb.ID)["API"] != "v2-value" {
		t.Fatalf("Create with the replaced secret = %v; env %v", err, e.d.env(sb.ID) != nil)
	}
	if err := e.m.DeleteSecret(ctx, "api"); err != nil {
		t.Fatalf("DeleteSecret = %v", err)
	}
	if err := e.m.DeleteSecret(ctx, "api"); !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), `secret "api" not found`) {
		t.Errorf("DeleteSecret twice = %v, want not found naming it", err)
	}
	if _, err := e.m.Secret(ctx, "api"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Secret after delete = %v, want not found", err)
	}
	recs, _ := e.m.Audit(WithKey(t.Context(), admin), AuditQuery{})
	var actions []string
	for _, r := range recs {
		if strings.Contains(r.Action, "secret") {
			actions = append(actions, r.Action+" "+r.Target+" "+r.Outcome+" "+r.KeyID)
		}
	}
	slices.Reverse(actions)
	want := []string{"set_secret api ok key_a", "set_secret db ok key_a", "set_secret api ok key_a", "delete_secret api ok key_a", "delete_secret api not_found key_a"}
	if !slices.Equal(actions, want) {
		t.Errorf("audit records = %q, want %q", actions, want)
	}
	e.noValue(t, "v1-value", "v2-value", "db-value")
}

func TestSecretSetRefuses(t *testing.T) {
	e := newSecretsEnv(t, nil, nil)
	ctx := as(t.Context(), "key_a")
	for _, tc := range []struct {
		name, value, mode string
		hosts             []string
		want              []string
	}{
		{"", "v", "env", nil, []string{"name: empty"}},
		{"a b", "v", "env", nil, []string{"name: ", "is not one of A-Z"}},
		{strings.Repeat("n", 129), "v", "env", nil, []string{"name: 129 bytes, at most 128"}},
		{"ok", "", "env", nil, []string{"value: empty"}},
		{"ok", strings.Repeat("v", secrets.MaxValueBytes+1), "env", nil, []string{"value: 65537 bytes"}},
		{"ok", "a\x00b", "env", nil, []string{"value: contains a NUL byte"}},
		{"ok", "tok\r\nX-Injected: 1", "proxy", []string{"example.com"}, []string{"value: contains CR or LF"}},
		{"ok", "v", "header", nil, []string{`mode: "header" is not env or proxy`}},
		{"ok", "v", "proxy", nil, []string{"hosts: proxy mode needs at least one host"}},
		{"ok", "v", "env", []string{"example.com"}, []string{"hosts: env mode takes no hosts"}},
		{"ok", "v", "proxy", []string{"example.com", "10.0.0.1"}, []string{"hosts[1]: ", "is an address"}},
		{"ok", "v", "proxy", []string{"bad host!"}, []string{"hosts[0]: "}},
		{"ok", "v", "proxy", []string{"*.*.example.com"}, []string{"hosts[0]: "}},
		{"", "", "env", []string{"x.com"}, []string{"name: empty", "value: empty", "hosts: env mode takes no hosts"}},
	} {
		_, _, err := e.m.SetSecret(ctx, tc.name, []byte(tc.value), tc.mode, tc.hosts)
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("SetSecret(%.20q, mode %q, hosts %q) = %v, want invalid", tc.name, tc.mode, tc.hosts, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("SetSecret(%.20q, mode %q, hosts %q) = %v, want %q", tc.name, tc.mode, tc.hosts, err, w)
			}
		}
		if len(tc.value) > 3 && strings.Contains(err.Error(), tc.value[:4]) && tc.value != strings.Repeat("v", len(tc.value)) {
			t.Errorf("the error holds the value: %v", err)
		}
	}
	if l, _ := e.m.Secrets(ctx); len(l) != 0 {
		t.Errorf("refused secrets were kept: %+v", l)
	}
}

// A key sees and uses only its own secrets; another key's looks exactly
// like an unknown name, to every key, the admin key included.
func TestSecretScope(t *testing.T) {
	e := newSecretsEnv(t, nil, nil)
	a, b, adm := as(t.Context(), "key_a"), as(t.Context(), "key_b"), WithKey(t.Context(), admin)
	sbB, err := e.m.Create(b, sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// What B and the admin key are told before A has a secret "api"…
	type answers struct{ get, del, create, exec string }
	ask := func(ctx context.Context, sb sandbox.ID) answers {
		var out answers
		_, err := e.m.Secret(ctx, "api")
		out.get = fmt.Sprint(err)
		out.del = fmt.Sprint(e.m.DeleteSecret(ctx, "api"))
		_, err = e.m.Create(ctx, sandbox.CreateRequest{Secrets: map[string]string{"K": "api"}})
		out.create = fmt.Sprint(err)
		_, err = e.m.Exec(ctx, sb, sandbox.ExecRequest{Shell: "true", Secrets: map[string]string{"K": "api"}}, false, nil)
		out.exec = fmt.Sprint(err)
		return out
	}
	sbAdm, err := e.m.Create(adm, sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	beforeB, beforeAdm := ask(b, sbB.ID), ask(adm, sbAdm.ID)
	e.set(t, a, "api", "value-of-a", "env")
	// …is what they are told after.
	if afterB := ask(b, sbB.ID); afterB != beforeB {
		t.Errorf("key B on A's secret:\n%+v\nwant what an unknown name gives:\n%+v", afterB, beforeB)
	}
	if afterAdm := ask(adm, sbAdm.ID); afterAdm != beforeAdm {
		t.Errorf("the admin key on A's secret:\n%+v\nwant what an unknown name gives:\n%+v", afterAdm, beforeAdm)
	}
	if !strings.Contains(beforeB.create, `no secret named "api"`) || !strings.Contains(beforeB.get, "not found") {
		t.Errorf("unknown name: %+v", beforeB)
	}
	for _, ctx := range []context.Context{b, adm} {
		if l, err := e.m.Secrets(ctx); err != nil || len(l) != 0 {
			t.Errorf("another key lists %+v, %v; want none", l, err)
		}
	}
	if _, err := e.m.Secret(a, "api"); err != nil {
		t.Errorf("B's and the admin key's deletes reached A's secret: %v", err)
	}
	// B may have its own "api": a different secret.
	e.set(t, b, "api", "value-of-b", "env")
	for _, c := range []struct {
		ctx  context.Context
		want string
	}{{a, "value-of-a"}, {b, "value-of-b"}} {
		sb, err := e.m.Create(c.ctx, sandbox.CreateRequest{Secrets: map[string]string{"K": "api"}})
		if err != nil || e.d.env(sb.ID)["K"] != c.want {
			t.Errorf("Create with \"api\" = %v; got its key's own value: %v", err, e.d.env(sb.ID)["K"] == c.want)
		}
	}
	e.noValue(t, "value-of-a", "value-of-b")
}

// A name the key has no secret of fails with 400 naming it, before any
// sandbox or process starts.
func TestSecretUnknownStartsNothing(t *testing.T) {
	e := newSecretsEnv(t, nil, nil)
	ctx := as(t.Context(), "key_a")
	e.set(t, ctx, "known", "known-value", "env")
	_, err := e.m.Create(ctx, sandbox.CreateRequest{Secrets: map[string]string{"A": "known", "B": "missing-one", "C": "missing-two"}})
	for _, want := range []string{`B: no secret named "missing-one"`, `C: no secret named "missing-two"`} {
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Create with unknown secrets = %v, want invalid with %q", err, want)
		}
	}
	if n := e.d.Called("Start", ""); n != 0 {
		t.Errorf("the driver started %d sandboxes for a refused create", n)
	}
	if sbs, _ := e.st.ListSandboxes(t.Context()); len(sbs) != 0 {
		t.Errorf("the store holds %d sandboxes after a refused create", len(sbs))
	}
	sb, err := e.m.Create(ctx, sandbox.CreateRequest{Secrets: map[string]string{"A": "known"}})
	if err != nil {
		t.Fatalf("control: Create with a known secret = %v", err)
	}
	_, err = e.m.Exec(ctx, sb.ID, sandbox.ExecRequest{Shell: "true", Secrets: map[string]string{"A": "known", "X": "missing"}}, false, nil)
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), `X: no secret named "missing"`) || sandbox.IDOf(err) != sb.ID {
		t.Errorf("Exec with an unknown secret = %v, want invalid naming it and the sandbox", err)
	}
	if n := e.d.Called("Exec", sb.ID); n != 0 {
		t.Errorf("the agent ran %d processes for a refused exec", n)
	}
	e.d.Script("true", fake.Run{})
	if _, err := e.m.Exec(ctx, sb.ID, sandbox.ExecRequest{Shell: "true", Secrets: map[string]string{"A": "known"}}, false, nil); err != nil {
		t.Errorf("control: Exec with a known secret = %v", err)
	}
	if n := e.d.Called("Exec", sb.ID); n != 1 {
		t.Errorf("control: the agent ran %d processes, want 1", n)
	}
	// Each refusal is audited, naming the secrets and never a value.
	recs, _ := e.m.Audit(WithKey(t.Context(), admin), AuditQuery{})
	var details []string
	for _, r := range recs {
		if r.Action == "create" || r.Action == "exec_start" {
			details = append(details, r.Action+" "+r.Outcome+" "+r.Detail)
		}
	}
	slices.Reverse(details)
	want := []string{"create invalid_argument secrets=known,missing-one,missing-two", "create ok secrets=known",
		"exec_start invalid_argument secrets=known,missing", "exec_start ok process_id=fake-1 pid=42 secrets=known"}
	if !slices.Equal(details, want) {
		t.Errorf("audit = %q, want %q", details, want)
	}
	e.noValue(t, "known-value")
}

// An env-mode secret's value is in the sandbox's and the process's
// environment, and nowhere it could be read back: not the store, the
// sandbox record, the log or the audit records.
func TestSecretEnvMode(t *testing.T) {
	e := newSecretsEnv(t, &fakeProxy{}, nil)
	ctx := as(t.Context(), "key_a")
	e.set(t, ctx, "tok", "env-value-5c1e", "env")
	sb, err := e.m.Create(ctx, sandbox.CreateRequest{Env: map[string]string{"PLAIN": "p"}, Secrets: map[string]string{"TOKEN": "tok"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.d.env(sb.ID); !maps.Equal(got, map[string]string{"PLAIN": "p", "TOKEN": "env-value-5c1e"}) {
		t.Errorf("the driver started the sandbox with env %v", slices.Sorted(maps.Keys(got)))
	}
	rec, err := e.m.Get(ctx, sb.ID)
	if err != nil || rec.Spec.Env != nil {
		t.Errorf("Get = %v; the record keeps an environment: %v", err, rec.Spec.Env != nil)
	}
	env, err := e.m.execSecrets(ctx, sb.ID, map[string]string{"T2": "tok"})
	if err != nil || !maps.Equal(env, map[string]string{"T2": "env-value-5c1e"}) {
		t.Errorf("execSecrets = %d variables, %v", len(env), err)
	}
	if placed, _ := e.proxy.state(); len(placed) != 0 {
		t.Errorf("an env-mode secret went to the proxy: %d", len(placed))
	}
	e.noValue(t, "env-value-5c1e")
}

// A proxy-mode secret puts the proxy's placeholder in the environment, the
// value going to the proxy alone, only where a proxy carries the sandbox's
// traffic; what the proxy holds for a sandbox is dropped when it ends.
func TestSecretProxyMode(t *testing.T) {
	allowlist := func(o *Options) {
		o.Policy.Networks = []sandbox.Network{sandbox.NetworkNone, sandbox.NetworkAllowlist, sandbox.NetworkFull}
	}
	t.Run("no proxy", func(t *testing.T) {
		e := newSecretsEnv(t, nil, allowlist)
		ctx := as(t.Context(), "key_a")
		e.set(t, ctx, "gh", "proxy-value", "proxy", "api.github.com")
		_, err := e.m.Create(ctx, sandbox.CreateRequest{Network: sandbox.NetworkFull, Secrets: map[string]string{"GH": "gh"}})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), `GH: secret "gh" is proxy mode, which needs the daemon's egress proxy`) {
			t.Errorf("Create with a proxy secret and no proxy = %v", err)
		}
		if e.d.Called("Start", "") != 0 {
			t.Errorf("a sandbox started")
		}
	})

	e := newSecretsEnv(t, &fakeProxy{}, allowlist)
	ctx := as(t.Context(), "key_a")
	e.set(t, ctx, "gh", "proxy-value-77aa", "proxy", "api.github.com", "*.githubusercontent.com")
	e.set(t, ctx, "plain", "env-value-2b", "env")

	// Tier none: refused, naming the tier.
	_, err := e.m.Create(ctx, sandbox.CreateRequest{Secrets: map[string]string{"GH": "gh"}})
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "needs network allowlist or full; this sandbox's network is none") {
		t.Errorf("Create with a proxy secret on tier none = %v", err)
	}
	if placed, _ := e.proxy.state(); len(placed) != 0 || e.d.Called("Start", "") != 0 {
		t.Errorf("a refused create registered %d placeholders or started a sandbox", len(placed))
	}

	sb, err := e.m.Create(ctx, sandbox.CreateRequest{Network: sandbox.NetworkAllowlist, NetworkAllow: []string{"api.github.com"},
		Secrets: map[string]string{"GH": "gh", "PLAIN": "plain"}})
	if err != nil {
		t.Fatal(err)
	}
	placed, _ := e.proxy.state()
	if len(placed) != 1 || placed[0].id != sb.ID || placed[0].secret != "gh" || placed[0].value != "proxy-value-77aa" ||
		!slices.Equal(placed[0].hosts, []string{"api.github.com", "*.githubusercontent.com"}) {
		t.Fatalf("the proxy was given %+v", placed)
	}
	if got := e.d.env(sb.ID); got["GH"] != placed[0].placeholder || got["PLAIN"] != "env-value-2b" {
		t.Errorf("the sandbox's env: GH is the placeholder %v, PLAIN the value %v", got["GH"] == placed[0].placeholder, got["PLAIN"] == "env-value-2b")
	}
	// An exec registers for its own sandbox too.
	env, err := e.m.execSecrets(ctx, sb.ID, map[string]string{"GH2": "gh"})
	if placed, _ = e.proxy.state(); err != nil || len(placed) != 2 || placed[1].id != sb.ID || env["GH2"] != placed[1].placeholder {
		t.Errorf("execSecrets = %v, %v; proxy %+v", env, err, placed)
	}
	// Its end drops what the proxy holds for it.
	if err := e.m.Delete(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, forgotten := e.proxy.state(); !slices.Equal(forgotten, []sandbox.ID{sb.ID}) {
		t.Errorf("ForgetSecrets calls = %v, want [%s]", forgotten, sb.ID)
	}

	// An exec in a sandbox on tier none is refused too, starting nothing.
	none, err := e.m.Create(ctx, sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.m.Exec(ctx, none.ID, sandbox.ExecRequest{Shell: "true", Secrets: map[string]string{"GH": "gh"}}, false, nil)
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "this sandbox's network is none") || e.d.Called("Exec", none.ID) != 0 {
		t.Errorf("Exec with a proxy secret on tier none = %v (%d processes)", err, e.d.Called("Exec", none.ID))
	}

	// A create that fails after the proxy registered its secret drops it.
	e.d.FailNextStart(errors.New("boom"))
	_, err = e.m.Create(ctx, sandbox.CreateRequest{Network: sandbox.NetworkFull, Secrets: map[string]string{"GH": "gh"}})
	placed, forgotten := e.proxy.state()
	if err == nil || len(placed) != 3 || !slices.Contains(forgotten, placed[2].id) {
		t.Errorf("a failed create: %v; registered for %s, forgotten %v", err, placed[len(placed)-1].id, forgotten)
	}
	// So does one whose proxy refuses.
	e.proxy.fail = errors.New("proxy says no")
	_, err = e.m.Create(ctx, sandbox.CreateRequest{Network: sandbox.NetworkFull, Secrets: map[string]string{"GH": "gh"}})
	if err == nil || !strings.Contains(err.Error(), "proxy says no") || e.d.Called("Start", "") != 3 {
		t.Errorf("Create when the proxy refuses = %v (%d starts)", err, e.d.Called("Start", ""))
	}
	e.noValue(t, "proxy-value-77aa", "env-value-2b")
}

// A backend that is no sandbox runs on the host's network: no proxy of
// sbx's carries it, so a proxy-mode secret is refused there.
func TestSecretProxyModeHostNetwork(t *testing.T) {
	e := newSecretsEnv(t, &fakeProxy{}, func(o *Options) {
		o.Policy.Networks = []sandbox.Network{sandbox.NetworkFull}
	})
	e.d.SetSandbox(false)
	e.m.probeAll(t.Context())
	ctx := as(t.Context(), "key_a")
	e.set(t, ctx, "gh", "proxy-value", "proxy", "api.github.com")
	_, err := e.m.Create(ctx, sandbox.CreateRequest{Secrets: map[string]string{"GH": "gh"}})
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "uses the host's network") {
		t.Errorf("Create with a proxy secret on a host-network backend = %v", err)
	}
	if placed, _ := e.proxy.state(); len(placed) != 0 || e.d.Called("Start", "") != 0 {
		t.Errorf("registered %d placeholders, started %d sandboxes", len(placed), e.d.Called("Start", ""))
	}
}

// Without a secrets key the daemon keeps no secrets, and says so.
func TestSecretNoStore(t *testing.T) {
	e := newEnv(t, nil)
	ctx := as(t.Context(), "key_a")
	if _, _, err := e.m.SetSecret(ctx, "a", []byte("v"), "env", nil); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("SetSecret = %v, want unavailable", err)
	}
	if _, err := e.m.Create(ctx, sandbox.CreateRequest{Secrets: map[string]string{"A": "a"}}); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("Create with a secret = %v, want unavailable", err)
	}
}
