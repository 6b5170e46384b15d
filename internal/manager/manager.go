// Package manager owns the life of sandboxes: admission through a bounded queue,
// create, exec and file calls through the agent, TTL expiry, destroy, and recovery
// of what the store knows at start. It sees drivers only through package backend.
package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/secrets"
	"sbx.dev/sbx/internal/store"
)

// NamedDriver is one entry of the SANDBOX_BACKEND fallback list.
type NamedDriver struct {
	Name   string
	Driver backend.Driver
}

// Options configure a Manager.
type Options struct {
	Store *store.Store
	// Drivers in fallback order: the first available one creates sandboxes.
	Drivers []NamedDriver
	Policy  sandbox.Policy
	Log     *slog.Logger
	// MaxConcurrentCreates bounds creates in flight; others wait in the queue.
	// 0 means 2×Cores.
	MaxConcurrentCreates int
	// Cores is how many CPUs the host's sandboxes share (the pool refills
	// one per core); 0 means GOMAXPROCS.
	Cores int
	// QueueTimeout bounds the wait in the queue before ErrUnavailable (503).
	// 0 means DefaultQueueTimeout.
	QueueTimeout time.Duration
	// Now is the wall clock: created_at, expires_at and every time the store
	// keeps; nil means time.Now.
	Now func() time.Time
	// Elapsed is the monotonic clock the running TTL timers use: how long the
	// process has been up; nil means the time since New by the monotonic
	// reading. Only the time left crosses from the wall clock to this one (at
	// create, PATCH and re-adoption), so a jump of the wall clock expires
	// nothing.
	Elapsed func() time.Duration
	// Unopened are configured drivers that failed to open: Health reports them
	// unavailable with the reason, and their sandboxes wait in
	// recovery_required for a start where they open.
	Unopened []UnopenedDriver
	// PoolSize is how many sandboxes of the policy's default shape are kept
	// started ahead of demand (0: none). Creates that fit take one instead of
	// starting cold.
	PoolSize int
	// Limits bound each API key's and all keys' sandboxes and call rates; the
	// zero value limits nothing.
	Limits Limits
	// AuditRetention is how long audit records are kept (0: no age bound);
	// AuditMaxRecords how many at most (0: no count bound).
	AuditRetention  time.Duration
	AuditMaxRecords int
	// Network is the egress path of the allowlist and full tiers (nil: the
	// daemon offers none).
	Network Network
	// Heartbeat is the time between two health checks of every agent; each
	// check may take three quarters of it, and three misses in a row lose the
	// agent. 0 means DefaultHeartbeat.
	Heartbeat time.Duration
	// PreviewSecret keys the sandboxes' preview tokens (preview.go); nil
	// means a random one for this process's life.
	PreviewSecret []byte
	// SecretBox seals and opens the values of the secret store (secrets.go),
	// under the key in the data dir's secrets.key; nil: the daemon keeps no
	// secrets, and every secret call fails with ErrUnavailable.
	SecretBox *secrets.Box
	// ProxySecrets is the egress proxy's side of proxy-mode secrets; nil:
	// a proxy-mode secret is refused.
	ProxySecrets ProxySecrets
}

// UnopenedDriver is a configured driver that failed to open.
type UnopenedDriver struct {
	Name string
	Err  error
}

// DefaultQueueTimeout is how long a create waits in the queue by default.
const DefaultQueueTimeout = 60 * time.Second

const (
	// cleanupTimeout bounds a Destroy that must run after its request ended.
	cleanupTimeout = 60 * time.Second
	// readyTimeout bounds the wait for a new sandbox's agent to answer.
	readyTimeout = 30 * time.Second
	// reprobeInterval is the least time between two probes of the drivers
	// triggered by failing creates.
	reprobeInterval = 5 * time.Second
)

// errShutdown ends the manager's lifetime and answers creates after Close.
var errShutdown = fmt.Errorf("%w: shutting down", sandbox.ErrUnavailable)

// Manager is safe for concurrent use.
type Manager struct {
	store        *store.Store
	drivers      []NamedDriver
	unopened     []UnopenedDriver
	policy       sandbox.Policy
	log          *slog.Logger
	now          func() time.Time
	elapsed      func() time.Duration
	slots        chan struct{} // create admission: one token per create in flight
	keys         keyCache
	queueTimeout time.Duration
	network      Network
	box          *secrets.Box // nil: no secret store
	proxy        ProxySecrets // nil: no proxy-mode secrets
	// The components, each with its own lock (the auditor needs none) and
	// lifecycle; Close stops them.
	limits   *limiter
	pool     *warmPool
	watchers *watchers
	auditor  *auditor

	preview previewKey // signs preview tokens
	owners  ownerCache // the keys of sandboxes' owners (OwnerKey)
	// goneFns are called as sandboxes go (OnGone).
	goneMu  sync.Mutex
	goneFns []func(sandbox.ID)

	idemMu  sync.Mutex
	flights map[flightKey]*flight // guarded by idemMu

	lifetime context.Context // ends at Close, with errShutdown
	cancel   context.CancelCauseFunc
	closing  chan struct{} // closed when Close begins
	reaper   sync.WaitGroup
	wake     chan struct{} // nudges the reaper; buffered 1

	mu sync.Mutex
	// Everything below is guarded by mu. Lock order: mu, then pool.mu or
	// watchers.mu, never both at once; limits.mu and idemMu are taken with
	// no other lock held.
	closed        bool
	inflight      sync.WaitGroup // creates admitted before Close
	live          map[sandbox.ID]*liveSandbox
	creating      map[sandbox.ID]bool // creates in flight in this process
	deleting      map[sandbox.ID]bool
	reports       []probe
	probedAt      time.Time
	reaperStarted bool
}

