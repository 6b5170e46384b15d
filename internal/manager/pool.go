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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// warm is one ready sandbox in the pool.
type warm struct {
	id     sandbox.ID
	driver NamedDriver
	client *agentclient.Client
	spec   sandbox.Spec
	inst   *backend.Instance
}

// warmPool keeps up to size warm sandboxes ready and refills them, with its
// own lock and lifecycle: start, stop (no refill starts) and close (wait for the
// refills, destroy the ready ones). What a warm sandbox is, and how one is
// started, discarded and watched, is the manager's: the pool is given those as
// three functions and the create slots as a channel, not the Manager, so it
// reaches neither the live map nor Manager.mu.
//
// Lock order: Manager.mu, then warmPool.mu. lose looks for a sandbox in the
// live map and in the pool as one step, and Close stops the pool as it marks
// the manager closed. The pool calls none of its functions with mu held.
type warmPool struct {
	size  int
	cores int           // refills run one per core
	slots chan struct{} // the manager's create admission (queue.go)
	// newWarm starts one warm sandbox, or fails with errNothingWarm when
	// there is nothing worth keeping warm.
	newWarm func(context.Context) (*warm, error)
	discard func(context.Context, *warm) // destroys a warm sandbox and drops its record
	watch   func(*warm)                  // starts the watcher of its agent

	kick     chan struct{} // nudges the refill loop; buffered 1
	hurry    chan struct{} // cuts a refill's quiet wait short: a create waits for it; buffered 1
	stopping chan struct{} // closed by stop
	loop     sync.WaitGroup
	// callers counts the creates and execs in flight, and lastCall is when
	// the last one ended (unix ns): refills wait for a quiet moment (quiet).
	callers  atomic.Int64
	lastCall atomic.Int64

	mu sync.Mutex
	// Everything below is guarded by mu.
	ready   []*warm
	filling int // warm starts in flight
	closed  bool
	// waiting counts the creates waiting for a warm start in flight
	// (await); changed is closed and replaced whenever ready or filling
	// changes, waking them.
	waiting int
	changed chan struct{}
	// shape is the last warm sandbox made: what those in flight will be
	// like (the policy's defaults on the first driver), for await's fit.
	shape *warm
	// awaitMax is awaitMaxDefault; a test's hang guard may be longer.
	awaitMax time.Duration
}

// errNothingWarm says no warm sandbox can be started now: no sandboxing
// backend is available, or the policy's defaults do not admit.
var errNothingWarm = errors.New("nothing to keep warm")

func newWarmPool(size, cores int, slots chan struct{}, newWarm func(context.Context) (*warm, error),
	discard func(context.Context, *warm), watch func(*warm)) *warmPool {
	return &warmPool{size: size, cores: max(1, cores), slots: slots, newWarm: newWarm, discard: discard, watch: watch,
		kick: make(chan struct{}, 1), hurry: make(chan struct{}, 1), stopping: make(chan struct{}), changed: make(chan struct{}),
		awaitMax: awaitMaxDefault}
}

// changedLocked wakes the creates waiting for a warm start (await). The
// caller holds mu.
func (p *warmPool) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// take removes a warm sandbox on driver driverName that can serve spec from the
// pool and returns it, or nil: the one readied last, idle the shortest. On a
// VM whose idle moments cost every process its caches, its first exec took
// 0.2-0.3 ms less than the oldest's.
func (p *warmPool) take(driverName string, spec sandbox.Spec) *warm {
	p.mu.Lock()
	w := p.takeLocked(driverName, spec)
	p.mu.Unlock()
	if w != nil {
		p.wake()
	}
	return w
}

func (p *warmPool) takeLocked(driverName string, spec sandbox.Spec) *warm {
	for i, c := range slices.Backward(p.ready) {
		if c.driver.Name == driverName && poolFits(c, spec) {
			p.ready = slices.Delete(p.ready, i, i+1)
			return c
		}
	}
	return nil
}

// awaitMaxDefault bounds a create's wait for a warm start in flight
// (await): one takes ~4-10 ms here; one that takes longer has gone wrong,
// and the create starts its own.
const awaitMaxDefault = 100 * time.Millisecond

