// This file implements the driver: its probe, and the remote sandbox's
// lifecycle through E2B's control plane (create, stop, wait, destroy,
// recover, list) with the lease that keeps a held sandbox alive.

package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	ppb "sbx.dev/sbx/api/agent/process"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// Name is the driver's name in the registry and in SANDBOX_BACKEND.
const Name = "e2b"

// Metadata keys the driver puts on every remote sandbox it creates: the
// daemon instance and the sbx sandbox it stands for, so ListHeld and a
// Destroy without a record find the instance's own.
const (
	metaInstance = "sbx.instance"
	metaSandbox  = "sbx.sandbox"
)

// The remote's timeout is a lease: a sandbox is created with its TTL plus
// leaseMargin (at most lease), and while the driver holds it, it renews
// the lease every renewEvery; the daemon's own TTL ends it. A remote
// sandbox the daemon lost (it crashed, say) ends within lease.
const (
	lease       = 10 * time.Minute
	leaseMargin = time.Minute
	renewEvery  = time.Minute
)

// pollEvery is how often the driver looks for held sandboxes the remote no
// longer runs (killed there, or timed out), for Wait.
const pollEvery = 2 * time.Second

// cleanupTimeout bounds what a cleanup does after its caller's context
// ended: deleting what a cancelled create made.
const cleanupTimeout = 30 * time.Second

// Driver runs sandboxes on an E2B-compatible server.
type Driver struct {
	instance    string
	api         *api
	sandboxURL  string // configured (e2b.sandbox_url), no trailing slash; "" derives it (envdBase)
	template    string
	outputLimit int64
	log         *slog.Logger
	opened      time.Time

	tr  *http.Transport
	srv *http.Server
	lis *backend.PipeListener

	// ctx is the driver's lifetime: Close ends it.
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	serveOnce sync.Once

	mu      sync.Mutex
	remotes map[sandbox.ID]*remote // guarded by mu: the sandboxes held
}

// saved is Instance.Saved: what Recover needs to reach the remote sandbox.
type saved struct {
	RemoteID    string `json:"remote_id"`
	AccessToken string `json:"access_token,omitempty"`
	EnvdURL     string `json:"envd_url,omitempty"`
}

// e2bDomains are the domains whose sandboxes E2B's proxy reaches at
// sandbox.<domain> with the routing headers (E2B-CONTRACT.md §2).
var e2bDomains = []string{"e2b.app", "e2b.dev", "e2b.pro", "e2b-staging.dev"}

// envdBase is where remote sandbox rid's envd is reached, as E2B's SDK
// finds it: e2b.sandbox_url when set; else from the domain the create
// answered (sandbox.<domain> for E2B's own, <port>-<id>.<domain> for
// others); else the control plane's URL (another sbx serves both).
func (d *Driver) envdBase(rid string, domain *string) string {
	switch {
	case d.sandboxURL != "":
		return d.sandboxURL
	case domain == nil || *domain == "":
		return d.api.base
	case slices.Contains(e2bDomains, *domain):
		return "https://sandbox." + *domain
	}
	return "https://" + envdPort + "-" + rid + "." + *domain
}

// Open is the backend.Opener of the e2b driver.
func Open(ctx context.Context, opts backend.Options) (backend.Driver, error) {
	return open(opts), nil
}

