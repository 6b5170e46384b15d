// This file implements create: policy admission, the queue, driver choice with
// fallback, a durable intent record before any side effect, and rollback.

package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/fault"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// Create admits req through the policy, the limits of ctx's key and the queue,
// starts it on the first available driver, and returns the running sandbox,
// owned by ctx's key. Every call is audited.
func (m *Manager) Create(ctx context.Context, req sandbox.CreateRequest) (sandbox.Sandbox, error) {
	defer m.pool.calling()()
	sb, err := m.create(ctx, req)
	id := sb.ID
	if err != nil {
		id = sandbox.IDOf(err)
	}
	m.audit(ctx, id, "create", req.Template, secretsDetail(req.Secrets), err)
	return sb, err
}

func (m *Manager) create(ctx context.Context, req sandbox.CreateRequest) (_ sandbox.Sandbox, retErr error) {
	const op = "create"
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, Err: &RetryError{Err: errShutdown, After: 5 * time.Second}}
	}
	m.inflight.Add(1)
	m.mu.Unlock()
	defer m.inflight.Done()

	spec, err := m.policy.Admit(req)
	if err == nil {
		_, err = netRules(spec)
	}
	if err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, Err: err}
	}
	// The secrets it names, opened before any side effect: a name the key has
	// no secret of starts nothing.
	opened, err := m.openSecrets(ctx, req.Secrets, spec.Network)
	if err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, Err: err}
	}
	// The key's place, taken before any side effect; a failed create gives it back.
	res, err := m.limits.reserve(keyID(ctx), m.now())
	if err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, Err: err}
	}
	defer func() {
		if retErr != nil {
			m.limits.cancel(res)
		}
	}()
	if m.pool.size > 0 && len(opened) == 0 { // a warm sandbox's environment is set
		if nd, rep, err := m.pick(ctx); err == nil && rep.Sandbox {
			if sb, ok := m.takeWarm(ctx, nd, spec, res); ok {
				return sb, nil
			}
		}
	}
	if err := m.acquire(ctx); err != nil {
		return sandbox.Sandbox{}, &sandbox.Error{Op: op, Err: err}
	}
	defer m.release()

	nd, rep, err := m.pick(ctx)
	if err != nil {
		m.reprobe(ctx) // a host that gained a backend serves the retry
		if nd, rep, err = m.pick(ctx); err != nil {
			return sandbox.Sandbox{}, &sandbox.Error{Op: op, Err: err}
		}
	}
	spec.ID = sandbox.NewID()
	m.limits.bind(res, spec.ID)
	if !rep.Sandbox {
		// The operator listed a non-sandbox backend (local): it has no layers to
		// require, and the isolation it reports says so. Its processes use
		// the host's network, and the sandbox says that too.
		spec.RequireLayers = nil
		spec.Network = sandbox.NetworkHost
	}
	if len(opened) > 0 {
		defer func() {
			if retErr != nil {
				m.forgetSecrets(spec.ID)
			}
		}()
		env, placeholders, err := m.secretEnv(spec.ID, spec.Network, opened)
		if err != nil {
			return sandbox.Sandbox{}, &sandbox.Error{Op: op, Err: err}
		}
		spec.Env = withEnv(spec.Env, env) // never stored: the store drops Spec.Env
		spec.ProxySecrets = placeholders  // stored: the placeholders, not the values
	}
	sb, err := m.start(ctx, nd, spec)
	if err != nil {
		if errors.Is(err, sandbox.ErrUnavailable) || errors.Is(err, sandbox.ErrIsolation) {
			m.reprobe(ctx)
		}
		return sandbox.Sandbox{}, sandbox.Wrap(op, spec.ID, err)
	}
	return sb, nil
}

