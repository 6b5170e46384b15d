// This file implements Start: directories, cgroups and limits first, then the
// one process of the sandbox, born in its namespaces and cgroups: the init stage,
// which goes on as the agent and says when it serves.

package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"sbx/api/agent/boot"
	"sbx/internal/backend"
	"sbx/internal/fault"
	"sbx/internal/isolation/cgroup"
	"sbx/internal/isolation/mount"
	"sbx/internal/isolation/nsinit"
	"sbx/internal/logkey"
	"sbx/internal/sandbox"
)

// File descriptors in the init stage and the agent: after nsinit's plan and
// status pipes (the status pipe is also the agent's ReadyFD) come the listening
// socket, the sandbox's cgroup directory (v2, else the v1 freezer) and its OOM
// counter file, all opened here on the host side.
const (
	listenFD = 5
	cgroupFD = 6
	oomFD    = 7
)

// cleanupTimeout bounds the teardown of one sandbox.
const cleanupTimeout = 30 * time.Second

// cloneFlags are the namespaces of the init stage. It is born in its cgroups
// (cgroup.Group.ForkIn), so its new cgroup namespace is rooted at them.
const cloneFlags = syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS |
	syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET | syscall.CLONE_NEWCGROUP

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// box is one sandbox this driver holds.
type box struct {
	id    sandbox.ID
	dir   string
	sock  string
	group *cgroup.Group

	// proc is the init process (which goes on as the agent); it holds nothing
	// for a sandbox known only by its id (after a restart, before Recover):
	// Destroy then works from the cgroup and directory.
	proc *backend.Proc

	destroyOnce sync.Once
}

// saved is Instance.Saved.
type saved struct {
	ID     sandbox.ID `json:"id"`
	Pid    int        `json:"pid"`
	Start  uint64     `json:"start_time"` // /proc/<pid>/stat field 22, against pid reuse
	Dir    string     `json:"dir"`
	Socket string     `json:"socket"`
	Cgroup string     `json:"cgroup"`
}

// Start implements backend.Driver.
func (d *Driver) Start(ctx context.Context, spec sandbox.Spec) (_ *backend.Instance, retErr error) {
	id := spec.ID
	if _, err := sandbox.ParseID(string(id)); err != nil {
		return nil, &sandbox.Error{Op: "create", ID: id, Err: sandbox.Invalid("id", "%q is not a sandbox id", string(id))}
	}
	if spec.Template != sandbox.TemplateHost {
		return nil, &sandbox.Error{Op: "create", ID: id, Err: fmt.Errorf("%w: template %q not found", sandbox.ErrInvalid, spec.Template)}
	}
	if spec.Network != "" && spec.Network != sandbox.NetworkNone {
		return nil, &sandbox.Error{Op: "create", ID: id, Err: fmt.Errorf("%w: network %q: the native backend offers loopback only", sandbox.ErrInvalid, spec.Network)}
	}
	iso := d.isolation()
	for _, l := range spec.RequireLayers { // fail closed before making anything
		if iso.Layers[l] != sandbox.Applied {
			return nil, &sandbox.Error{Op: "create", ID: id, Err: fmt.Errorf("%w: layer %s: %s", sandbox.ErrIsolation, l, d.missingReason(l))}
		}
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
	if err := d.prepare(b); err != nil {
		return nil, err
	}
	fault.Point(fault.Rootfs)
	g, err := d.layout.Create(d.cgroupPath(id))
	if err != nil {
		return nil, err
	}
	b.group = g
	if err := g.SetLimits(cgroup.Limits{MemoryBytes: spec.MemoryBytes, Pids: spec.Pids, MilliCPUs: spec.MilliCPUs}); err != nil {
		return nil, err
	}
	fault.Point(fault.Cgroup)
	if err := d.spawn(ctx, b, spec); err != nil {
		return nil, err
	}
	d.log.InfoContext(ctx, "started", logkey.SandboxID, id, "pid", b.proc.Pid, logkey.Duration, time.Since(began))
	return d.instance(b, iso)
}

func (d *Driver) instance(b *box, iso sandbox.Isolation) (*backend.Instance, error) {
	s, err := json.Marshal(saved{ID: b.id, Pid: b.proc.Pid, Start: b.proc.Start, Dir: b.dir, Socket: b.sock, Cgroup: b.group.Path()})
	if err != nil {
		return nil, err
	}
	sock := b.sock
	return &backend.Instance{
		ID: b.id,
		Dial: func(ctx context.Context) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", sock)
		},
		Applied: iso,
		Saved:   s,
	}, nil
}

