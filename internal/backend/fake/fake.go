// Package fake is an in-memory backend.Driver for manager and API tests. It fails
// on demand, records its calls, and gives each sandbox an in-memory agent over
// in-process pipes: health, exec of scripted commands (others start and run
// until killed), process status and signals, and files (read, write, stat,
// upload, download, tar archives in and out). Its agents can be killed or hung
// on demand. It is a test double: it never proves a real feature.
package fake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"

	"sbx.dev/sbx/api/agent/filesystem/filesystemconnect"
	"sbx.dev/sbx/api/agent/sbxagent/sbxagentconnect"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/sandbox"
)

// Call is one recorded method call.
type Call struct {
	Method string
	ID     sandbox.ID
}

// Driver is the fake. Its zero value is not usable: call New.
type Driver struct {
	name string

	mu sync.Mutex
	// Everything below is guarded by mu.
	report       backend.Report
	probeErr     error
	applied      sandbox.Isolation
	startDelay   time.Duration
	startErrs    []error // consumed one per Start
	recoverErr   error
	destroyErrs  []error // consumed one per Destroy
	running      map[sandbox.ID]bool
	held         map[sandbox.ID]bool // host resources, for Lister
	calls        []Call
	srv          *http.Server
	lis          *backend.PipeListener
	serveStarted bool
	agents       map[sandbox.ID]*agentState // of started or recovered sandboxes
	scripts      map[string]Run             // by command (Script)
	ports        map[sandbox.ID]PortDial    // by sandbox (ServePorts)
	mux          *http.ServeMux             // the agents' routes (HandleAgent)
}

// HandleAgent adds a route to every fake agent: a test's stand-in for one
// the fake does not serve (envd's process streams).
func (d *Driver) HandleAgent(pattern string, h http.Handler) { d.mux.Handle(pattern, h) }

// agentState is the fake agent of one sandbox; d.mu guards it.
type agentState struct {
	id    sandbox.ID
	ended chan struct{} // closed when the agent ends (Kill, Stop, Destroy)
	exit  sandbox.Exit  // set before ended closes
	hung  bool          // reads on its connections block until they close
	conns []*agentConn  // client ends of its connections

	procs    map[string]*process // by process id (agent.go)
	started  int                 // processes started, numbering their ids
	files    map[string]*file    // by absolute path (files.go)
	archives []Archive           // archive bodies received, oldest first
}

// New returns a fake driver reporting itself as name, available, as a sandbox
// with every layer applied.
func New(name string) *Driver {
	layers := map[string]sandbox.LayerState{}
	for _, l := range sandbox.AllLayers {
		layers[l] = sandbox.Applied
	}
	d := &Driver{
		name: name,
		report: backend.Report{Backend: name, Available: true, Level: "fake", Sandbox: true, Layers: layers,
			Checks: []backend.Check{{Name: "fake", OK: true}}},
		applied: sandbox.Isolation{Backend: name, Level: "fake", Layers: layers, Sandbox: true, Cgroup: "none"},
		running: map[sandbox.ID]bool{},
		held:    map[sandbox.ID]bool{},
		agents:  map[sandbox.ID]*agentState{},
		scripts: map[string]Run{},
	}
	d.lis = backend.NewPipeListener("fake-agent")
	g := &agent{d: d}
	mux := http.NewServeMux()
	mux.Handle(sbxagentconnect.NewAgentHandler(g))
	mux.Handle(filesystemconnect.NewFilesystemHandler(g))
	mux.HandleFunc("GET /files", g.download)
	mux.HandleFunc("POST /files", g.upload)
	mux.HandleFunc("GET /files/archive", g.downloadArchive)
	mux.HandleFunc("POST /files/archive", g.extractArchive)
	d.mux = mux
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	d.srv = &http.Server{Handler: mux, Protocols: &p, ReadHeaderTimeout: 10 * time.Second,
		// One server serves every sandbox: a call finds its agent by its connection.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if sc, ok := c.(*serverConn); ok {
				return context.WithValue(ctx, agentKey{}, sc.a)
			}
			return ctx
		}}
	return d
}

// Open is a backend.Opener for the registry: a fresh driver named "fake".
func Open(ctx context.Context, opts backend.Options) (backend.Driver, error) {
	return New("fake"), nil
}

// Close stops the in-process agent server; dialled connections end.
func (d *Driver) Close() error {
	d.mu.Lock()
	started := d.serveStarted
	d.serveStarted = true // no server after Close
	d.mu.Unlock()
	d.lis.Close()
	if started {
		return d.srv.Close()
	}
	return nil
}

// SetAvailable makes Probe report the driver (un)available, with reason.
func (d *Driver) SetAvailable(ok bool, reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.report.Available = ok
	d.report.Checks = []backend.Check{{Name: "fake", OK: ok, Reason: reason}}
}

