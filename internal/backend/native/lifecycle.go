// This file implements the life of a started sandbox: Stop, Wait, Destroy,
// Recover, Stats and ListHeld.

package native

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/fault"
	"sbx.dev/sbx/internal/sandbox"
)

// lookup returns the box of id: the one this driver holds, else one known only
// by its id (directory and cgroup, no process), so Destroy and Stats work after a
// restart without Recover.
func (d *Driver) lookup(op string, id sandbox.ID) (*box, bool, error) {
	if _, err := sandbox.ParseID(string(id)); err != nil {
		return nil, false, &sandbox.Error{Op: op, ID: id, Err: fmt.Errorf("sandbox %w", sandbox.ErrNotFound)}
	}
	if b, ok := d.boxes.Get(id); ok {
		return b, true, nil
	}
	g, err := d.layout.Group(d.cgroupPath(id))
	if err != nil {
		return nil, false, &sandbox.Error{Op: op, ID: id, Err: err}
	}
	dir := d.dir(id)
	return &box{id: id, dir: dir, sock: filepath.Join(dir, "agent.sock"), group: g, proc: &backend.Proc{}}, false, nil
}

// Stop implements backend.Driver. SIGTERM reaches the init (the agent, PID 1 of
// the sandbox), which ends its trees and exits; after grace the cgroup is killed.
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
	if err := d.kill(b); err != nil {
		return sandbox.Wrap("stop", id, err)
	}
	if err := b.group.WaitEmpty(ctx); err != nil {
		return sandbox.Wrap("stop", id, err)
	}
	if b.proc.Held() {
		select {
		case <-b.proc.Done():
		case <-ctx.Done():
			return sandbox.Wrap("stop", id, context.Cause(ctx))
		}
	}
	return nil
}

// kill sends SIGKILL to every process of the sandbox: its cgroup, and the init
// by pidfd in case it died before it was placed in its cgroups.
func (d *Driver) kill(b *box) error {
	b.proc.Signal(unix.SIGKILL)
	if b.group == nil {
		return nil
	}
	return b.group.Kill()
}

// Wait implements backend.Driver. After Recover the exit status is unknown (the
// init was not this process's child) and is reported as code -1.
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
	if err := d.teardown(ctx, b); err != nil {
		return sandbox.Wrap("destroy", id, err)
	}
	return nil
}

