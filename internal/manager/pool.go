// This file implements the warm pool: sandboxes of the policy's default shape,
// started ahead of demand on the primary driver, handed out by Create in place of
// a cold start. A handed-out sandbox is indistinguishable from a cold one: its
// limits are rewritten to the request's (backend.Resizer) and its record becomes
// a normal running one. Warm sandboxes are the daemon's own: they are not listed,
// they are destroyed at Close, and Recover destroys any a crash left behind.

package manager

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"time"

	"sbx/internal/agentclient"
	"sbx/internal/backend"
	"sbx/internal/logkey"
	"sbx/internal/sandbox"
)

// warm is one ready sandbox in the pool.
type warm struct {
	id     sandbox.ID
	driver NamedDriver
	client *agentclient.Client
	spec   sandbox.Spec
	inst   *backend.Instance
}

// poolSpec is the shape warm sandboxes are started with: the policy's defaults.
func (m *Manager) poolSpec() (sandbox.Spec, error) {
	return m.policy.Admit(sandbox.CreateRequest{})
}

// poolFits reports whether a warm sandbox can serve spec: the same template,
// network and environment (those are fixed at start), on a driver that can
// resize limits in place when they differ.
func poolFits(w *warm, spec sandbox.Spec) bool {
	if spec.Template != w.spec.Template || spec.Network != w.spec.Network || len(spec.Env) > 0 || spec.DiskBytes != w.spec.DiskBytes {
		return false
	}
	if spec.MemoryBytes == w.spec.MemoryBytes && spec.Pids == w.spec.Pids && spec.MilliCPUs == w.spec.MilliCPUs {
		return true
	}
	_, ok := w.driver.Driver.(backend.Resizer)
	return ok
}

// takeWarm hands out a warm sandbox for spec to ctx's key, whose place res
// holds (the hand-out passes the same limits as a cold create), or returns false.
func (m *Manager) takeWarm(ctx context.Context, nd NamedDriver, spec sandbox.Spec, res *reservation) (sandbox.Sandbox, bool) {
	m.mu.Lock()
	var w *warm
	for i, c := range m.pool {
		if c.driver.Name == nd.Name && poolFits(c, spec) {
			w = c
			m.pool = append(m.pool[:i], m.pool[i+1:]...)
			break
		}
	}
	m.mu.Unlock()
	if w == nil {
		return sandbox.Sandbox{}, false
	}
	m.poolWake()
	spec.ID = w.id
	m.limits.bind(res, w.id)
	log := m.log.With(logkey.SandboxID, w.id, logkey.Backend, nd.Name)
	if spec.MemoryBytes != w.spec.MemoryBytes || spec.Pids != w.spec.Pids || spec.MilliCPUs != w.spec.MilliCPUs {
		if err := nd.Driver.(backend.Resizer).Resize(ctx, w.id, spec); err != nil {
			log.WarnContext(ctx, "resizing a warm sandbox failed; discarding it", logkey.Err, err)
			m.discardWarm(ctx, w)
			return sandbox.Sandbox{}, false
		}
	}
	now := m.now()
	deadline := now.Add(spec.TTL)
	sb, err := m.commitCreate(ctx, w.id, func(r *sandbox.Sandbox) error {
		if r.State != sandbox.StateWarm {
			return wrongState(r.State)
		}
		r.State = sandbox.StateRunning
		r.Spec = spec
		r.CreatedAt = now
		r.ExpiresAt = deadline
		r.OwnerKey = keyID(ctx)
		return nil
	})
	if err != nil {
		log.WarnContext(ctx, "handing out a warm sandbox failed; discarding it", logkey.Err, err)
		m.discardWarm(ctx, w)
		return sandbox.Sandbox{}, false
	}
	m.adopt(w.id, nd.Name, w.client, spec.TTL)
	log.InfoContext(ctx, "sandbox created from the warm pool", "level", sb.Isolation.Level)
	return sb, true
}

// discardWarm destroys a warm sandbox and drops its record.
func (m *Manager) discardWarm(ctx context.Context, w *warm) {
	m.unwatch(w.id)
	w.client.Close()
	m.rollback(ctx, w.driver, w.id, errDiscardWarm)
}

// poolWake asks the refill loop to look again.
func (m *Manager) poolWake() {
	select {
	case m.poolKick <- struct{}{}:
	default:
	}
}

// startPool runs the refill loop until Close; it is a no-op with no pool.
func (m *Manager) startPool() {
	if m.poolSize <= 0 {
		return
	}
	// Refills run in parallel, one per core: a start is mostly the kernel's
	// and the new process's work, and a drained pool should fill at the rate
	// the machine can start sandboxes, not one at a time.
	workers := min(m.poolSize, runtime.GOMAXPROCS(0))
	m.poolLoop.Go(func() {
		for {
			select {
			case <-m.closing:
				return
			case <-m.poolKick:
			}
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for m.refillOne() {
					}
				})
			}
			wg.Wait()
		}
	})
	m.poolWake()
}

// Refills wait until no create or exec has been in flight for quietGap, at
// most quietMax: the first exec in a sandbox just handed out, which follows
// its create within a moment, would otherwise share the CPU with the start of
// the sandbox's replacement. A longer wait lets back-to-back creates drain the
// pool (measured: 30 ms made them 15% slower; 12 ms does not).
const (
	quietGap = 5 * time.Millisecond
	quietMax = 12 * time.Millisecond
)

