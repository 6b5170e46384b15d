// This file implements Start: directories, cgroups and limits first, then the
// one process of the sandbox, born in its namespaces and cgroups: the init stage,
// which goes on as the agent and says when it serves.

package native

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/native/forker"
	"sbx.dev/sbx/internal/fault"
	"sbx.dev/sbx/internal/isolation/cgroup"
	"sbx.dev/sbx/internal/isolation/mount"
	"sbx.dev/sbx/internal/isolation/nsinit"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// File descriptors in the init stage and the agent: after nsinit's plan and
// status pipes (the status pipe is also the agent's ReadyFD) come the listening
// socket, the sandbox's cgroup directory (v2, else the v1 freezer; on a pure
// v2 host its work leaf) and its OOM counter file, all opened here on the
// host side; then, for the init stage only, the socket the idmapped layers
// come on and the sealed sbx binary it was executed from; then the sandbox's
// v1 pids directory.
const (
	listenFD = 5
	cgroupFD = 6
	oomFD    = 7
	mountsFD = 8
	exeFD    = 9
	pidsFD   = 10
)

// cleanupTimeout bounds the teardown of one sandbox.
const cleanupTimeout = 30 * time.Second

// pooledNet says whether the sandbox may start in a network namespace the
// spawner made ahead (forker.Request.PooledNet), which its root has no
// capability over: not when its capability profile keeps NET_RAW or
// NET_ADMIN, which act only in a namespace of its own user namespace (raw
// sockets for ping, say). An unknown profile is the plan's error.
func pooledNet(spec sandbox.Spec) bool {
	caps := nsinit.CapProfiles[cmp.Or(spec.CapProfile, "default")]
	return caps != nil && !slices.Contains(caps, "NET_RAW") && !slices.Contains(caps, "NET_ADMIN")
}

// cloneFlags are the namespaces of the init stage. It is born in its cgroups
// (the spawner forks it from a thread in them), so its new cgroup namespace is
// rooted at them; on a pure v2 host it is born in the sandbox's group, above
// the agent and work leaves, and moved into the agent's before it gets its
// plan (cgroup.Group.SettleAgent).
// The user namespace comes first: every other namespace is owned by it, so
// the capabilities the init holds there reach only the sandbox's own.
const cloneFlags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS |
	syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET | syscall.CLONE_NEWCGROUP

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// box is one sandbox this driver holds.
type box struct {
	id    sandbox.ID
	dir   string
	sock  string
	group *cgroup.Group
	// phases times the start (nil for a recovered box).
	phases *phases
	// uid is the first host id of the sandbox's range: its root.
	uid uint64
	// network is the sandbox's tier as it started.
	network sandbox.Network
	// root is what its root is made of, by its template (template.go);
	// nil for a recovered box.
	root *rootLayers
	// report is what the init stage and agent said they applied; applied is
	// the isolation built from it and the kernel's view.
	report  *boot.Report
	applied sandbox.Isolation

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
	// UID is the first host uid and gid of the sandbox's user namespace.
	UID uint64 `json:"uid"`
	// Applied is the isolation the sandbox was started with.
	Applied *sandbox.Isolation `json:"applied,omitempty"`
	// Network is its tier at start; it is attached again on recovery.
	Network sandbox.Network `json:"network,omitempty"`
}