// prepare makes the sandbox's directory: the root mount point, upper and work
// directories of each overlay, the workspace, and its own /etc/hostname and hosts.
func (d *Driver) prepare(b *box) error {
	if err := os.Mkdir(b.dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("sandbox directory %s: %w", b.dir, sandbox.ErrExists)
		}
		return err
	}
	dirs := []string{"root", "upper", "work", "workspace"}
	for _, l := range d.overlayNames() {
		dirs = append(dirs, "upper/"+l, "work/"+l)
	}
	for _, s := range dirs {
		if err := os.Mkdir(filepath.Join(b.dir, s), 0o755); err != nil {
			return err
		}
	}
	etc := filepath.Join(b.dir, "upper/etc")
	if err := os.WriteFile(filepath.Join(etc, "hostname"), []byte(string(b.id)+"\n"), 0o644); err != nil {
		return err
	}
	hosts := "127.0.0.1\tlocalhost " + string(b.id) + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	return os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts), 0o644)
}

// overlayNames are the per-sandbox layers: the root, /usr, /etc, and the
// host's top-level directories that are not merged-/usr symlinks.
func (d *Driver) overlayNames() []string {
	return append([]string{"root", "usr", "etc"}, d.skel.RealDirs...)
}

func (d *Driver) mountPlan(b *box, spec sandbox.Spec) mount.Plan {
	layer := func(name, target string, lower ...string) mount.Overlay {
		return mount.Overlay{Target: target, Lower: lower,
			Upper: filepath.Join(b.dir, "upper", name), Work: filepath.Join(b.dir, "work", name)}
	}
	p := mount.Plan{
		Root:      filepath.Join(b.dir, "root"),
		RootLayer: layer("root", "/", d.skel.Dir),
		Overlays: []mount.Overlay{
			layer("usr", "/usr", "/usr"),
			layer("etc", "/etc", d.etcMask, "/etc"),
		},
		Binds: []mount.Bind{
			{Source: filepath.Join(b.dir, "workspace"), Target: "/workspace"},
		},
		TmpBytes: spec.MemoryBytes,
		ShmBytes: spec.MemoryBytes,
	}
	for _, name := range d.skel.RealDirs {
		p.Overlays = append(p.Overlays, layer(name, "/"+name, "/"+name))
	}
	return p
}

// plan is what the init stage does for this sandbox, and the configuration of
// the agent it goes on as.
func (d *Driver) plan(b *box, spec sandbox.Spec) (nsinit.Plan, error) {
	env := []string{"PATH=" + defaultPath, "HOME=/root", "LANG=C.UTF-8", "TERM=xterm-256color"}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, k+"="+spec.Env[k])
	}
	p := nsinit.Plan{
		Hostname: string(b.id),
		Mount:    d.mountPlan(b, spec),
		Workdir:  "/workspace",
		KeepFDs:  []int{listenFD},
		NoFile:   1 << 20, // capped at the daemon's own hard limit
		Caps:     nsinit.DefaultCaps,
	}
	cfg := boot.AgentConfig{
		SandboxID:         string(b.id),
		ListenFD:          listenFD,
		ReadyFD:           nsinit.StatusFD,
		Root:              "/",
		Workdir:           "/workspace",
		OutputDir:         "/var/tmp/sbx-output",
		Env:               env,
		OutputLimitBytes:  d.opts.OutputLimitBytes,
		SpillLimitBytes:   d.opts.SpillLimitBytes,
		ArchiveMaxBytes:   d.opts.ArchiveMaxBytes,
		ArchiveMaxEntries: d.opts.ArchiveMaxEntries,
	}
	if v2 := b.group.V2Dir(); v2 != "" {
		cfg.CgroupFD = cgroupFD
	} else if b.group.Dir("freezer") != "" {
		cfg.FreezerFD = cgroupFD
	}
	if path, format := b.group.OOMFile(); path != "" {
		cfg.OOMFD, cfg.OOMFormat = oomFD, format
	}
	for _, fd := range []int{cfg.CgroupFD, cfg.FreezerFD, cfg.OOMFD} {
		if fd > 0 {
			p.KeepFDs = append(p.KeepFDs, fd)
		}
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		return p, err
	}
	p.Agent = js
	if d.testArgv != nil {
		p.Path, p.Argv, p.Env = d.testArgv[0], d.testArgv, agentEnv
	}
	return p, nil
}