func open(opts backend.Options) *Driver {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	template := opts.E2B.Template
	if template == "" {
		template = "base"
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Driver{
		instance:    opts.Instance,
		api:         &api{base: strings.TrimRight(opts.E2B.URL, "/"), key: opts.E2B.APIKey, hc: &http.Client{Transport: tr}},
		sandboxURL:  strings.TrimRight(opts.E2B.SandboxURL, "/"),
		template:    template,
		outputLimit: opts.OutputLimitBytes,
		log:         log.With(logkey.Component, Name),
		opened:      time.Now(),
		tr:          tr,
		lis:         backend.NewPipeListener("e2b-agent-adapter"),
		ctx:         ctx,
		cancel:      cancel,
		remotes:     map[sandbox.ID]*remote{},
	}
	if d.outputLimit <= 0 {
		d.outputLimit = 1 << 20
	}
	d.srv = d.newServer()
	d.wg.Go(d.keep)
	return d
}

// layers is what the driver reports of every isolation layer: missing,
// since the remote reports nothing of how it isolates.
func layers() (map[string]sandbox.LayerState, map[string]string) {
	st, why := map[string]sandbox.LayerState{}, map[string]string{}
	for _, l := range sandbox.AllLayers {
		st[l] = sandbox.Missing
		why[l] = "an E2B server reports nothing about how it isolates a sandbox, so sbx claims no layer for it; accept the gap in policy.allow_missing to use the e2b backend"
	}
	return st, why
}

// isolation is Instance.Applied: no layer claimed.
func isolation() sandbox.Isolation {
	st, _ := layers()
	return sandbox.Isolation{Backend: Name, Level: sandbox.LevelName(Name, st), Layers: st, Cgroup: "none", Sandbox: true,
		Warning: "e2b backend: isolation is the remote E2B server's, which reports none of it to sbx"}
}

// Probe implements backend.Driver: the URL and key are configured, and
// the remote answers a list with them.
func (d *Driver) Probe(ctx context.Context) (backend.Report, error) {
	st, why := layers()
	rep := backend.Report{Backend: Name, Level: sandbox.LevelName(Name, st), Sandbox: true, Layers: st, LayerReasons: why}
	check := func(name string, err error) bool {
		c := backend.Check{Name: name, OK: err == nil}
		if err != nil {
			c.Reason = err.Error()
		}
		rep.Checks = append(rep.Checks, c)
		return err == nil
	}
	if !check("e2b.url", d.urlErr()) || !check("e2b.api_key", d.keyErr()) {
		return rep, nil
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var page []sandboxBody
	_, err := d.api.do(pctx, http.MethodGet, "/v2/sandboxes", url.Values{"limit": {"1"}}, nil, &page)
	switch s := statusOf(err); {
	case err == nil:
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		err = fmt.Errorf("%s refused the API key (e2b.api_key, SBX_E2B_API_KEY): %v", d.api.base, err)
	case s != 0:
		err = fmt.Errorf("GET %s/v2/sandboxes: %v", d.api.base, err)
	default:
		err = fmt.Errorf("%s is not reachable (e2b.url, SBX_E2B_URL): %v", d.api.base, err)
	}
	rep.Available = check("e2b.reachable", err)
	return rep, nil
}

func (d *Driver) urlErr() error {
	if d.api.base == "" {
		return errors.New("no E2B server configured: set e2b.url (SBX_E2B_URL), e.g. https://api.e2b.app")
	}
	return nil
}

func (d *Driver) keyErr() error {
	if d.api.key == "" {
		return errors.New("no API key: set e2b.api_key_file or SBX_E2B_API_KEY")
	}
	return nil
}

// Start implements backend.Driver: it creates the remote sandbox and hands
// back the adapter's dial. A failed Start deletes what it made.
func (d *Driver) Start(ctx context.Context, spec sandbox.Spec) (*backend.Instance, error) {
	const op = "start"
	fail := func(err error) (*backend.Instance, error) { return nil, &sandbox.Error{Op: op, ID: spec.ID, Err: err} }
	if len(spec.RequireLayers) > 0 {
		return fail(fmt.Errorf("%w: the e2b backend cannot apply %s: an E2B server reports nothing about how it isolates a sandbox; "+
			"to run sandboxes there anyway, accept every layer in policy.allow_missing (SBX_ALLOW_MISSING)",
			sandbox.ErrIsolation, strings.Join(spec.RequireLayers, ", ")))
	}
	if err := errors.Join(d.urlErr(), d.keyErr()); err != nil {
		return fail(fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err))
	}
	body, err := d.newSandbox(spec)
	if err != nil {
		return fail(err)
	}
	sb, err := d.create(ctx, spec.ID, body)
	if err != nil {
		return fail(err)
	}
	r := d.newRemote(spec.ID, sb.SandboxID, sb.EnvdAccessToken, d.envdBase(sb.SandboxID, sb.Domain))
	if err := r.health(ctx); err != nil {
		r.release(time.Second)
		d.cleanup(ctx, spec.ID, sb.SandboxID)
		if ctx.Err() != nil {
			return fail(context.Cause(ctx))
		}
		return fail(fmt.Errorf("%w: the remote sandbox %s started but its envd does not serve: %v", sandbox.ErrUnavailable, sb.SandboxID, err))
	}
	d.mu.Lock()
	d.remotes[spec.ID] = r
	d.mu.Unlock()
	d.log.Debug("remote sandbox created", logkey.SandboxID, spec.ID, "remote_id", sb.SandboxID, "template", body.TemplateID)
	return d.instanceOf(r), nil
}

// newSandbox is the create request for spec: the template, the TTL as the
// first lease, the metadata naming the instance and sandbox, the
// environment, and the network tier in E2B's terms.
func (d *Driver) newSandbox(spec sandbox.Spec) (newSandboxBody, error) {
	tmpl := spec.Template
	if tmpl == "" || tmpl == sandbox.TemplateHost {
		tmpl = d.template
	}
	body := newSandboxBody{TemplateID: tmpl, Timeout: seconds(min(spec.TTL+leaseMargin, lease)),
		Metadata: map[string]string{metaInstance: d.instance, metaSandbox: string(spec.ID)}, EnvVars: maps.Clone(spec.Env)}
	yes, no := true, false
	switch spec.Network {
	case sandbox.NetworkNone, "":
		body.AllowInternetAccess = &no
	case sandbox.NetworkFull:
		body.AllowInternetAccess = &yes
		if len(spec.NetworkBlock) > 0 {
			body.Network = &networkBody{DenyOut: slices.Clone(spec.NetworkBlock)}
		}
	case sandbox.NetworkAllowlist:
		// E2B's allowlist: everything denied, the listed destinations
		// allowed again (allowOut wins over denyOut).
		if len(spec.NetworkAllow) == 0 {
			return body, sandbox.Invalid("network.allow", "the allowlist tier needs at least one destination on the e2b backend")
		}
		body.Network = &networkBody{AllowOut: slices.Clone(spec.NetworkAllow), DenyOut: append([]string{"0.0.0.0/0"}, spec.NetworkBlock...)}
	default:
		return body, sandbox.Invalid("network.mode", "%q has no equivalent on an E2B server", spec.Network)
	}
	return body, nil
}

// create sends the create request. It is not cut short by ctx: a create
// the remote may have carried out is awaited (for cleanupTimeout past
// ctx's end at most) and deleted when ctx ended meanwhile, so a cancelled
// Start leaves no remote sandbox.
func (d *Driver) create(ctx context.Context, id sandbox.ID, body newSandboxBody) (sandboxBody, error) {
	type answer struct {
		sb  sandboxBody
		err error
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout+cleanupTimeout)
	stop := context.AfterFunc(d.ctx, cancel) // the driver's Close: what it made is reaped at the next start
	done := make(chan answer, 1)
	d.wg.Go(func() {
		defer cancel()
		defer stop()
		sb, err := d.api.create(cctx, body)
		done <- answer{sb, err}
	})
	var a answer
	select {
	case a = <-done:
		if a.err == nil && ctx.Err() == nil {
			return a.sb, nil
		}
	case <-ctx.Done():
		t := time.NewTimer(cleanupTimeout)
		select {
		case a = <-done:
		case <-t.C:
			d.log.Warn("a cancelled create is still in flight; the sandbox it may make is deleted when found (gc, or the next start)",
				logkey.SandboxID, id)
			d.wg.Go(func() {
				a := <-done
				d.cleanup(context.Background(), id, a.sb.SandboxID)
			})
			return sandboxBody{}, context.Cause(ctx)
		}
		t.Stop()
	}
	if a.err == nil || statusOf(a.err) == 0 { // made, or perhaps made: find it and delete it
		d.cleanup(ctx, id, a.sb.SandboxID)
	}
	if ctx.Err() != nil {
		return sandboxBody{}, context.Cause(ctx)
	}
	switch s := statusOf(a.err); s {
	case http.StatusBadRequest, http.StatusNotFound:
		return sandboxBody{}, fmt.Errorf("%w: the e2b server refused to create a sandbox of template %q: %v", sandbox.ErrInvalid, body.TemplateID, a.err)
	}
	return sandboxBody{}, fmt.Errorf("creating the remote sandbox: %w", classify(a.err))
}

// cleanup deletes remote sandbox rid ("" when unknown) and whatever else
// the remote runs for sandbox id of this instance, under cleanupTimeout
// past ctx.
func (d *Driver) cleanup(ctx context.Context, id sandbox.ID, rid string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := d.destroyRemote(cctx, id, rid); err != nil {
		d.log.Error("deleting the remote sandbox of a failed start; gc or the next start reaps it", logkey.SandboxID, id, logkey.Err, err)
	}
}

// destroyRemote kills remote sandbox rid and every other remote sandbox of
// this instance standing for id.
func (d *Driver) destroyRemote(ctx context.Context, id sandbox.ID, rid string) error {
	var errs []error
	if rid != "" {
		if err := d.api.kill(ctx, rid); err != nil {
			errs = append(errs, fmt.Errorf("deleting remote sandbox %s: %w", rid, classify(err)))
		}
	}
	found, err := d.api.list(ctx, map[string]string{metaInstance: d.instance, metaSandbox: string(id)})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("listing the remote sandboxes of %s: %w", id, classify(err)))...)
	}
	for _, sb := range found {
		if sb.SandboxID == rid || !d.ours(sb, id) {
			continue
		}
		if err := d.api.kill(ctx, sb.SandboxID); err != nil {
			errs = append(errs, fmt.Errorf("deleting remote sandbox %s: %w", sb.SandboxID, classify(err)))
		}
	}
	return errors.Join(errs...)
}