// Start implements backend.Driver.
func (d *Driver) Start(ctx context.Context, spec sandbox.Spec) (_ *backend.Instance, retErr error) {
	id := spec.ID
	if _, err := sandbox.ParseID(string(id)); err != nil {
		return nil, &sandbox.Error{Op: "create", ID: id, Err: sandbox.Invalid("id", "%q is not a sandbox id", string(id))}
	}
	root, err := d.rootOf(spec.Template)
	if err != nil {
		return nil, &sandbox.Error{Op: "create", ID: id, Err: err}
	}
	if err := d.checkNetwork(spec.Network); err != nil {
		return nil, &sandbox.Error{Op: "create", ID: id, Err: err}
	}
	host := d.layers()
	for _, l := range spec.RequireLayers { // fail closed before making anything
		if host[l] != sandbox.Applied {
			return nil, &sandbox.Error{Op: "create", ID: id, Err: fmt.Errorf("%w: layer %s: %s", sandbox.ErrIsolation, l, d.missingReason(l))}
		}
	}
	b := &box{id: id, dir: d.dir(id), proc: &backend.Proc{}, phases: newPhases(), network: spec.Network, root: root}
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
	if err := d.checkSpace(spec); err != nil {
		return nil, err
	}
	if b.uid, err = d.uids.alloc(id); err != nil {
		return nil, err
	}
	if err := d.prepare(b, spec); err != nil {
		return nil, err
	}
	b.phases.mark("prepare")
	fault.Point(fault.Rootfs)
	if err := d.makeGroup(b); err != nil {
		return nil, err
	}
	b.phases.mark("cgroup")
	fault.Point(fault.Cgroup)
	if err := d.spawn(ctx, b, spec); err != nil {
		return nil, err
	}
	if networked(spec.Network) {
		if err := d.connect(ctx, b); err != nil {
			return nil, err
		}
		b.phases.mark("network")
	}
	iso, why := d.applied(b.proc.Pid, b.report)
	if d.testArgv == nil {
		for _, l := range spec.RequireLayers { // what was applied, read back
			if iso.Layers[l] != sandbox.Applied {
				return nil, fmt.Errorf("%w: layer %s: %s", sandbox.ErrIsolation, l, why[l])
			}
		}
	}
	b.applied = iso
	d.log.InfoContext(ctx, "started", logkey.SandboxID, id, "pid", b.proc.Pid, "level", iso.Level, logkey.Duration, time.Since(began))
	d.log.DebugContext(ctx, "start phases", append([]any{logkey.SandboxID, id}, b.phases.attrs()...)...)
	inst, err := d.instance(b, iso)
	if inst != nil {
		inst.Serving = true // the agent wrote its ready report once it served
	}
	return inst, err
}

func (d *Driver) instance(b *box, iso sandbox.Isolation) (*backend.Instance, error) {
	s, err := json.Marshal(saved{ID: b.id, Pid: b.proc.Pid, Start: b.proc.Start, Dir: b.dir, Socket: b.sock, Cgroup: b.group.Path(), UID: b.uid, Applied: &iso, Network: b.network})
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

// makeGroup makes the sandbox's cgroups (on a pure v2 host with the agent
// and work leaves), for its init to be born in; settleGroup finishes them.
func (d *Driver) makeGroup(b *box) error {
	g, err := d.layout.Create(d.cgroupPath(b.id))
	if err != nil {
		return err
	}
	b.group = g
	if g.Leaves() {
		return g.MakeLeaves()
	}
	return nil
}

// settleGroup delegates the sandbox's cgroups to its root and sets the
// limits of spec. It runs while the init starts (spawn): before the plan, so
// before anything of the sandbox's own runs in them.
func (d *Driver) settleGroup(b *box, spec sandbox.Spec) error {
	if err := b.group.Delegate(int(b.uid), int(b.uid)); err != nil {
		return err
	}
	return b.group.SetLimits(d.limits(b.group, spec))
}

// prepare makes the sandbox's directory, the init's working directory: a
// subvolume of the pool, limited to disk_mb, where what the sandbox writes
// in its root and its workspace counts. prepareTree fills it.
func (d *Driver) prepare(b *box, spec sandbox.Spec) error {
	if _, err := d.pool.Create(string(b.id), uint64(spec.DiskBytes)); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("sandbox directory %s: %w", b.dir, sandbox.ErrExists)
		}
		return err
	}
	return os.Chmod(b.dir, 0o700)
}

// prepareTree makes, in the sandbox's directory, the root mount point, upper
// and work directories of each overlay, the attach points of the idmapped
// lower layers, the workspace, and its own /etc/hostname and hosts. All of it
// belongs to the sandbox's root (host uid b.uid), whose user namespace builds
// the root from it and whose files land in it. It runs while the init starts
// (spawn), which uses none of it before its plan.
func (d *Driver) prepareTree(b *box) error {
	dirs := []string{"root", "upper", "work", "workspace", "lower"}
	for _, l := range b.root.overlays {
		dirs = append(dirs, "upper/"+l, "work/"+l)
	}
	for i := range b.root.lowers {
		dirs = append(dirs, lowerDir(i))
	}
	for _, s := range dirs {
		if err := os.Mkdir(filepath.Join(b.dir, s), 0o755); err != nil {
			return err
		}
	}
	// The sandbox's own /etc entries, over the skeleton's copy of the /etc
	// layer (mount.BuildSkeleton) or the template's /etc. Made in the
	// sandbox's fresh directory: nothing of the template is followed.
	etc := filepath.Join(b.dir, "upper/root/etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(etc, "hostname"), []byte(string(b.id)+"\n"), 0o644); err != nil {
		return err
	}
	hosts := "127.0.0.1\tlocalhost " + string(b.id) + "\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	if err := os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts), 0o644); err != nil {
		return err
	}
	owned := append([]string{".", "upper/root/etc", "upper/root/etc/hostname", "upper/root/etc/hosts"}, dirs...)
	if d.opts.Network != nil {
		if err := os.WriteFile(filepath.Join(etc, "resolv.conf"), []byte(resolvConf(d.opts.Network)), 0o644); err != nil {
			return err
		}
		owned = append(owned, "upper/root/etc/resolv.conf")
	}
	for _, s := range owned {
		if err := os.Lchown(filepath.Join(b.dir, s), int(b.uid), int(b.uid)); err != nil {
			return err
		}
	}
	return nil
}