// agentEnv is the environment of the init stage and agent process; the
// sandbox's own goes in AgentConfig.Env.
var agentEnv = append([]string{"PATH=" + defaultPath, "HOME=/root", "LANG=C.UTF-8"}, boot.RuntimeEnv...)

// spawn starts the init stage in its namespaces and cgroups, hands it its plan
// and waits until the agent serves (or init or the agent failed, saying why).
func (d *Driver) spawn(ctx context.Context, b *box, spec sandbox.Spec) error {
	p, err := d.plan(b, spec)
	if err != nil {
		return err
	}
	plan, err := json.Marshal(p)
	if err != nil {
		return err
	}
	// The socket is made here, on the host side: the sandbox never chooses the
	// path the daemon dials.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: b.sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("listening for the agent: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	lnFile, err := ln.File()
	ln.Close()
	if err != nil {
		return fmt.Errorf("listening for the agent: %w", err)
	}
	defer lnFile.Close()
	planR, planW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer planR.Close()
	defer planW.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer statusR.Close()
	defer statusW.Close()
	logf, err := os.OpenFile(filepath.Join(b.dir, "agent.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()

	extra := []*os.File{planR, statusW, lnFile} // nsinit.PlanFD, nsinit.StatusFD, listenFD
	cgDir := b.group.V2Dir()
	if cgDir == "" {
		cgDir = b.group.Dir("freezer")
	}
	oomPath, _ := b.group.OOMFile()
	for i, path := range []string{cgDir, oomPath} { // cgroupFD, oomFD
		if path == "" {
			if i == 0 && oomPath != "" {
				extra = append(extra, nil) // keep oomFD's number
			}
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		extra = append(extra, f)
	}
	pidfd := -1
	cmd := &exec.Cmd{
		Path:       d.exe,
		Args:       []string{"sbx", boot.InitArg, string(b.id)}, // the id only names the process
		Env:        agentEnv,
		Dir:        "/",
		Stderr:     logf,
		ExtraFiles: extra,
	}
	bounding, err := nsinit.CapMask(append(slices.Clone(p.Caps), nsinit.InitCaps...))
	if err != nil {
		return err
	}
	err = b.group.ForkIn(func(v2fd int) error {
		// This thread is discarded after the fork: its bounding set is the init's.
		if err := nsinit.LimitBounding(bounding); err != nil {
			return err
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: cloneFlags, Setsid: true, PidFD: &pidfd}
		if v2fd >= 0 {
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, v2fd
		}
		return cmd.Start()
	})
	if err != nil {
		return fmt.Errorf("starting the init stage: %w", err)
	}
	if err := b.proc.HoldChild(cmd.Process, pidfd); err != nil {
		return err
	}
	planR.Close()
	statusW.Close()
	lnFile.Close()
	// The init stage lives in its new namespaces and cgroups and waits for its
	// plan: nothing of the jail is built yet.
	fault.Point(fault.Netns)
	if _, err := planW.Write(plan); err != nil {
		return fmt.Errorf("sending the plan to the init stage: %w", err)
	}
	planW.Close()
	// The init stage builds the jail and goes on as the agent; it is not ready.
	fault.Point(fault.Jail)
	stop := context.AfterFunc(ctx, func() { statusR.SetReadDeadline(time.Now()) })
	defer stop()
	msg, err := io.ReadAll(io.LimitReader(statusR, 64*1024))
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("reading the init stage's status: %w", err)
	}
	if len(msg) > 0 {
		return fmt.Errorf("init stage: %s", strings.TrimSpace(string(msg)))
	}
	// EOF with nothing said: the agent serves, or init exec'd a test's program,
	// or the process died before it could say why.
	if b.proc.Exited() && d.testArgv == nil {
		return fmt.Errorf("init stage exited (%s) before the agent served", backend.DescribeExit(b.proc.ExitStatus()))
	}
	return nil
}