// ours reports whether remote sandbox sb stands for sandbox id of this
// instance (any of its sandboxes when id is empty): the filter is the
// remote's, checked again here.
func (d *Driver) ours(sb sandboxBody, id sandbox.ID) bool {
	return sb.Metadata[metaInstance] == d.instance && (id == "" || sb.Metadata[metaSandbox] == string(id))
}

// instanceOf is the backend.Instance of r.
func (d *Driver) instanceOf(r *remote) *backend.Instance {
	sv, _ := json.Marshal(saved{RemoteID: r.rid, AccessToken: r.token, EnvdURL: r.base})
	return &backend.Instance{ID: r.id, Applied: isolation(), Saved: sv, Serving: true,
		Dial: func(ctx context.Context) (net.Conn, error) { return d.dial(ctx, r) }}
}

func (d *Driver) held(id sandbox.ID) *remote {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.remotes[id]
}

// Stop implements backend.Driver. It ends every process envd lists,
// SIGTERM first and SIGKILL after grace, then kills the remote sandbox:
// only that reaches what envd does not list (a daemonized descendant).
// E2B has no way to end every process and keep the files, so the files go
// with it.
func (d *Driver) Stop(ctx context.Context, id sandbox.ID, grace time.Duration) error {
	r := d.held(id)
	if r == nil {
		return &sandbox.Error{Op: "stop", ID: id, Err: fmt.Errorf("sandbox %w (this driver does not hold it)", sandbox.ErrNotFound)}
	}
	var errs []error
	if grace > 0 {
		if err := r.signalAll(ctx, syscall.SIGTERM); err != nil {
			errs = append(errs, err)
		}
		r.awaitNone(ctx, grace)
	}
	if err := r.signalAll(ctx, syscall.SIGKILL); err != nil {
		errs = append(errs, err)
	}
	if err := d.api.kill(ctx, r.rid); err != nil {
		errs = append(errs, fmt.Errorf("deleting remote sandbox %s: %w", r.rid, classify(err)))
	} else {
		r.killAll()
		r.end(sandbox.Exit{Code: 128 + int(syscall.SIGKILL), Signal: int(syscall.SIGKILL), Reason: sandbox.ReasonKilled})
	}
	if err := errors.Join(errs...); err != nil {
		return &sandbox.Error{Op: "stop", ID: id, Err: err}
	}
	return nil
}