// lowerDir is where the idmapped copy of d.lowers[i] is attached, relative to
// the sandbox's directory.
func lowerDir(i int) string { return "lower/" + strconv.Itoa(i) }

// overlayNames are the per-sandbox layers: the root (with /etc), /usr, and the
// host's top-level directories that are not merged-/usr symlinks.
func (d *Driver) overlayNames() []string {
	return append([]string{"root", "usr"}, d.skel.RealDirs...)
}

func (d *Driver) mountPlan(spec sandbox.Spec, r *rootLayers) mount.Plan {
	lower := func(host string) string { return lowerDir(slices.Index(d.lowers, host)) }
	layer := func(name, target string, lowers ...string) mount.Overlay {
		o := mount.Overlay{Target: target, Upper: "upper/" + name, Work: "work/" + name}
		for _, l := range lowers {
			o.Lower = append(o.Lower, lower(l))
		}
		return o
	}
	p := mount.Plan{
		Root:      "root",
		RootLayer: layer("root", "/", d.skel.Dir),
		Overlays: []mount.Overlay{
			layer("usr", "/usr", "/usr"),
		},
		Binds: []mount.Bind{
			{Source: "workspace", Target: "/workspace"},
		},
		// tmpfs, in memory: each at most half the memory limit (and the
		// disk quota), so a full one leaves the agent room to live.
		TmpBytes: min(spec.MemoryBytes/2, spec.DiskBytes),
		ShmBytes: min(spec.MemoryBytes/2, spec.DiskBytes),
	}
	if r.dir { // one overlay: the mount points over the template's root
		p.RootLayer = mount.Overlay{Upper: "upper/root", Work: "work/root", Lower: []string{lowerDir(0), lowerDir(1)}}
		p.Overlays = nil
	} else {
		for _, name := range d.skel.RealDirs {
			p.Overlays = append(p.Overlays, layer(name, "/"+name, "/"+name))
		}
	}
	for i := range r.lowers {
		p.Attach = append(p.Attach, lowerDir(i))
	}
	return p
}

