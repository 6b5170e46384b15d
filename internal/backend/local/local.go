// Package local is the local backend: the agent runs as a plain host process,
// as the daemon's user, with its file API confined to a workspace directory.
// It is NOT a sandbox, and every Instance says so.
package local

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/isolation/cgroup"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// Name is the backend's registered name.
const Name = "local"

// Warning is shown wherever a local sandbox is.
const Warning = "local backend: not a sandbox; commands run on the host as the daemon's user"

const cleanupTimeout = 30 * time.Second

// Driver implements backend.Driver with host processes.
type Driver struct {
	opts backend.Options
	log  *slog.Logger
	// layout is the host's cgroups when the daemon may make groups (root);
	// each sandbox's commands then run in a group of its own, with its
	// limits. Nil otherwise.
	layout *cgroup.Layout

	boxes backend.Registry[*box]
}

var _ backend.Driver = (*Driver)(nil)

// box is one sandbox this driver holds.
type box struct {
	id      sandbox.ID
	dir     string
	sock    string
	proc    *backend.Proc // the agent; it holds nothing for a sandbox known only by its id
	group   *cgroup.Group // nil without cgroups
	coreOff bool          // RLIMIT_CORE 0 is set on the agent
	cgMode  string        // the cgroup layout's mode, with group
	// ready is the read end of the agent's ReadyFD until its report is read;
	// applied is the isolation built from that report.
	ready   *os.File
	applied sandbox.Isolation
}

// saved is Instance.Saved.
type saved struct {
	Pid    int    `json:"pid"`
	Start  uint64 `json:"start_time"` // /proc/<pid>/stat field 22, against pid reuse
	Socket string `json:"socket"`
	Dir    string `json:"dir"`
	// Applied is the isolation the sandbox was started with.
	Applied *sandbox.Isolation `json:"applied,omitempty"`
}