// teardown kills, waits, removes the cgroups (leaf first, with the groups the
// agent made) and the sandbox's directory. Every step runs; the mounts lived
// only in the sandbox's mount namespace, which died with its last process.
func (d *Driver) teardown(ctx context.Context, b *box) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var errs []error
	if err := d.kill(b); err != nil {
		errs = append(errs, err)
	}
	if b.group != nil {
		if err := b.group.WaitEmpty(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if b.proc.Held() {
		select {
		case <-b.proc.Done():
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("waiting for init pid %d to exit: %w", b.proc.Pid, context.Cause(ctx)))
		}
	}
	if err := fault.Fail("teardown"); err != nil {
		return err // the box stays known, so a retry can finish the job
	}
	if d.opts.Network != nil {
		if err := d.opts.Network.Detach(ctx, b.id); err != nil {
			errs = append(errs, err)
		}
	}
	if b.group != nil {
		if err := b.group.Remove(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if filepath.Dir(b.dir) == d.pool.Dir() {
		if err := d.pool.Release(filepath.Base(b.dir)); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox directory: %w", err))
		}
	} else if err := os.RemoveAll(b.dir); err != nil {
		errs = append(errs, fmt.Errorf("removing sandbox directory: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err // the box stays known, so a retry can finish the job
	}
	d.boxes.Forget(b.id, b)
	b.proc.Close()
	// Only now, with no process, group or file of the sandbox left, may its
	// ids go to another.
	d.uids.release(b.id)
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
	if s.ID != id || s.Cgroup != d.cgroupPath(id) || s.Dir != d.dir(id) || s.Pid <= 0 {
		return nil, &sandbox.Error{Op: "recover", ID: id, Err: fmt.Errorf("%w: saved state is not this driver's record of this sandbox", sandbox.ErrInvalid)}
	}
	if held, ok := d.boxes.Get(id); ok && held.proc.Held() {
		return d.instance(held, held.applied)
	}
	proc, err := backend.Pin(s.Pid, s.Start)
	if err != nil {
		return nil, notFound("its init process is gone")
	}
	var nd net.Dialer
	conn, err := nd.DialContext(ctx, "unix", d.dir(id)+"/agent.sock")
	if err != nil {
		proc.Close()
		return nil, notFound("its agent does not answer")
	}
	conn.Close()
	g, err := d.layout.Group(s.Cgroup)
	if err != nil {
		proc.Close()
		return nil, &sandbox.Error{Op: "recover", ID: id, Err: err}
	}
	if s.UID != 0 {
		if err := d.uids.claim(s.UID, id); err != nil {
			proc.Close()
			return nil, &sandbox.Error{Op: "recover", ID: id, Err: err}
		}
	}
	proc.Watch()
	b := &box{id: id, dir: s.Dir, sock: s.Socket, group: g, proc: proc, uid: s.UID, network: s.Network}
	if networked(s.Network) && d.opts.Network != nil {
		if err := d.connect(ctx, b); err != nil {
			proc.Close()
			return nil, &sandbox.Error{Op: "recover", ID: id, Err: err}
		}
	}
	if s.Applied != nil {
		b.applied = *s.Applied
	} else {
		b.applied, _ = d.applied(s.Pid, nil)
	}
	if held := d.boxes.Adopt(id, b, func(held *box) bool { return held.proc.Held() }); held != b {
		proc.Close() // a concurrent Recover won
		return d.instance(held, held.applied)
	}
	return d.instance(b, b.applied)
}

// Stats implements backend.Statser.
func (d *Driver) Stats(ctx context.Context, id sandbox.ID) (backend.Stats, error) {
	b, held, err := d.lookup("stats", id)
	if err != nil {
		return backend.Stats{}, err
	}
	if !held {
		if _, err := os.Stat(b.dir); err != nil {
			return backend.Stats{}, &sandbox.Error{Op: "stats", ID: id, Err: fmt.Errorf("sandbox %w", sandbox.ErrNotFound)}
		}
	}
	st, err := b.group.Stats()
	if err != nil {
		return backend.Stats{}, sandbox.Wrap("stats", id, err)
	}
	out := backend.Stats{MemoryBytes: st.MemoryBytes, MemoryPeakBytes: st.MemoryPeakBytes,
		Pids: st.Pids, CPUUsage: st.CPUUsage, OOMKills: st.OOMKills}
	if filepath.Dir(b.dir) == d.pool.Dir() { // a subvolume with its quota group
		if out.DiskBytes, err = d.pool.Used(b.dir); err != nil {
			return backend.Stats{}, sandbox.Wrap("stats", id, err)
		}
	}
	return out, nil
}

// ListHeld implements backend.Lister: the ids that have a directory under the
// data dir or a cgroup under this instance's group in any hierarchy.
func (d *Driver) ListHeld(ctx context.Context) ([]sandbox.ID, error) {
	var ids []sandbox.ID
	var errs []error
	add := func(dir string) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			return
		}
		for _, e := range ents {
			if id, err := sandbox.ParseID(e.Name()); err == nil && e.IsDir() && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	add(d.opts.DataDir)
	add(d.pool.Dir())
	for _, root := range d.hierarchies() {
		add(filepath.Join(root, "sbx", d.opts.Instance))
	}
	slices.Sort(ids)
	return ids, errors.Join(errs...)
}

// Close implements backend.Closer: it removes this instance's own group in
// each hierarchy, and unmounts the disk quota pool, when no sandbox is left.
// Running sandboxes keep theirs.
func (d *Driver) Close(ctx context.Context) error {
	d.spawner.close()
	d.pool.StopTrimming()
	d.pool.DropSpares()
	if d.pool.Empty() {
		if err := d.pool.Close(); err != nil {
			d.log.Warn("unmounting the disk quota pool", "err", err)
		}
	}
	d.layout.DropSpares()
	for _, h := range d.hierarchies() {
		err := os.Remove(filepath.Join(h, "sbx", d.opts.Instance))
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
			return fmt.Errorf("removing the instance's cgroup in %s: %w", h, err)
		}
	}
	return nil
}

// hierarchies lists the mount points of the hierarchies sandboxes' groups live in.
func (d *Driver) hierarchies() []string {
	var out []string
	if d.layout.V2 != "" {
		out = append(out, d.layout.V2)
	}
	for _, ctrl := range []string{"memory", "pids", "cpu", "cpuacct", "freezer"} {
		if m, ok := d.layout.V1[ctrl]; ok && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

// Resize implements backend.Resizer: it rewrites the sandbox's cgroup limits.
func (d *Driver) Resize(ctx context.Context, id sandbox.ID, spec sandbox.Spec) error {
	b, ok, err := d.lookup("resize", id)
	if err != nil {
		return err
	}
	if !ok {
		return &sandbox.Error{Op: "resize", ID: id, Err: fmt.Errorf("sandbox %w", sandbox.ErrNotFound)}
	}
	if err := b.group.SetLimits(d.limits(b.group, spec)); err != nil {
		return &sandbox.Error{Op: "resize", ID: id, Err: err}
	}
	if err := b.group.SetWorkPids(spec.Pids); err != nil {
		return &sandbox.Error{Op: "resize", ID: id, Err: err}
	}
	return nil
}

var _ backend.Resizer = (*Driver)(nil)