// plan is what the init stage does for this sandbox, and the configuration of
// the agent it goes on as.
func (d *Driver) plan(b *box, spec sandbox.Spec) (nsinit.Plan, error) {
	env := []string{"PATH=" + defaultPath, "HOME=/root", "LANG=C.UTF-8", "TERM=xterm-256color"}
	if networked(spec.Network) {
		env = append(env, proxyEnv(d.opts.Network)...)
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, k+"="+spec.Env[k])
	}
	p := nsinit.Plan{
		Hostname: string(b.id),
		Mount:    d.mountPlan(spec, b.root),
		Workdir:  "/workspace",
		MountsFD: mountsFD,
		CloseFDs: []int{exeFD},
		// The agent narrows the bounding set on the thread it forks from.
		BoundingPerThread: d.testArgv == nil,
		KeepFDs:           []int{listenFD},
		NoFile:            1 << 20, // capped at the daemon's own hard limit
		NProc:             1 << 16, // per sandbox: its root is its own host uid
	}
	capProfile := cmp.Or(spec.CapProfile, "default")
	caps, ok := nsinit.CapProfiles[capProfile]
	if !ok {
		return p, sandbox.Invalid("cap_profile", "unknown capability profile %q (known: %s)", capProfile, strings.Join(slices.Sorted(maps.Keys(nsinit.CapProfiles)), ", "))
	}
	p.Caps = caps
	filter, err := d.filter(cmp.Or(spec.SeccompProfile, "default"))
	if err != nil {
		return p, err
	}
	if filter.nestedUserNS {
		p.UserNamespaces = -1 // the host's limit
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
	// A layer this host lacks is not attempted: the operator accepted its
	// absence (allow_missing), or the create failed before this.
	if d.missingReason(sandbox.LayerSeccomp) == "" {
		cfg.Seccomp, cfg.SeccompID = filter.prog, filter.id
	}
	if d.missingReason(sandbox.LayerLandlock) == "" {
		cfg.Landlock = landlockRules(b.root.writable)
	}
	if v2 := b.group.V2Dir(); v2 != "" {
		cfg.CgroupFD = cgroupFD
	} else if b.group.Dir("freezer") != "" {
		cfg.FreezerFD = cgroupFD
	}
	if path, format := b.group.OOMFile(); path != "" {
		cfg.OOMFD, cfg.OOMFormat = oomFD, format
	}
	if b.group.PidsDir() != "" {
		cfg.PidsDirFD, cfg.WorkPids = pidsFD, spec.Pids
	}
	for _, fd := range []int{cfg.CgroupFD, cfg.FreezerFD, cfg.OOMFD, cfg.PidsDirFD} {
		if fd > 0 {
			p.KeepFDs = append(p.KeepFDs, fd)
		}
	}
	agent, err := cfg.MarshalBinary()
	if err != nil {
		return p, err
	}
	p.Agent = agent
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
	p, err := d.plan(b, spec) // before the fork: it checks the spec's profiles
	if err != nil {
		return err
	}
	plan, err := p.MarshalBinary()
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
	// cgroupFD: the directory the agent makes each process's group in
	cgDir := b.group.WorkDir()
	if cgDir == "" {
		cgDir = b.group.Dir("freezer")
	}
	oomPath, _ := b.group.OOMFile()
	for _, path := range []string{cgDir, oomPath} { // cgroupFD, oomFD
		if path == "" {
			extra = append(extra, nil) // keeps the numbers of the fds after it
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		extra = append(extra, f)
	}
	mounts, mountsChild, err := socketPair()
	if err != nil {
		return err
	}
	defer mounts.Close()
	defer mountsChild.Close()
	dir, err := os.Open(b.dir)
	if err != nil {
		return err
	}
	defer dir.Close()
	exe, err := os.Open(d.agentExe)
	if err != nil {
		return err
	}
	defer exe.Close()
	extra = append(extra, mountsChild, exe) // mountsFD, exeFD
	// pidsFD: the v1 pids directory the agent makes the work group in
	if path := b.group.PidsDir(); path != "" {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		extra = append(extra, f)
	}
	var v2 *os.File
	if p := b.group.V2Dir(); p != "" {
		if v2, err = os.Open(p); err != nil {
			return err
		}
		defer v2.Close()
	}
	// The spawner forks it (spawner.go): born in the sandbox's groups, in
	// the sandbox's directory as its working directory, which its new mount
	// namespace translates, so its mounts resolve from there as the
	// sandbox's root, which may not search the data dir above it. It is the
	// root of its user namespace: every capability there, none on the host.
	pid, pidfd, err := d.spawner.spawn(forker.Request{
		// The sealed binary by its fd: the sandbox's root, which the exec
		// already runs as, may not search the daemon's data dir.
		Path:       "/proc/self/fd/" + strconv.Itoa(exeFD),
		Args:       []string{"sbx", boot.InitArg, string(b.id)}, // the id only names the process
		Env:        agentEnv,
		Cloneflags: cloneFlags,
		PooledNet:  pooledNet(spec),
		UID:        int(b.uid),
		Size:       UIDSlot,
		V1:         b.group.V1Dirs(),
	}, dir, logf, v2, extra)
	if err != nil {
		return fmt.Errorf("starting the init stage: %w", err)
	}
	b.phases.mark("fork")
	if err := b.proc.HoldSpawned(pid, pidfd, d.spawner.exitOf(pid)); err != nil {
		return err
	}
	// The init's runtime starts now (~2 ms) and waits for its plan: the rest
	// of the sandbox's directory and its groups' delegation and limits are
	// made meanwhile, off the create's critical path.
	if err := d.prepareTree(b); err != nil {
		return err
	}
	if err := d.settleGroup(b, spec); err != nil {
		return err
	}
	b.phases.mark("settle")
	// On a pure v2 host the init goes into the agent leaf, and the work leaf
	// gets its pids limit, while the layers are sent: both before the plan,
	// so nothing of the sandbox runs before its agent has room of its own.
	settled := make(chan error, 1)
	if b.group.Leaves() {
		go func() { settled <- b.group.SettleAgent(pid, spec.Pids) }()
	} else {
		settled <- nil
	}
	// The init waits for its plan in its new namespaces, which exist now: the
	// lower layers can be mapped into its user namespace.
	err = sendLayers(mounts, pid, b.root.lowers)
	if serr := <-settled; serr != nil {
		return serr
	}
	if err != nil {
		return err
	}
	b.phases.mark("layers")
	planR.Close()
	statusW.Close()
	lnFile.Close()
	mountsChild.Close()
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
	if b.report, err = backend.ReadyReport(msg); err != nil {
		return fmt.Errorf("init stage: %w", err)
	}
	if b.report != nil {
		b.phases.sandbox("fork", b.report.Marks)
	}
	b.phases.mark("jail")
	// EOF with nothing said: the agent serves, or init exec'd a test's program,
	// or the process died before it could say why.
	if b.proc.Exited() && d.testArgv == nil {
		return fmt.Errorf("init stage exited (%s) before the agent served", backend.DescribeExit(b.proc.ExitStatus()))
	}
	return nil
}

// sendLayers sends the init stage pid, on sock, an idmapped copy of each of
// lowers in its user namespace, in order (nsinit.Plan.MountsFD).
func sendLayers(sock *os.File, pid int, lowers []layer) error {
	userns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the sandbox's user namespace: %w", err)
	}
	defer unix.Close(userns)
	fds := make([]int, 0, len(lowers))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, l := range lowers {
		fd, err := l.idmapped(userns)
		if err != nil {
			return err
		}
		fds = append(fds, fd)
	}
	if err := unix.Sendmsg(int(sock.Fd()), []byte{0}, unix.UnixRights(fds...), nil, 0); err != nil {
		return fmt.Errorf("sending the idmapped layers: %w", err)
	}
	return nil
}