// calling counts a create or exec in flight until the returned func is called.
func (m *Manager) calling() (done func()) {
	m.callers.Add(1)
	return func() {
		m.lastCall.Store(time.Now().UnixNano())
		m.callers.Add(-1)
	}
}

// quiet waits for quietGap without a caller, at most quietMax, or Close.
func (m *Manager) quiet() {
	deadline := time.Now().Add(quietMax)
	for {
		now := time.Now()
		wait := quietGap
		if m.callers.Load() == 0 {
			wait -= now.Sub(time.Unix(0, m.lastCall.Load()))
		}
		if wait <= 0 || !now.Before(deadline) {
			return
		}
		select {
		case <-m.closing:
			return
		case <-time.After(min(wait, deadline.Sub(now))):
		}
	}
}

// refillOne starts one warm sandbox if the pool is short; it reports whether it
// should be called again at once.
func (m *Manager) refillOne() bool {
	ctx := m.lifetime
	m.mu.Lock()
	short := len(m.pool)+m.poolFilling < m.poolSize && !m.closed
	if short {
		m.poolFilling++
	}
	m.mu.Unlock()
	if !short {
		return false
	}
	defer func() {
		m.mu.Lock()
		m.poolFilling--
		m.mu.Unlock()
	}()
	// Creates that callers wait for go first: the pool takes a slot only when
	// one is free right now, and otherwise tries again shortly.
	m.quiet()
	select {
	case m.slots <- struct{}{}:
	default:
		select {
		case <-m.closing:
			return false
		case <-time.After(20 * time.Millisecond):
			return true
		}
	}
	defer m.release()
	nd, rep, err := m.pick(ctx)
	if err != nil || !rep.Sandbox {
		return false // no sandboxing backend: nothing worth keeping warm
	}
	spec, err := m.poolSpec()
	if err != nil {
		m.log.ErrorContext(ctx, "warm pool: the policy's defaults do not admit", logkey.Err, err)
		return false
	}
	spec.ID = sandbox.NewID()
	w, err := m.startWarm(ctx, nd, spec)
	if err != nil {
		if ctx.Err() == nil {
			m.log.WarnContext(ctx, "warm pool: starting a sandbox failed", logkey.Backend, nd.Name, logkey.Err, err)
		}
		// Back off instead of spinning on a failing backend.
		select {
		case <-m.closing:
		case <-time.After(time.Second):
		}
		return false
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		m.discardWarm(context.WithoutCancel(ctx), w)
		return false
	}
	m.pool = append(m.pool, w)
	m.mu.Unlock()
	m.watch(w.id, w.driver.Name, w.client)
	return true
}

// startWarm starts one sandbox for the pool: intent record (state warm), Start,
// isolation check, agent ready.
func (m *Manager) startWarm(ctx context.Context, nd NamedDriver, spec sandbox.Spec) (_ *warm, retErr error) {
	id := spec.ID
	now := m.now()
	rec := sandbox.Sandbox{ID: id, State: sandbox.StateWarm, Backend: nd.Name, Spec: spec, CreatedAt: now}
	if err := m.store.PutSandbox(ctx, rec); err != nil {
		return nil, err
	}
	var client *agentclient.Client
	defer func() {
		if retErr != nil {
			if client != nil {
				client.Close()
			}
			m.rollback(context.WithoutCancel(ctx), nd, id, retErr)
		}
	}()
	inst, err := nd.Driver.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	if inst.Applied.Backend == "" {
		inst.Applied.Backend = nd.Name
	}
	if missing := missingLayers(spec.RequireLayers, inst.Applied); len(missing) > 0 {
		return nil, errors.New("required layers missing: the pool only keeps sandboxes that could be handed out")
	}
	inst.Applied.AcceptedGaps = m.acceptedGaps(inst.Applied)
	client = agentclient.New(id, inst.Dial)
	// Asked even when the driver saw it serve: off the create's path, the
	// answer leaves the daemon's connection to the agent open and the
	// agent's first request served, so the exec that takes the sandbox
	// pays for neither.
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	err = client.WaitReady(rctx)
	cancel()
	if err != nil {
		return nil, err
	}
	if _, err := m.store.UpdateSandbox(ctx, id, func(r *sandbox.Sandbox) error {
		r.Saved = inst.Saved
		r.Isolation = inst.Applied
		return nil
	}); err != nil {
		return nil, err
	}
	return &warm{id: id, driver: nd, client: client, spec: spec, inst: inst}, nil
}

// drainPool destroys every warm sandbox; Close calls it after the loop stopped.
func (m *Manager) drainPool(ctx context.Context) {
	m.mu.Lock()
	ws := m.pool
	m.pool = nil
	m.mu.Unlock()
	for _, w := range ws {
		m.discardWarm(ctx, w)
	}
}

// PoolStatus is the warm pool as health shows it.
type PoolStatus struct {
	Size  int
	Ready int
}

// Pool reports the warm pool's target size and how many sandboxes are ready.
func (m *Manager) Pool() PoolStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return PoolStatus{Size: m.poolSize, Ready: len(m.pool)}
}