// liveSandbox is a running sandbox this process can reach.
type liveSandbox struct {
	client  *agentclient.Client
	backend string
	// due is when the sandbox expires on the monotonic clock (Elapsed): its
	// reading when the time left was measured plus that time, so a jump of the
	// wall clock does not make it expire.
	due time.Duration
	// lost says why the agent was lost (watch.go); empty while it serves.
	// Guarded by Manager.mu.
	lost string
}

// probe is a cached driver Report.
type probe struct {
	report backend.Report
	err    error
}

// New returns a manager; call Recover before serving.
func New(ctx context.Context, opts Options) (*Manager, error) {
	if opts.Store == nil {
		return nil, errors.New("manager: no store")
	}
	if len(opts.Drivers) == 0 && len(opts.Unopened) == 0 {
		return nil, errors.New("manager: no drivers")
	}
	if err := opts.Policy.Check(); err != nil {
		return nil, fmt.Errorf("manager: %w", err)
	}
	cores := cmp.Or(opts.Cores, runtime.GOMAXPROCS(0))
	n := opts.MaxConcurrentCreates
	if n <= 0 {
		n = 2 * cores
	}
	qt := opts.QueueTimeout
	if qt <= 0 {
		qt = DefaultQueueTimeout
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	elapsed := opts.Elapsed
	if elapsed == nil {
		began := time.Now()
		elapsed = func() time.Duration { return time.Since(began) }
	}
	lifetime, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	m := &Manager{
		store:        opts.Store,
		drivers:      opts.Drivers,
		unopened:     opts.Unopened,
		policy:       opts.Policy,
		log:          log.With(logkey.Component, "manager"),
		now:          now,
		elapsed:      elapsed,
		slots:        make(chan struct{}, n),
		queueTimeout: qt,
		network:      opts.Network,
		box:          opts.SecretBox,
		proxy:        opts.ProxySecrets,
		lifetime:     lifetime,
		cancel:       cancel,
		closing:      make(chan struct{}),
		wake:         make(chan struct{}, 1),
		live:         map[sandbox.ID]*liveSandbox{},
		creating:     map[sandbox.ID]bool{},
		deleting:     map[sandbox.ID]bool{},
		limits:       newLimiter(opts.Limits),
		flights:      map[flightKey]*flight{},
		preview:      newPreviewKey(opts.PreviewSecret),
	}
	m.watchers = newWatchers(lifetime, cmp.Or(opts.Heartbeat, DefaultHeartbeat), m.log, m.lose)
	m.pool = newWarmPool(opts.PoolSize, cores, m.slots, m.nextWarm, m.discardWarm, func(w *warm) {
		m.watchers.add(w.id, w.driver.Name, w.driver.Driver, w.client)
	})
	m.auditor = newAuditor(opts.Store, now, log.With(logkey.Component, "audit"),
		opts.AuditRetention, opts.AuditMaxRecords, m.pruneIdempotency)
	m.probeAll(ctx)
	m.auditor.start(lifetime)
	return m, nil
}

// Close stops admitting work, waits for in-flight creates within ctx, stops the
// reaper and the agent watchers, destroys the warm pool's sandboxes, and writes
// the audit records queued. Other sandboxes keep running.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.closing)
	// With mu held, so no refill and no watcher starts once closed is set.
	m.pool.stop()
	m.watchers.stop()
	m.mu.Unlock()

	done := make(chan struct{})
	go func() {
		m.inflight.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("waiting for creates in flight: %w", context.Cause(ctx))
	}
	m.cancel(errShutdown) // ends the watchers too: a shutdown is not an agent loss
	m.reaper.Wait()
	m.watchers.close()
	m.pool.close(context.WithoutCancel(ctx))
	m.auditor.close() // after the reaper and the pool: their records are written

	m.mu.Lock()
	for id, l := range m.live {
		l.client.Close()
		delete(m.live, id)
	}
	m.mu.Unlock()
	for _, d := range m.drivers {
		if c, ok := d.Driver.(backend.Closer); ok {
			if cerr := c.Close(ctx); cerr != nil {
				m.log.WarnContext(ctx, "closing a driver", logkey.Backend, d.Name, logkey.Err, cerr)
			}
		}
	}
	return err
}

// driver returns the configured driver named name, or nil.
func (m *Manager) driver(name string) backend.Driver {
	for _, d := range m.drivers {
		if d.Name == name {
			return d.Driver
		}
	}
	return nil
}

// notFound is the one error for an id that names no sandbox.
func notFound(op string, id sandbox.ID) error {
	if len(id) > 64 {
		id = id[:64]
	}
	return &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("sandbox %w", sandbox.ErrNotFound)}
}

// checkID validates id's shape; a malformed id is reported as not found.
func checkID(op string, id sandbox.ID) error {
	if _, err := sandbox.ParseID(string(id)); err != nil {
		return notFound(op, id)
	}
	return nil
}

// cleanupContext returns a context for teardown that outlives ctx, boundedly.
func cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}