// socketPair returns the two ends of a unix stream socket pair, close-on-exec.
func socketPair() (ours, theirs *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	return os.NewFile(uintptr(fds[0]), "mounts"), os.NewFile(uintptr(fds[1]), "mounts"), nil
}

// agentPids is the room for the agent's own threads and helpers above the
// sandbox's pids limit, where the workload has a group of its own
// (cgroup.WorkGroup: v1's pids hierarchy, v2's work leaf): a fork bomb then
// cannot starve the agent.
const agentPids = 32

// limits are the cgroup limits of a sandbox of spec: its pids limit goes to
// the workload's group where there is one, with the agent's room above it.
func (d *Driver) limits(g *cgroup.Group, spec sandbox.Spec) cgroup.Limits {
	lim := cgroup.Limits{MemoryBytes: spec.MemoryBytes, Pids: spec.Pids, MilliCPUs: spec.MilliCPUs}
	if (g.PidsDir() != "" || g.Leaves()) && lim.Pids > 0 {
		lim.Pids += agentPids
	}
	return lim
}

// minFreeBytes is the free space the data dir's filesystem must keep for a
// create: the sandboxes' pool image is sparse, and a host filesystem that
// fills under it fails its writes; the store needs room too.
const minFreeBytes = 256 << 20

// checkSpace refuses a create when the data dir's filesystem is nearly full.
func (d *Driver) checkSpace(spec sandbox.Spec) error {
	var st unix.Statfs_t
	if err := unix.Statfs(d.opts.DataDir, &st); err != nil {
		return fmt.Errorf("checking the data dir's free space: %w", err)
	}
	if free := int64(st.Bavail) * st.Bsize; free < minFreeBytes {
		return fmt.Errorf("%w: the filesystem of %s has %d MiB free, below the %d MiB a create keeps free: free some space there",
			sandbox.ErrNoSpace, d.opts.DataDir, free>>20, minFreeBytes>>20)
	}
	return nil
}

// phases times the steps of one start, for the debug log ("start phases").
type phases struct {
	last  time.Time
	names []string
	took  []time.Duration
	// mono is CLOCK_MONOTONIC at each mark: the sandbox's own marks
	// (boot.Report.Marks) are timed from one of them.
	mono map[string]int64
}

func newPhases() *phases { return &phases{last: time.Now(), mono: map[string]int64{}} }

// mark ends the step named name.
func (p *phases) mark(name string) {
	now := time.Now()
	p.names = append(p.names, name)
	p.took = append(p.took, now.Sub(p.last))
	p.last = now
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) == nil {
		p.mono[name] = ts.Nano()
	}
}

// sandbox adds the steps the sandbox's init stage and agent marked, timed
// from this side's mark from, as "jail.<step>".
func (p *phases) sandbox(from string, marks []boot.Mark) {
	last := p.mono[from]
	for _, m := range marks {
		if last == 0 || m.Mono < last {
			return // not the same clock
		}
		p.names = append(p.names, "jail."+m.Step)
		p.took = append(p.took, time.Duration(m.Mono-last))
		last = m.Mono
	}
}

func (p *phases) attrs() []any {
	var a []any
	for i, n := range p.names {
		a = append(a, n, p.took[i])
	}
	return a
}
