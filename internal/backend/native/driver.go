// Package native is sbx's own jail: it starts the init stage (isolation/nsinit)
// in new pid, mount, uts, ipc and network namespaces inside per-sandbox cgroups,
// on an overlay root, and hands back the agent's socket. It knows nothing of the
// manager, store or servers.
package native

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/agentbin"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/isolation/cgroup"
	"sbx.dev/sbx/internal/isolation/mount"
	"sbx.dev/sbx/internal/isolation/quota"
	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/sandbox"
)

// Name is the driver's registry name and its isolation level when complete.
const Name = "native"

// spareGroups is how many of the v1 memory and CPU groups of destroyed
// sandboxes the driver keeps, reset, for the next creates
// (cgroup.Layout.KeepSpares): enough for a burst of a few workers' creates
// and destroys with the warm pool refilling.
const spareGroups = 16

// spareDirs is how many emptied directories (subvolumes) of destroyed
// sandboxes the driver keeps for the next creates (quota.Pool.KeepSpares).
const spareDirs = 16

var _ backend.Driver = (*Driver)(nil)
var _ backend.Statser = (*Driver)(nil)
var _ backend.Lister = (*Driver)(nil)

var instanceName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// Driver runs sandboxes in sbx's own jail. Its methods are safe for concurrent
// use on different sandboxes.
type Driver struct {
	opts   backend.Options
	log    *slog.Logger
	layout *cgroup.Layout
	// exe is the sealed copy of opts.Exe.
	exe string
	// agentExe is the sealed sbx-agent every sandbox runs (its init stage
	// and agent), and the spawner; exe when there is none to use.
	agentExe string
	// skel is the read-only layer under every sandbox's root, its /etc
	// included.
	skel mount.Skeleton
	// lowers are the host directories under the sandboxes' overlays, each
	// attached in every sandbox as an idmapped copy (mount.IDMapped).
	lowers []string
	// templates are the directory templates by name, their roots held
	// open for the driver's life (template.go); mountPoints is the layer
	// laid over them (mount.BuildMountPoints).
	templates   map[string]*dirTemplate
	mountPoints string
	// uids hands out the sandboxes' host id ranges.
	uids *uids
	// pool is the disk quota filesystem the sandboxes' directories live in.
	pool *quota.Pool
	// spawner forks the sandboxes' init stages (spawner.go).
	spawner *spawner

	// unsupported, set by tests, makes layers missing on this host, with
	// the reason given (PV-11's fault hook).
	unsupported map[string]string

	// testArgv, when set, replaces the agent: the init stage execs it and Start
	// does not wait for the agent's health. Tests of the jail set it.
	testArgv []string

	// boxes are the sandboxes this driver started or recovered.
	boxes backend.Registry[*box]
}

// Open checks opts, detects the host's cgroups, and builds once what every
// sandbox shares: the sealed binary, the skeleton and /etc.
func Open(ctx context.Context, opts backend.Options) (backend.Driver, error) {
	return open(ctx, opts)
}