// signalAll sends sig to every process the remote's envd lists.
func (r *remote) signalAll(ctx context.Context, sig syscall.Signal) error {
	resp, err := r.proc.List(ctx, connect.NewRequest(&ppb.ListRequest{}))
	if err != nil {
		if connect.CodeOf(err) == connect.CodeUnavailable {
			return nil // the sandbox is gone: nothing runs
		}
		return fmt.Errorf("listing the remote's processes: %w", r.remoteErr(err))
	}
	var errs []error
	for _, p := range resp.Msg.GetProcesses() {
		if err := r.signal(ctx, p.GetPid(), sig); err != nil && connect.CodeOf(err) != connect.CodeNotFound {
			errs = append(errs, fmt.Errorf("signalling remote process %d: %w", p.GetPid(), r.remoteErr(err)))
		}
	}
	return errors.Join(errs...)
}

// awaitNone waits up to grace for envd to list no process.
func (r *remote) awaitNone(ctx context.Context, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		resp, err := r.proc.List(ctx, connect.NewRequest(&ppb.ListRequest{}))
		if err != nil || len(resp.Msg.GetProcesses()) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(50*time.Millisecond, time.Until(deadline))):
		}
	}
}

// Wait implements backend.Driver: it returns once the remote sandbox is
// gone (the driver polls the remote, pollEvery), or the driver killed it.
func (d *Driver) Wait(ctx context.Context, id sandbox.ID) (sandbox.Exit, error) {
	r := d.held(id)
	if r == nil {
		return sandbox.Exit{}, &sandbox.Error{Op: "wait", ID: id, Err: fmt.Errorf("sandbox %w", sandbox.ErrNotFound)}
	}
	select {
	case <-r.gone:
		return r.exit, nil
	case <-ctx.Done():
		return sandbox.Exit{}, sandbox.Wrap("wait", id, context.Cause(ctx))
	}
}