// SetSandbox makes the driver report itself as not a sandbox (as local does).
func (d *Driver) SetSandbox(isSandbox bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.report.Sandbox = isSandbox
	d.applied.Sandbox = isSandbox
	if !isSandbox {
		d.applied.Level = "none"
		d.report.Level = "none"
		d.applied.Layers = map[string]sandbox.LayerState{}
		d.report.Layers = map[string]sandbox.LayerState{}
	}
}

// FailProbe makes Probe itself fail with err (nil clears it).
func (d *Driver) FailProbe(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.probeErr = err
}

// SetLayer sets what Start reports as applied for layer.
func (d *Driver) SetLayer(layer string, st sandbox.LayerState) {
	d.mu.Lock()
	defer d.mu.Unlock()
	layers := map[string]sandbox.LayerState{}
	for k, v := range d.applied.Layers {
		layers[k] = v
	}
	layers[layer] = st
	d.applied.Layers = layers
}

// SetStartDelay makes each Start take d, or end early with ctx.
func (d *Driver) SetStartDelay(delay time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.startDelay = delay
}

// FailNextStart makes the next Start fail with err (queued: one per call).
func (d *Driver) FailNextStart(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.startErrs = append(d.startErrs, err)
}

// FailRecover makes every Recover fail with err (nil clears it).
func (d *Driver) FailRecover(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.recoverErr = err
}

// FailNextDestroy makes the next Destroy fail with err (queued: one per call).
func (d *Driver) FailNextDestroy(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.destroyErrs = append(d.destroyErrs, err)
}

// Hold pretends the driver holds host resources for id (for Lister).
func (d *Driver) Hold(id sandbox.ID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held[id] = true
}

// Calls returns the recorded calls, oldest first.
func (d *Driver) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.calls)
}

// Called reports how many times method was called for id ("" for any id).
func (d *Driver) Called(method string, id sandbox.ID) int {
	n := 0
	for _, c := range d.Calls() {
		if c.Method == method && (id == "" || c.ID == id) {
			n++
		}
	}
	return n
}

// Held lists the ids the driver holds resources for, sorted.
func (d *Driver) Held() []sandbox.ID {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []sandbox.ID
	for id := range d.held {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (d *Driver) record(method string, id sandbox.ID) {
	d.calls = append(d.calls, Call{Method: method, ID: id})
}

// Probe implements backend.Driver.
func (d *Driver) Probe(ctx context.Context) (backend.Report, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record("Probe", "")
	if d.probeErr != nil {
		return backend.Report{}, d.probeErr
	}
	r := d.report
	r.Checks = slices.Clone(r.Checks)
	return r, nil
}

// Start implements backend.Driver.
func (d *Driver) Start(ctx context.Context, spec sandbox.Spec) (*backend.Instance, error) {
	d.mu.Lock()
	d.record("Start", spec.ID)
	delay := d.startDelay
	var err error
	if len(d.startErrs) > 0 {
		err, d.startErrs = d.startErrs[0], d.startErrs[1:]
	}
	if err == nil {
		d.held[spec.ID] = true // resources exist while starting, as in a real driver
	}
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			d.mu.Lock()
			delete(d.held, spec.ID)
			d.mu.Unlock()
			return nil, fmt.Errorf("starting %s: %w", spec.ID, context.Cause(ctx))
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Like a real driver, report what is applied (Instance.Applied) and let the
	// manager judge it against spec.RequireLayers.
	d.running[spec.ID] = true
	return d.instance(spec.ID), nil
}

// instance returns the Instance of id, with a fresh agent unless one lives;
// d.mu must be held.
func (d *Driver) instance(id sandbox.ID) *backend.Instance {
	iso := d.applied
	iso.Layers = map[string]sandbox.LayerState{}
	for k, v := range d.applied.Layers {
		iso.Layers[k] = v
	}
	if a := d.agents[id]; a == nil || isClosed(a.ended) {
		d.agents[id] = &agentState{id: id, ended: make(chan struct{}), procs: map[string]*process{}, files: map[string]*file{}}
	}
	dial := func(ctx context.Context) (net.Conn, error) { return d.dial(ctx, id) }
	return &backend.Instance{ID: id, Dial: dial, Applied: iso, Saved: []byte("fake:" + string(id))}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Kill ends sandbox id's agent as a crash would: Wait returns exit, its
// connections break, and dialing it is refused.
func (d *Driver) Kill(id sandbox.ID, exit sandbox.Exit) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.endAgent(id, exit)
}

// Hang makes sandbox id's agent stop answering while it lives on: reads on its
// connections, open and future, block until the connection closes.
func (d *Driver) Hang(id sandbox.ID) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if a := d.agents[id]; a != nil {
		a.hung = true
	}
}

// endAgent ends id's agent with exit; d.mu must be held.
func (d *Driver) endAgent(id sandbox.ID, exit sandbox.Exit) {
	a := d.agents[id]
	if a == nil || isClosed(a.ended) {
		return
	}
	a.exit = exit
	close(a.ended)
	for _, c := range a.conns {
		c.server.Close() // the client end reads EOF, as from a dead process
		c.closeOnce.Do(func() { close(c.closed) })
	}
	a.conns = nil
}

// Stop implements backend.Driver.
func (d *Driver) Stop(ctx context.Context, id sandbox.ID, grace time.Duration) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record("Stop", id)
	if !d.held[id] {
		return fmt.Errorf("sandbox %s %w", id, sandbox.ErrNotFound)
	}
	delete(d.running, id)
	d.endAgent(id, sandbox.Exit{Code: 128 + int(syscall.SIGKILL), Signal: int(syscall.SIGKILL), Reason: sandbox.ReasonSignaled})
	return nil
}