// Open opens the driver over opts.DataDir.
func Open(ctx context.Context, opts backend.Options) (backend.Driver, error) {
	if opts.DataDir == "" || opts.Exe == "" {
		return nil, errors.New("local backend: data dir and executable are required")
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("local backend: %w", err)
	}
	for _, r := range opts.GitRepos {
		if err := checkRepoPath(r); err != nil {
			return nil, fmt.Errorf("local backend: %w", err)
		}
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Driver{opts: opts, log: log.With(logkey.Component, Name)}
	if l, err := cgroup.Detect(); err == nil && os.Geteuid() == 0 {
		d.layout = l
	}
	return d, nil
}

func (d *Driver) cgroupPath(id sandbox.ID) string {
	return "sbx/" + d.opts.Instance + "/" + string(id)
}

func (d *Driver) dir(id sandbox.ID) string { return filepath.Join(d.opts.DataDir, string(id)) }

// isolation is what a local sandbox has: nothing.
func isolation() sandbox.Isolation {
	layers := map[string]sandbox.LayerState{}
	for _, l := range sandbox.AllLayers {
		layers[l] = sandbox.Missing
	}
	return sandbox.Isolation{Backend: Name, Level: "none", Layers: layers, Cgroup: "none", Sandbox: false, Warning: Warning}
}

// Probe implements backend.Driver: always available, isolating nothing.
func (d *Driver) Probe(ctx context.Context) (backend.Report, error) {
	return backend.Report{Backend: Name, Available: true, Level: "none", Sandbox: false, Layers: isolation().Layers, Templates: []string{sandbox.TemplateHost},
		Checks: []backend.Check{{Name: "host process", OK: true}}}, nil
}

// Start implements backend.Driver.
func (d *Driver) Start(ctx context.Context, spec sandbox.Spec) (_ *backend.Instance, retErr error) {
	id := spec.ID
	if _, err := sandbox.ParseID(string(id)); err != nil {
		return nil, &sandbox.Error{Op: "create", ID: id, Err: sandbox.Invalid("id", "%q is not a sandbox id", string(id))}
	}
	if spec.Template != "" && spec.Template != sandbox.TemplateHost {
		return nil, &sandbox.Error{Op: "create", ID: id, Err: fmt.Errorf("%w: template %q not found", sandbox.ErrInvalid, spec.Template)}
	}
	if len(spec.RequireLayers) > 0 {
		req := slices.Sorted(slices.Values(spec.RequireLayers))
		return nil, &sandbox.Error{Op: "create", ID: id, Err: fmt.Errorf("%w: layers %s: the local backend applies no isolation", sandbox.ErrIsolation, strings.Join(req, ", "))}
	}
	b := &box{id: id, dir: d.dir(id), proc: &backend.Proc{}}
	b.sock = filepath.Join(b.dir, "agent.sock")
	if err := d.boxes.Claim(id, b); err != nil {
		return nil, err
	}
	began := time.Now()
	defer func() {
		if retErr != nil {
			if err := d.teardown(ctx, b); err != nil {
				d.log.ErrorContext(ctx, "cleaning up after a failed start", logkey.SandboxID, id, logkey.Err, err)
			}
			retErr = sandbox.Wrap("create", id, retErr)
		}
	}()
	if err := os.Mkdir(b.dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("sandbox directory: %w", sandbox.ErrExists)
		}
		return nil, err
	}
	ws := filepath.Join(b.dir, "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil {
		return nil, err
	}
	if d.layout != nil && d.opts.Instance != "" {
		g, err := d.layout.Create(d.cgroupPath(id))
		if err != nil {
			return nil, err
		}
		b.group, b.cgMode = g, d.layout.Mode()
		if err := g.SetLimits(cgroup.Limits{MemoryBytes: spec.MemoryBytes, Pids: spec.Pids, MilliCPUs: spec.MilliCPUs}); err != nil {
			return nil, err
		}
	}
	if err := d.spawn(ctx, b, spec, ws); err != nil {
		return nil, err
	}
	cl := agentclient.New(id, dial(b.sock))
	defer cl.Close()
	ready, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-b.proc.Done():
			cancel(fmt.Errorf("agent exited (%s) before serving; see %s", backend.DescribeExit(b.proc.ExitStatus()), filepath.Join(b.dir, "agent.log")))
		case <-ready.Done():
		}
	}()
	if err := cl.WaitReady(ready); err != nil {
		if c := context.Cause(ready); c != nil && ctx.Err() == nil {
			return nil, c
		}
		return nil, err
	}
	iso, err := readReport(b)
	if err != nil {
		return nil, err
	}
	b.applied = iso
	d.log.InfoContext(ctx, "started", logkey.SandboxID, id, "pid", b.proc.Pid, logkey.Duration, time.Since(began))
	inst, err := d.instance(b)
	if inst != nil {
		inst.Serving = true // it answered WaitReady above
	}
	return inst, err
}

// readyFD is the agent's boot.AgentConfig.ReadyFD.
const readyFD = 4

// readReport reads what the agent, serving, reports it applied to the
// processes it starts, and returns the isolation of a local sandbox with it.
// Confinement the agent could not apply fails the start: the operator's
// choice of local does not waive it.
func readReport(b *box) (sandbox.Isolation, error) {
	defer b.ready.Close()
	b.ready.SetReadDeadline(time.Now().Add(10 * time.Second))
	msg, err := io.ReadAll(io.LimitReader(b.ready, 64<<10))
	if err != nil {
		return sandbox.Isolation{}, fmt.Errorf("reading the agent's report: %w", err)
	}
	rep, err := backend.ReadyReport(msg)
	if err != nil {
		return sandbox.Isolation{}, fmt.Errorf("agent: %w", err)
	}
	if rep == nil {
		return sandbox.Isolation{}, errors.New("the agent closed its ready pipe without a report")
	}
	iso := isolation()
	if b.group != nil {
		iso.Layers[sandbox.LayerCgroup], iso.Cgroup = sandbox.Applied, b.cgMode
	}
	if b.coreOff {
		iso.Layers[sandbox.LayerRlimits] = sandbox.Applied
	}
	for _, l := range []string{sandbox.LayerLandlock, sandbox.LayerSeccomp} {
		if rep.Layers[l] != "applied" {
			return sandbox.Isolation{}, fmt.Errorf("%w: layer %s: %s", sandbox.ErrIsolation, l, cmp.Or(rep.Layers[l], "not reported"))
		}
		iso.Layers[l] = sandbox.Applied
	}
	iso.LandlockABI, iso.SeccompProfile = rep.LandlockABI, rep.SeccompProfile
	return iso, nil
}

func dial(sock string) func(context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var nd net.Dialer
		return nd.DialContext(ctx, "unix", sock)
	}
}