// Destroy implements backend.Driver: it lets go of the sandbox and kills
// the remote one, and any other the remote runs for id of this instance (a
// create whose answer was lost). A sandbox already gone is no error.
func (d *Driver) Destroy(ctx context.Context, id sandbox.ID) error {
	d.mu.Lock()
	r := d.remotes[id]
	delete(d.remotes, id)
	d.mu.Unlock()
	rid := ""
	if r != nil {
		rid = r.rid
		r.release(5 * time.Second)
		r.killAll()
		r.end(sandbox.Exit{Code: 128 + int(syscall.SIGKILL), Signal: int(syscall.SIGKILL), Reason: sandbox.ReasonKilled})
	}
	if err := d.destroyRemote(ctx, id, rid); err != nil {
		if r != nil {
			d.mu.Lock()
			if d.remotes[id] == nil {
				d.remotes[id] = r // kept, so the next Destroy knows its remote id
			}
			d.mu.Unlock()
		}
		return &sandbox.Error{Op: "destroy", ID: id, Err: err}
	}
	return nil
}

// Recover implements backend.Driver: it reaches the remote sandbox Saved
// names again; one the remote no longer runs is sandbox.ErrNotFound.
func (d *Driver) Recover(ctx context.Context, id sandbox.ID, sv []byte) (*backend.Instance, error) {
	const op = "recover"
	var s saved
	if err := json.Unmarshal(sv, &s); err != nil || s.RemoteID == "" {
		return nil, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("%w: the driver's record names no remote sandbox", sandbox.ErrNotFound)}
	}
	if err := errors.Join(d.urlErr(), d.keyErr()); err != nil {
		return nil, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)}
	}
	sb, err := d.api.get(ctx, s.RemoteID)
	switch {
	case statusOf(err) == http.StatusNotFound:
		return nil, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("remote sandbox %s %w", s.RemoteID, sandbox.ErrNotFound)}
	case err != nil:
		return nil, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("looking up remote sandbox %s: %w", s.RemoteID, classify(err))}
	case sb.State != "" && sb.State != "running":
		return nil, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("remote sandbox %s is %s: %w", s.RemoteID, sb.State, sandbox.ErrNotFound)}
	case !d.ours(sb, id):
		return nil, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("remote sandbox %s does not stand for this sandbox (its metadata name another): %w", s.RemoteID, sandbox.ErrNotFound)}
	}
	// Its lease may be about to end: the daemon was down for a while.
	if err := d.api.setTimeout(ctx, s.RemoteID, lease); err != nil && statusOf(err) != http.StatusNotFound {
		d.log.Warn("renewing a recovered remote sandbox's timeout", logkey.SandboxID, id, "remote_id", s.RemoteID, logkey.Err, err)
	}
	token := s.AccessToken
	if sb.EnvdAccessToken != "" {
		token = sb.EnvdAccessToken
	}
	d.mu.Lock()
	if old := d.remotes[id]; old != nil {
		d.mu.Unlock()
		return d.instanceOf(old), nil
	}
	base := s.EnvdURL
	if d.sandboxURL != "" || base == "" {
		base = d.envdBase(s.RemoteID, sb.Domain)
	}
	r := d.newRemote(id, s.RemoteID, token, base)
	d.remotes[id] = r
	d.mu.Unlock()
	r.adopt(ctx)
	return d.instanceOf(r), nil
}