// Wait implements backend.Driver: it returns once the agent was killed, stopped
// or destroyed.
func (d *Driver) Wait(ctx context.Context, id sandbox.ID) (sandbox.Exit, error) {
	d.mu.Lock()
	d.record("Wait", id)
	a := d.agents[id]
	d.mu.Unlock()
	if a == nil {
		return sandbox.Exit{}, fmt.Errorf("waiting for sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	select {
	case <-a.ended:
		d.mu.Lock()
		defer d.mu.Unlock()
		return a.exit, nil
	case <-ctx.Done():
		return sandbox.Exit{}, context.Cause(ctx)
	}
}

// Destroy implements backend.Driver.
func (d *Driver) Destroy(ctx context.Context, id sandbox.ID) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record("Destroy", id)
	if len(d.destroyErrs) > 0 {
		var err error
		err, d.destroyErrs = d.destroyErrs[0], d.destroyErrs[1:]
		if err != nil {
			return err
		}
	}
	delete(d.running, id)
	delete(d.held, id)
	d.endAgent(id, sandbox.Exit{Code: 128 + int(syscall.SIGKILL), Signal: int(syscall.SIGKILL), Reason: sandbox.ReasonSignaled})
	return nil
}

// Recover implements backend.Driver: saved must be what Start handed out.
func (d *Driver) Recover(ctx context.Context, id sandbox.ID, saved []byte) (*backend.Instance, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record("Recover", id)
	if d.recoverErr != nil {
		return nil, d.recoverErr
	}
	if string(saved) != "fake:"+string(id) {
		return nil, fmt.Errorf("recovering %s: saved state %w", id, sandbox.ErrNotFound)
	}
	if a := d.agents[id]; a != nil && isClosed(a.ended) {
		return nil, fmt.Errorf("recovering %s: its agent is gone: %w", id, sandbox.ErrNotFound)
	}
	d.held[id] = true
	d.running[id] = true
	return d.instance(id), nil
}

// ListHeld implements backend.Lister.
func (d *Driver) ListHeld(ctx context.Context) ([]sandbox.ID, error) {
	return d.Held(), nil
}

func (d *Driver) dial(ctx context.Context, id sandbox.ID) (net.Conn, error) {
	d.mu.Lock()
	if !d.serveStarted {
		d.serveStarted = true
		go d.srv.Serve(d.lis)
	}
	a := d.agents[id]
	if a == nil || isClosed(a.ended) {
		d.mu.Unlock()
		return nil, fmt.Errorf("dialing fake agent of %s: %w", id, syscall.ECONNREFUSED)
	}
	client, server := net.Pipe()
	c := &agentConn{Conn: client, server: server, closed: make(chan struct{}), d: d, a: a}
	a.conns = append(a.conns, c)
	d.mu.Unlock()
	if err := d.lis.Hand(ctx, &serverConn{Conn: server, a: a}); err != nil {
		client.Close()
		server.Close()
		if errors.Is(err, net.ErrClosed) {
			return nil, fmt.Errorf("dialing fake agent: %w", err)
		}
		return nil, err
	}
	return c, nil
}

// agentConn is the client end of a connection to a fake agent.
type agentConn struct {
	net.Conn
	server    net.Conn
	closed    chan struct{}
	closeOnce sync.Once
	d         *Driver
	a         *agentState
}

// Read blocks until the connection closes while the agent is hung.
func (c *agentConn) Read(p []byte) (int, error) {
	c.d.mu.Lock()
	hung := c.a.hung
	c.d.mu.Unlock()
	if hung {
		<-c.closed
		return 0, net.ErrClosed
	}
	return c.Conn.Read(p)
}

func (c *agentConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// serverConn is the agent's end of a connection, naming the agent it reaches.
type serverConn struct {
	net.Conn
	a *agentState
}

var (
	_ backend.Driver = (*Driver)(nil)
	_ backend.Lister = (*Driver)(nil)
)

// Resize implements backend.Resizer; it records the call.
func (d *Driver) Resize(ctx context.Context, id sandbox.ID, spec sandbox.Spec) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record("Resize", id)
	return nil
}

var _ backend.Resizer = (*Driver)(nil)