// await is take, but when nothing fits and a warm start is in flight that
// no other create waits for, and would fit, it waits for that start (at most
// awaitMax, or until ctx ends) instead of returning nil at once: a create
// back to back with others that drained the pool then gets the start that
// is already partly done, not a cold start of its own sharing the CPUs
// with it. It returns nil when there is nothing to wait for or the wait
// ends without a fit (after awaitMax).
func (p *warmPool) await(ctx context.Context, driverName string, spec sandbox.Spec) *warm {
	var deadline <-chan time.Time
	for {
		p.mu.Lock()
		if w := p.takeLocked(driverName, spec); w != nil {
			p.mu.Unlock()
			p.wake()
			return w
		}
		fits := p.shape != nil && p.shape.driver.Name == driverName && poolFits(p.shape, spec)
		if p.closed || !fits || p.filling <= p.waiting {
			p.mu.Unlock()
			return nil
		}
		p.waiting++
		changed := p.changed
		p.mu.Unlock()
		select {
		case p.hurry <- struct{}{}:
		default:
		}
		if deadline == nil {
			t := time.NewTimer(p.awaitMax)
			defer t.Stop()
			deadline = t.C
		}
		var done bool
		select {
		case <-changed:
		case <-ctx.Done():
			done = true
		case <-deadline:
			done = true
		}
		p.mu.Lock()
		p.waiting--
		p.mu.Unlock()
		if done {
			return p.take(driverName, spec)
		}
	}
}

// remove takes warm sandbox id out of the pool and returns it, or nil when it
// is not there. It does not wake the refill loop.
func (p *warmPool) remove(id sandbox.ID) *warm {
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.IndexFunc(p.ready, func(w *warm) bool { return w.id == id })
	if i < 0 {
		return nil
	}
	w := p.ready[i]
	p.ready = slices.Delete(p.ready, i, i+1)
	return w
}

// wake asks the refill loop to look again.
func (p *warmPool) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// start runs the refill loop until stop; it is a no-op with no pool. Warm
// sandboxes start under ctx, the manager's lifetime.
func (p *warmPool) start(ctx context.Context) {
	if p.size <= 0 {
		return
	}
	// Refills run in parallel, one per core: a start is mostly the kernel's
	// and the new process's work, and a drained pool should fill at the rate
	// the machine can start sandboxes, not one at a time.
	workers := min(p.size, p.cores)
	p.loop.Go(func() {
		for {
			select {
			case <-p.stopping:
				return
			case <-p.kick:
			}
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for p.refillOne(ctx) {
					}
				})
			}
			wg.Wait()
		}
	})
	p.wake()
}

// stop ends refilling: no refill starts from here, and one that finishes
// discards its sandbox. It does not wait; close does.
func (p *warmPool) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.stopping)
		p.changedLocked() // a create waiting for a warm start goes on without
	}
}

// close stops the pool, waits for the refill loop to end, then destroys every
// ready warm sandbox under ctx. A refill in flight ends first: end the context
// given to start to cut it short.
func (p *warmPool) close(ctx context.Context) {
	p.stop()
	p.loop.Wait()
	p.mu.Lock()
	ws := p.ready
	p.ready = nil
	p.mu.Unlock()
	for _, w := range ws {
		p.discard(ctx, w)
	}
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
func (p *warmPool) calling() (done func()) {
	p.callers.Add(1)
	return func() {
		p.lastCall.Store(time.Now().UnixNano())
		p.callers.Add(-1)
	}
}

// awaited reports whether a create waits for a warm start in flight.
func (p *warmPool) awaited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting > 0
}

// quiet waits for quietGap without a caller, at most quietMax, or stop; not
// at all while a create waits for a warm start (await): its first exec
// comes after the start, not beside it.
func (p *warmPool) quiet() {
	deadline := time.Now().Add(quietMax)
	for {
		if p.awaited() {
			return
		}
		now := time.Now()
		wait := quietGap
		if p.callers.Load() == 0 {
			wait -= now.Sub(time.Unix(0, p.lastCall.Load()))
		}
		if wait <= 0 || !now.Before(deadline) {
			return
		}
		select {
		case <-p.stopping:
			return
		case <-p.hurry:
		case <-time.After(min(wait, deadline.Sub(now))):
		}
	}
}