func (d *Driver) instance(b *box) (*backend.Instance, error) {
	iso := b.applied
	s, err := json.Marshal(saved{Pid: b.proc.Pid, Start: b.proc.Start, Socket: b.sock, Dir: b.dir, Applied: &iso})
	if err != nil {
		return nil, err
	}
	if iso.Backend == "" {
		iso = isolation() // recovered: what the agent applied was not kept
	}
	return &backend.Instance{ID: b.id, Dial: dial(b.sock), Applied: iso, Saved: s}, nil
}

// spawn starts the agent in its own session; it outlives the daemon.
func (d *Driver) spawn(ctx context.Context, b *box, spec sandbox.Spec, ws string) error {
	home := os.Getenv("HOME")
	if home == "" {
		home = "/root"
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home, "LANG=C.UTF-8"}
	for _, k := range slices.Sorted(mapsKeys(spec.Env)) {
		env = append(env, k+"="+spec.Env[k])
	}
	scratch := filepath.Join(b.dir, "tmp")
	if err := os.Mkdir(scratch, 0o700); err != nil {
		return err
	}
	env = append(env, "TMPDIR="+scratch)
	gitEnv, err := gitJail(b.dir, scratch, d.opts.GitRepos)
	if err != nil {
		return fmt.Errorf("git staging jail: %w", err)
	}
	for _, kv := range gitEnv {
		// The create's own env may set them otherwise: it is the caller's sandbox.
		if k, _, _ := strings.Cut(kv, "="); !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") }) {
			env = append(env, kv)
		}
	}
	rules, err := landlockRules(ws, scratch, d.opts.GitRepos)
	if err != nil {
		return fmt.Errorf("landlock rules: %w", err)
	}
	prog, progID, err := filter()
	if err != nil {
		return fmt.Errorf("seccomp profile: %w", err)
	}
	cfg := boot.AgentConfig{
		SandboxID: string(b.id), Listen: b.sock, Root: ws, Workdir: "/", OutputDir: "/.sbx/output",
		Env: env, OutputLimitBytes: d.opts.OutputLimitBytes, SpillLimitBytes: d.opts.SpillLimitBytes, Subreaper: true,
		ArchiveMaxBytes: d.opts.ArchiveMaxBytes, ArchiveMaxEntries: d.opts.ArchiveMaxEntries,
		Landlock: rules, Seccomp: prog, SeccompID: progID, ReadyFD: readyFD,
	}
	js, err := cfg.MarshalBinary()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(b.dir, "agent.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	// The configuration goes over a pipe (boot.ConfigFD), never in argv, which
	// every host user can read: its Env may hold the caller's secrets.
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		return err
	}
	files := []*os.File{null, logf, logf, cfgR, readyW} // boot.ConfigFD = 3, readyFD
	if b.group != nil {
		// The agent's tree kill and OOM reasons: its group's directory and
		// OOM counter, as in a jail.
		dir, oom := b.group.V2Dir(), ""
		if dir == "" {
			dir = b.group.Dir("freezer")
		}
		oom, _ = b.group.OOMFile()
		for i, path := range []string{dir, oom} {
			if path == "" {
				files = append(files, nil)
				continue
			}
			f, err := os.Open(path)
			if err != nil {
				cfgR.Close()
				cfgW.Close()
				readyR.Close()
				readyW.Close()
				return err
			}
			defer f.Close()
			files = append(files, f)
			switch {
			case i == 1:
				cfg.OOMFD, cfg.OOMFormat = 6, oomFormat(b.group)
			case b.group.V2Dir() != "":
				cfg.CgroupFD = 5
			default:
				cfg.FreezerFD = 5
			}
		}
		if js, err = cfg.MarshalBinary(); err != nil {
			return err
		}
	}
	b.ready = readyR
	pidfd := -1
	var p *os.Process
	start := func(v2fd int) error {
		attr := &syscall.SysProcAttr{Setsid: true, PidFD: &pidfd}
		if v2fd >= 0 {
			attr.UseCgroupFD, attr.CgroupFD = true, v2fd
		}
		var err error
		p, err = os.StartProcess(d.opts.Exe, []string{"sbx", boot.AgentArg, string(b.id)}, &os.ProcAttr{
			Dir:   ws,
			Env:   append([]string{"PATH=" + env[0][len("PATH="):]}, boot.RuntimeEnv...),
			Files: files,
			Sys:   attr,
		})
		return err
	}
	if b.group != nil {
		err = b.group.ForkIn(start) // born in its group: nothing runs unaccounted
	} else {
		err = start(-1)
	}
	cfgR.Close()
	readyW.Close()
	if err != nil {
		cfgW.Close()
		return fmt.Errorf("starting the agent: %w", err)
	}
	go func(cfg []byte) { // the agent reads to EOF; a pipe holds less than a large env
		cfgW.Write(cfg)
		cfgW.Close()
	}(js)
	if err := b.proc.HoldChild(p, pidfd); err != nil {
		return err
	}
	// No core dumps of the agent or what it starts (they inherit it).
	if err := unix.Prlimit(p.Pid, unix.RLIMIT_CORE, &unix.Rlimit{}, nil); err == nil {
		b.coreOff = true
	}
	// For a daemon that restarts and destroys without Recover.
	js, err = json.Marshal(saved{Pid: b.proc.Pid, Start: b.proc.Start, Socket: b.sock, Dir: b.dir})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.dir, "agent.json"), js, 0o600)
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// lookup returns the held box of id, else one known by its directory only.
func (d *Driver) lookup(op string, id sandbox.ID) (*box, bool, error) {
	if _, err := sandbox.ParseID(string(id)); err != nil {
		return nil, false, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("sandbox %w", sandbox.ErrNotFound)}
	}
	if b, ok := d.boxes.Get(id); ok {
		return b, true, nil
	}
	dir := d.dir(id)
	b := &box{id: id, dir: dir, sock: filepath.Join(dir, "agent.sock"), proc: &backend.Proc{}}
	if d.layout != nil && d.opts.Instance != "" {
		if g, err := d.layout.Group(d.cgroupPath(id)); err == nil {
			b.group = g
		}
	}
	// An agent started before a restart: known by the record in its directory.
	var s saved
	if js, err := os.ReadFile(filepath.Join(dir, "agent.json")); err == nil && json.Unmarshal(js, &s) == nil && s.Pid > 0 {
		if p, err := backend.Pin(s.Pid, s.Start); err == nil {
			p.Watch()
			b.proc = p
		}
	}
	return b, false, nil
}