// adopt puts the processes the remote runs that the adapter started (their
// tag is its id) back in the table, followed from now on: their output
// before is lost with the daemon that read it.
func (r *remote) adopt(ctx context.Context) {
	resp, err := r.proc.List(ctx, connect.NewRequest(&ppb.ListRequest{}))
	if err != nil {
		r.d.log.Warn("listing a recovered sandbox's processes", logkey.SandboxID, r.id, logkey.Err, err)
		return
	}
	for _, info := range resp.Msg.GetProcesses() {
		tag := info.GetTag()
		if len(tag) != 11 || tag[0] != 'p' {
			continue
		}
		cfg := info.GetConfig()
		p := &proc{id: tag, pid: info.GetPid(), argv: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), cwd: cfg.GetCwd(),
			startedAt: time.Now(), r: r, done: make(chan struct{}),
			out:   [2]*capture{newCapture(r.d.outputLimit), newCapture(r.d.outputLimit)},
			stdin: true} // whether it is still open, the remote says
		r.table.add(p)
		r.wg.Go(func() {
			st, err := r.proc.Connect(r.ctx, connect.NewRequest(&ppb.ConnectRequest{Process: pidSelector(p.pid)}))
			if err != nil {
				p.finish(nil, reasonLost)
				return
			}
			ev := connectEvents(st)
			if _, err := awaitStart(ev); err != nil {
				ev.close()
				p.finish(nil, reasonLost)
				return
			}
			r.pump(p, ev)
		})
	}
}

// ListHeld implements backend.Lister: the sandboxes the remote runs whose
// metadata name this instance.
func (d *Driver) ListHeld(ctx context.Context) ([]sandbox.ID, error) {
	if errors.Join(d.urlErr(), d.keyErr()) != nil {
		return nil, nil // no remote: nothing held there
	}
	all, err := d.api.list(ctx, map[string]string{metaInstance: d.instance})
	if err != nil {
		return nil, fmt.Errorf("listing the remote's sandboxes: %w", classify(err))
	}
	var out []sandbox.ID
	for _, sb := range all {
		if !d.ours(sb, "") {
			continue
		}
		if id, err := sandbox.ParseID(sb.Metadata[metaSandbox]); err == nil && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

// Close implements backend.Closer: the adapter stops, every remote
// sandbox keeps running (until its lease ends, unless a restarted daemon
// recovers it).
func (d *Driver) Close(ctx context.Context) error {
	d.mu.Lock()
	rs := slices.Collect(maps.Values(d.remotes))
	d.remotes = map[sandbox.ID]*remote{}
	d.mu.Unlock()
	for _, r := range rs {
		r.release(5 * time.Second)
	}
	d.cancel()
	d.lis.Close()
	d.serveOnce.Do(func() {}) // no server from now on
	err := d.srv.Close()
	d.wg.Wait()
	d.tr.CloseIdleConnections()
	return err
}

// keep renews the lease of every held sandbox and notices the ones the
// remote no longer runs, until Close.
func (d *Driver) keep() {
	poll := time.NewTicker(pollEvery)
	defer poll.Stop()
	lastRenew := time.Now()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-poll.C:
		}
		d.mu.Lock()
		rs := slices.Collect(maps.Values(d.remotes))
		d.mu.Unlock()
		if len(rs) == 0 {
			continue
		}
		d.noticeGone(rs)
		if time.Since(lastRenew) >= renewEvery {
			lastRenew = time.Now()
			for _, r := range rs {
				ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
				err := d.api.setTimeout(ctx, r.rid, lease)
				cancel()
				if err != nil && statusOf(err) != http.StatusNotFound && d.ctx.Err() == nil {
					d.log.Warn("renewing a remote sandbox's timeout", logkey.SandboxID, r.id, "remote_id", r.rid, logkey.Err, err)
				}
			}
		}
	}
}

// noticeGone ends the held sandboxes the remote no longer runs: one
// missing from the instance's list is asked for by id, and gone when the
// remote does not know it.
func (d *Driver) noticeGone(rs []*remote) {
	ctx, cancel := context.WithTimeout(d.ctx, 30*time.Second)
	defer cancel()
	all, err := d.api.list(ctx, map[string]string{metaInstance: d.instance})
	if err != nil {
		if d.ctx.Err() == nil {
			d.log.Debug("listing the remote's sandboxes", logkey.Err, err)
		}
		return
	}
	live := map[string]bool{}
	for _, sb := range all {
		live[sb.SandboxID] = true
	}
	for _, r := range rs {
		if live[r.rid] {
			continue
		}
		select {
		case <-r.gone:
			continue
		default:
		}
		sb, err := d.api.get(ctx, r.rid)
		if statusOf(err) == http.StatusNotFound || (err == nil && sb.State != "" && sb.State != "running") {
			d.log.Info("the remote sandbox is gone", logkey.SandboxID, r.id, "remote_id", r.rid)
			r.killAll()
			r.end(sandbox.Exit{Code: -1, Reason: sandbox.ReasonKilled})
		}
	}
}

var (
	_ backend.Driver = (*Driver)(nil)
	_ backend.Lister = (*Driver)(nil)
	_ backend.Closer = (*Driver)(nil)
)