// refillOne starts one warm sandbox if the pool is short; it reports whether it
// should be called again at once.
func (p *warmPool) refillOne(ctx context.Context) bool {
	p.mu.Lock()
	short := len(p.ready)+p.filling < p.size && !p.closed
	if short {
		p.filling++
	}
	p.mu.Unlock()
	if !short {
		return false
	}
	defer func() {
		p.mu.Lock()
		p.filling--
		p.changedLocked()
		p.mu.Unlock()
	}()
	// Creates that callers wait for go first: the pool takes a slot only when
	// one is free right now, and otherwise tries again shortly.
	p.quiet()
	select {
	case p.slots <- struct{}{}:
	default:
		select {
		case <-p.stopping:
			return false
		case <-time.After(20 * time.Millisecond):
			return true
		}
	}
	defer func() { <-p.slots }()
	w, err := p.newWarm(ctx)
	if errors.Is(err, errNothingWarm) {
		return false
	}
	if err != nil {
		// Back off instead of spinning on a failing backend.
		select {
		case <-p.stopping:
		case <-time.After(time.Second):
		}
		return false
	}
	// Watched before a create can take it: a failed hand-out or a Delete
	// removes the watcher it finds, and one added after them would outlive
	// the sandbox. A loss seen meanwhile waits for it to land (lose).
	p.watch(w)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.discard(context.WithoutCancel(ctx), w)
		return false
	}
	p.ready = append(p.ready, w)
	p.shape = w
	p.changedLocked()
	p.mu.Unlock()
	return true
}

// PoolStatus is the warm pool as health shows it.
type PoolStatus struct {
	Size  int
	Ready int
}

// Pool reports the warm pool's target size and how many sandboxes are ready.
func (m *Manager) Pool() PoolStatus {
	p := m.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStatus{Size: p.size, Ready: len(p.ready)}
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
	w := m.pool.await(ctx, nd.Name, spec)
	if w == nil {
		return sandbox.Sandbox{}, false
	}
	// Being created until it is live, as a cold create's sandbox is: its
	// record turns running (and listable) before adopt makes it live, and a
	// Delete in between would destroy what this create then hands out.
	m.mu.Lock()
	m.creating[w.id] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.creating, w.id)
		m.mu.Unlock()
	}()
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
	if err := m.useRules(spec); err != nil { // the request's lists, not the pool's
		log.WarnContext(ctx, "setting a warm sandbox's network rules failed; discarding it", logkey.Err, err)
		m.discardWarm(ctx, w)
		return sandbox.Sandbox{}, false
	}
	now := m.now()
	sb, err := m.commitCreate(ctx, sandbox.Sandbox{ID: w.id, State: sandbox.StateRunning, Backend: w.driver.Name,
		Spec: spec, Isolation: w.inst.Applied, Saved: w.inst.Saved, CreatedAt: now, ExpiresAt: now.Add(spec.TTL),
		OwnerKey: keyID(ctx)}, sandbox.StateWarm)
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
	m.watchers.remove(w.id)
	w.client.Close()
	m.rollback(ctx, w.driver, w.id, errDiscardWarm)
}

// nextWarm starts the pool's next warm sandbox: on the first available driver,
// in the policy's default shape. It fails with errNothingWarm when that driver
// does not sandbox or the defaults do not admit, and logs why a start failed.
func (m *Manager) nextWarm(ctx context.Context) (*warm, error) {
	nd, rep, err := m.pick(ctx)
	if err != nil || !rep.Sandbox {
		return nil, errNothingWarm // no sandboxing backend: nothing worth keeping warm
	}
	spec, err := m.poolSpec()
	if err != nil {
		m.log.ErrorContext(ctx, "warm pool: the policy's defaults do not admit", logkey.Err, err)
		return nil, errNothingWarm
	}
	spec.ID = sandbox.NewID()
	w, err := m.startWarm(ctx, nd, spec)
	if err != nil && ctx.Err() == nil {
		m.log.WarnContext(ctx, "warm pool: starting a sandbox failed", logkey.Backend, nd.Name, logkey.Err, err)
	}
	return w, err
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
	// agent's first request served, and the warm-up done (its first
	// process run: the first of its process groups, the spawn path's first
	// use, the dynamic loader's lookups through the new root), so the exec
	// that takes the sandbox pays for none of it.
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	err = client.WaitReady(rctx)
	if err == nil && !m.pool.awaited() {
		// Not for a create waiting for this start (await): its own first
		// exec does that work, and the warm-up would only come first.
		err = client.Warm(rctx)
	}
	cancel()
	if err != nil {
		return nil, err
	}
	rec.Saved, rec.Isolation = inst.Saved, inst.Applied
	if err := m.store.SwapSandbox(ctx, rec, sandbox.StateWarm); err != nil {
		return nil, err
	}
	return &warm{id: id, driver: nd, client: client, spec: spec, inst: inst}, nil
}