// Stop implements backend.Driver: SIGTERM makes the agent kill every tree it
// started and exit; after grace, the agent's session is killed.
func (d *Driver) Stop(ctx context.Context, id sandbox.ID, grace time.Duration) error {
	b, _, err := d.lookup("stop", id)
	if err != nil {
		return err
	}
	if !b.proc.Exited() {
		b.proc.Signal(unix.SIGTERM)
		t := time.NewTimer(grace)
		select {
		case <-b.proc.Done():
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	d.kill(b)
	if b.proc.Held() {
		select {
		case <-b.proc.Done():
		case <-ctx.Done():
			return sandbox.Wrap("stop", id, context.Cause(ctx))
		}
	}
	return nil
}

// kill SIGKILLs the agent and what remains of its session: the agent's
// process group, and every process whose session is the agent's.
func (d *Driver) kill(b *box) {
	b.proc.Signal(unix.SIGKILL)
	if b.group != nil {
		b.group.Kill()
	}
	if b.proc.Pid > 0 {
		for _, pid := range sessionMembers(b.proc.Pid, b.proc.Start) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// sessionMembers lists the processes in session sid (the agent's pid) that
// started no earlier than the agent, so a reused session id is not hit.
func sessionMembers(sid int, start uint64) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == sid {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 20 {
			continue
		}
		// f[0] is field 3 (state); session is field 6, start time field 22.
		s, _ := strconv.Atoi(f[3])
		st, _ := strconv.ParseUint(f[19], 10, 64)
		if s == sid && st >= start {
			out = append(out, pid)
		}
	}
	return out
}

// Wait implements backend.Driver. After Recover the agent is not this
// process's child and its exit status is unknown (code -1).
func (d *Driver) Wait(ctx context.Context, id sandbox.ID) (sandbox.Exit, error) {
	b, held, err := d.lookup("wait", id)
	if err != nil {
		return sandbox.Exit{}, err
	}
	if !held {
		return backend.WaitExit(ctx, id, nil, nil)
	}
	return b.proc.Wait(ctx, id)
}

// Destroy implements backend.Driver.
func (d *Driver) Destroy(ctx context.Context, id sandbox.ID) error {
	b, _, err := d.lookup("destroy", id)
	if err != nil {
		return err
	}
	return sandbox.Wrap("destroy", id, d.teardown(ctx, b))
}

// teardown asks the agent to end its trees, kills what is left, and removes
// the sandbox's directory. Every step runs.
func (d *Driver) teardown(ctx context.Context, b *box) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var errs []error
	if !b.proc.Exited() {
		b.proc.Signal(unix.SIGTERM)
		t := time.NewTimer(2 * time.Second)
		select {
		case <-b.proc.Done():
		case <-t.C:
		}
		t.Stop()
	}
	d.kill(b)
	if b.proc.Held() {
		select {
		case <-b.proc.Done():
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("waiting for agent pid %d to exit: %w", b.proc.Pid, context.Cause(ctx)))
		}
	}
	if b.group != nil {
		if err := b.group.WaitEmpty(ctx); err != nil {
			errs = append(errs, err)
		} else if err := b.group.Remove(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(b.dir); err != nil {
		errs = append(errs, fmt.Errorf("removing sandbox directory: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	d.boxes.Forget(b.id, b)
	b.proc.Close()
	return nil
}

// Recover implements backend.Driver.
func (d *Driver) Recover(ctx context.Context, id sandbox.ID, data []byte) (*backend.Instance, error) {
	notFound := func(why string) error {
		return &sandbox.Error{Op: "recover", ID: id, Err: fmt.Errorf("sandbox %w: %s", sandbox.ErrNotFound, why)}
	}
	var s saved
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, &sandbox.Error{Op: "recover", ID: id, Err: fmt.Errorf("%w: saved state: %v", sandbox.ErrInvalid, err)}
	}
	if _, err := sandbox.ParseID(string(id)); err != nil || s.Dir != d.dir(id) || s.Socket != filepath.Join(s.Dir, "agent.sock") || s.Pid <= 0 {
		return nil, &sandbox.Error{Op: "recover", ID: id, Err: fmt.Errorf("%w: saved state is not this driver's record of this sandbox", sandbox.ErrInvalid)}
	}
	if held, ok := d.boxes.Get(id); ok && held.proc.Held() {
		return d.instance(held)
	}
	proc, err := backend.Pin(s.Pid, s.Start)
	if err != nil {
		return nil, notFound("its agent is gone")
	}
	b := &box{id: id, dir: s.Dir, sock: s.Socket, proc: proc}
	if s.Applied != nil {
		b.applied = *s.Applied
	}
	cl := agentclient.New(id, dial(b.sock))
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = cl.Health(hctx)
	cancel()
	cl.Close()
	if err != nil {
		proc.Close()
		return nil, notFound("its agent does not answer")
	}
	proc.Watch()
	if held := d.boxes.Adopt(id, b, func(held *box) bool { return held.proc.Held() }); held != b {
		proc.Close() // a concurrent Recover won
		return d.instance(held)
	}
	return d.instance(b)
}

// ListHeld implements backend.Lister: the ids with a directory in the data dir.
func (d *Driver) ListHeld(ctx context.Context) ([]sandbox.ID, error) {
	ents, err := os.ReadDir(d.opts.DataDir)
	if err != nil {
		return nil, err
	}
	var ids []sandbox.ID
	for _, e := range ents {
		if id, err := sandbox.ParseID(e.Name()); err == nil && e.IsDir() {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

var _ backend.Lister = (*Driver)(nil)

func oomFormat(g *cgroup.Group) string {
	_, f := g.OOMFile()
	return f
}

// Close implements backend.Closer: it removes this instance's own group in
// each hierarchy when no sandbox is left in it.
func (d *Driver) Close(ctx context.Context) error {
	if d.layout == nil || d.opts.Instance == "" {
		return nil
	}
	roots := []string{d.layout.V2}
	for _, m := range d.layout.V1 {
		roots = append(roots, m)
	}
	for _, r := range roots {
		if r != "" {
			os.Remove(filepath.Join(r, "sbx", d.opts.Instance)) // rmdir: only an empty group goes
		}
	}
	return nil
}

var _ backend.Closer = (*Driver)(nil)