// start runs one create on nd: intent, Start, checks, agent, commit. On error
// nothing is left, or, when teardown itself fails, a record in state error that
// the next daemon start retries.
func (m *Manager) start(ctx context.Context, nd NamedDriver, spec sandbox.Spec) (_ sandbox.Sandbox, retErr error) {
	id := spec.ID
	log := m.log.With(logkey.SandboxID, id, logkey.Backend, nd.Name)
	began := time.Now()

	m.mu.Lock()
	m.creating[id] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.creating, id)
		m.mu.Unlock()
	}()

	now := m.now()
	rec := sandbox.Sandbox{
		ID:        id,
		State:     sandbox.StateCreating,
		Backend:   nd.Name,
		Spec:      spec,
		CreatedAt: now,
		ExpiresAt: now.Add(spec.TTL),
		OwnerKey:  keyID(ctx),
	}
	if err := m.store.PutSandbox(ctx, rec); err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("recording intent: %w", err)
	}
	fault.Point(fault.Intent)

	var inst *backend.Instance
	var client *agentclient.Client
	defer func() {
		if retErr == nil {
			return
		}
		if client != nil {
			client.Close()
		}
		m.rollback(ctx, nd, id, retErr)
	}()

	if err := m.useRules(spec); err != nil {
		return sandbox.Sandbox{}, err
	}
	startedAt := time.Now()
	inst, err := nd.Driver.Start(ctx, spec)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	startDone := time.Now()
	if inst.Applied.Backend == "" {
		inst.Applied.Backend = nd.Name
	}
	if missing := missingLayers(spec.RequireLayers, inst.Applied); len(missing) > 0 {
		return sandbox.Sandbox{}, fmt.Errorf("%w: required layer %s not applied by backend %s",
			sandbox.ErrIsolation, strings.Join(missing, ", "), nd.Name)
	}
	inst.Applied.AcceptedGaps = m.acceptedGaps(inst.Applied)

	client = agentclient.New(id, inst.Dial)
	if !inst.Serving {
		rctx, cancel := context.WithTimeout(ctx, readyTimeout)
		err = client.WaitReady(rctx)
		cancel()
	}
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("waiting for the agent: %w", err)
	}
	agentReady := time.Now()
	fault.Point(fault.Agent)

	rec.State, rec.Saved, rec.Isolation, rec.ExpiresAt = sandbox.StateRunning, inst.Saved, inst.Applied, m.now().Add(spec.TTL)
	sb, err := m.commitCreate(ctx, rec, sandbox.StateCreating)
	if err != nil {
		return sandbox.Sandbox{}, fmt.Errorf("recording start: %w", err)
	}
	fault.Point(fault.Commit)
	m.adopt(id, nd.Name, client, spec.TTL)
	sb.Spec.Env = spec.Env
	log.InfoContext(ctx, "sandbox created", logkey.Duration, time.Since(began), "level", inst.Applied.Level)
	log.DebugContext(ctx, "create phases", "before_start", startedAt.Sub(began), "start", startDone.Sub(startedAt),
		"agent_ready", agentReady.Sub(startDone), "commit", time.Since(agentReady))
	return sb, nil
}

// errDiscardWarm is the rollback cause of a warm sandbox given up (pool
// drained at shutdown, its agent lost): not a failed create.
var errDiscardWarm = errors.New("discarding a warm sandbox")

// rollback destroys what a failed create may have left and drops its record;
// when Destroy fails the record stays, in state error, for the next start.
func (m *Manager) rollback(ctx context.Context, nd NamedDriver, id sandbox.ID, cause error) {
	cctx, cancel := cleanupContext(ctx)
	defer cancel()
	log := m.log.With(logkey.SandboxID, id, logkey.Backend, nd.Name)
	if cause == errDiscardWarm {
		log.DebugContext(cctx, "discarding a warm sandbox")
	} else {
		log.InfoContext(cctx, "create failed; rolling back", logkey.Err, cause)
	}
	if err := nd.Driver.Destroy(cctx, id); err != nil {
		log.ErrorContext(cctx, "rolling back a failed create: destroy failed; the record stays for a retry", logkey.Err, err)
		m.store.UpdateSandbox(cctx, id, func(r *sandbox.Sandbox) error {
			r.State = sandbox.StateError
			r.Error = "create failed and its teardown failed: " + err.Error()
			return nil
		})
		return
	}
	m.forgetRules(id)
	m.forgetSecrets(id)
	if err := m.store.DeleteSandbox(cctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		log.ErrorContext(cctx, "rolling back a failed create: deleting the record", logkey.Err, err)
	}
}

// missingLayers returns the layers of required that applied does not enforce.
func missingLayers(required []string, applied sandbox.Isolation) []string {
	var out []string
	for _, l := range required {
		if applied.Layers[l] != sandbox.Applied {
			out = append(out, l)
		}
	}
	return out
}

// adopt makes a running sandbox reachable, schedules its expiry and watches its
// agent (watch.go).
func (m *Manager) adopt(id sandbox.ID, backendName string, client *agentclient.Client, left time.Duration) {
	m.mu.Lock()
	if old := m.live[id]; old != nil {
		old.client.Close()
	}
	m.live[id] = &liveSandbox{client: client, backend: backendName, due: m.elapsed() + left}
	m.mu.Unlock()
	m.nudge()
	m.watchers.add(id, backendName, m.driver(backendName), client)
}

// acceptedGaps are the layers iso lacks that the operator accepted by name
// (allow_missing): a sandbox shows what its operator chose to go without.
func (m *Manager) acceptedGaps(iso sandbox.Isolation) []string {
	if !iso.Sandbox {
		return nil
	}
	var out []string
	for _, l := range iso.MissingLayers() {
		if slices.Contains(m.policy.AllowMissing, l) {
			out = append(out, l)
		}
	}
	return out
}