func open(_ context.Context, opts backend.Options) (_ *Driver, retErr error) {
	if !filepath.IsAbs(opts.DataDir) {
		return nil, fmt.Errorf("opening native driver: data dir %q is not absolute", opts.DataDir)
	}
	if !instanceName.MatchString(opts.Instance) {
		return nil, fmt.Errorf("opening native driver: instance name %q: want 1-32 of [a-z0-9_-]", opts.Instance)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Driver{opts: opts, log: log.With(logkey.Component, "native")}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("opening native driver: %w", err)
	}
	var err error
	if d.layout, err = cgroup.Detect(); err != nil {
		return nil, fmt.Errorf("opening native driver: %w", err)
	}
	if err := d.layout.SkipV1WhereV2Serves("sbx/" + opts.Instance); err != nil { // the parent of its groups
		return nil, fmt.Errorf("opening native driver: %w", err)
	}
	defer func() {
		if retErr != nil && d.layout.V2 != "" { // the parent SkipV1WhereV2Serves made, if empty
			os.Remove(filepath.Join(d.layout.V2, "sbx", opts.Instance))
		}
	}()
	// Spare groups a daemon of this instance kept when it stopped short. One
	// that cannot go (a process in it, which a spare never holds) is logged,
	// not a reason not to start.
	if err := d.layout.RemoveSpares("sbx/" + opts.Instance); err != nil {
		d.log.Warn("removing the spare cgroups of an earlier run", logkey.Err, err)
	}
	d.layout.KeepSpares(spareGroups)
	if d.exe, err = seal(opts.Exe, filepath.Join(opts.DataDir, "bin")); err != nil {
		return nil, fmt.Errorf("opening native driver: %w", err)
	}
	var why string
	if d.agentExe, why, err = sealAgent(d.exe, filepath.Join(opts.DataDir, "bin")); err != nil {
		return nil, fmt.Errorf("opening native driver: %w", err)
	}
	if why != "" {
		d.log.Info("sandboxes run the sbx binary itself, not sbx-agent", "reason", why)
	}
	// The spawner runs from sbx-agent too: a smaller process to fork from.
	if d.spawner, err = startSpawner(d.agentExe, opts.Instance); err != nil {
		return nil, fmt.Errorf("opening native driver: %w", err)
	}
	defer func() {
		if retErr != nil {
			d.spawner.close()
		}
	}()
	layers := filepath.Join(opts.DataDir, "layers")
	if err := d.openTemplates(opts.Templates, layers); err != nil {
		return nil, fmt.Errorf("opening native driver: %w", err)
	}
	defer func() {
		if retErr != nil {
			d.closeTemplates()
		}
	}()
	var ca []byte
	if opts.Network != nil {
		ca = opts.Network.CACertPEM()
	}
	etc, err := mount.BuildEtc(layers, "/etc", ca)
	if err != nil {
		return nil, fmt.Errorf("opening native driver: %w", err)
	}
	if d.skel, err = mount.BuildSkeleton(layers, "/", etc); err != nil {
		return nil, fmt.Errorf("opening native driver: %w", err)
	}
	d.lowers = []string{d.skel.Dir, "/usr"}
	if d.pool, err = quota.Open(opts.DataDir, poolBytes(opts.DataDir)); err != nil {
		return nil, fmt.Errorf("opening native driver: %w", err)
	}
	// As the groups: what a daemon of this data dir kept when it stopped
	// short goes; failing that is logged.
	if err := d.pool.RemoveSpares(); err != nil {
		d.log.Warn("removing the spare directories of an earlier run", logkey.Err, err)
	}
	d.pool.KeepSpares(spareDirs)
	d.pool.OnTrim = func(n uint64, err error) {
		if err != nil {
			d.log.Warn("giving the disk pool's free space back", logkey.Err, err)
			return
		}
		d.log.Info("disk pool trimmed", "bytes", n)
	}
	for _, name := range d.skel.RealDirs {
		d.lowers = append(d.lowers, "/"+name)
	}
	want, err := ParseIDRange(opts.UIDRange)
	if err != nil {
		return nil, fmt.Errorf("opening native driver: %w: %w", backend.ErrRefused, err)
	}
	if err := os.WriteFile(filepath.Join(opts.DataDir, instanceFile), []byte(opts.Instance+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("opening native driver: %w", err)
	}
	r, err := registerRange(opts.Instance, opts.DataDir, want)
	if err != nil {
		return nil, fmt.Errorf("opening native driver: %w: %w", backend.ErrRefused, err)
	}
	d.uids = newUIDs(r)
	if err := d.claimExisting(); err != nil {
		return nil, fmt.Errorf("opening native driver: %w", err)
	}
	d.log.Info("user namespaces", "uid_range", r.String(), "sandboxes", r.Count/UIDSlot)
	return d, nil
}

// seal copies exe into dir as sbx-<sha256 prefix>, mode 0555, unless present.
// Sandboxes bind the copy read-only, so nothing inside can write the binary the
// agent runs, and rebuilding the daemon's binary does not change running ones
// (CVE-2019-5736).
func seal(exe, dir string) (string, error) {
	if exe == "" {
		return "", errors.New("sealing the sbx binary: no executable given")
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", fmt.Errorf("sealing the sbx binary: %w", err)
	}
	defer f.Close()
	return sealFrom(f, dir, "")
}

// sealAgent seals the embedded sbx-agent (agentbin) beside the sealed sbx
// binary, named after it (sbx-agent-<its hash>: sbx holds the agent, so
// the name changes with either), what every sandbox then runs; or, when
// there is none to use, returns exe itself and why. The embedded copy is
// read only to make the sealed one.
func sealAgent(exe, dir string) (path, why string, err error) {
	path = filepath.Join(dir, "sbx-agent-"+strings.TrimPrefix(filepath.Base(exe), "sbx-"))
	if _, err := os.Stat(path); err == nil {
		return path, "", nil
	}
	b, err := agentbin.Binary()
	if err != nil {
		return exe, err.Error(), nil
	}
	_, err = sealFrom(bytes.NewReader(b), dir, filepath.Base(path))
	b = nil
	agentbin.Release() // the daemon has no more use for it
	return path, "", err
}

// sealFrom copies r into dir as name, mode 0555, unless present; name ""
// is sbx-<sha256 prefix of r>.
func sealFrom(r io.ReadSeeker, dir, name string) (string, error) {
	if name == "" {
		h := sha256.New()
		if _, err := io.Copy(h, r); err != nil {
			return "", fmt.Errorf("sealing the sbx binary: %w", err)
		}
		name = "sbx-" + hex.EncodeToString(h.Sum(nil))[:16]
	}
	dst := filepath.Join(dir, name)
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("sealing the sbx binary: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".sbx-")
	if err != nil {
		return "", fmt.Errorf("sealing the sbx binary: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return "", fmt.Errorf("sealing the sbx binary: %w", err)
	}
	_, err = io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o555)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return "", fmt.Errorf("sealing the sbx binary: %w", err)
	}
	return dst, nil
}

// layers is what this host lets the driver apply: every layer, less those the
// kernel lacks. What a sandbox got is read back when it starts (applied).
func (d *Driver) layers() map[string]sandbox.LayerState {
	m := map[string]sandbox.LayerState{}
	for _, l := range sandbox.AllLayers {
		m[l] = sandbox.Applied
		if d.missingReason(l) != "" {
			m[l] = sandbox.Missing
		}
	}
	return m
}

func (d *Driver) cgroupComplete() bool {
	return d.layout.Has("memory") && d.layout.Has("pids") && d.layout.Has("cpu")
}

// cgroupPath is the sandbox's cgroup, relative to each hierarchy's root.
func (d *Driver) cgroupPath(id sandbox.ID) string {
	return "sbx/" + d.opts.Instance + "/" + string(id)
}

// dir is the sandbox's directory: a subvolume of the disk quota pool, or,
// for a sandbox made before the pool existed, a plain directory of the data
// dir.
func (d *Driver) dir(id sandbox.ID) string {
	legacy := filepath.Join(d.opts.DataDir, string(id))
	if _, err := os.Lstat(legacy); err == nil {
		return legacy
	}
	return filepath.Join(d.pool.Dir(), string(id))
}

// poolBytes is the size of a new disk quota pool: the data dir's
// filesystem's free space (the image is sparse; it takes only what sandboxes
// write), at least 1 GiB.
func poolBytes(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 1 << 30
	}
	return max(int64(st.Bavail)*st.Bsize, 1<<30)
}

// claimExisting records the id range of every sandbox directory left from
// before a restart: the directory belongs to its sandbox's root, so its owner
// is the first id of the range, held until the sandbox is destroyed.
func (d *Driver) claimExisting() error {
	legacy, err := os.ReadDir(d.opts.DataDir)
	if err != nil {
		return err
	}
	pooled, err := os.ReadDir(d.pool.Dir())
	if err != nil {
		return err
	}
	for _, e := range append(legacy, pooled...) {
		id, err := sandbox.ParseID(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Uid == 0 || st.Uid%UIDSlot != 0 {
			continue // not (yet) handed to a sandbox's root
		}
		if err := d.uids.claim(uint64(st.Uid), id); err != nil {
			return fmt.Errorf("sandbox directory %s: %w", d.dir(id), err)
		}
	}
	return nil
}
