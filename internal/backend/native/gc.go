// This file implements GC: the sandboxes of instances whose daemon and data
// dir are gone. Their agents run on in their cgroups with no daemon to
// re-adopt them; a daemon sweeps only its own instance, so these stay until
// `sbx gc` removes them.

package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/internal/isolation/cgroup"
	"sbx.dev/sbx/internal/isolation/quota"
	"sbx.dev/sbx/internal/sandbox"
)

// Orphan is one sandbox GC found: its instance, its id and the processes
// that were still in its groups.
type Orphan struct {
	Instance string
	ID       string
	Procs    int
}

// GC finds the sandboxes, in sbx's cgroups, of instances that are not live
// and, unless dryRun, kills their processes and removes their groups and the
// instance's record of its uid range. An instance is live while its data dir
// exists (its uid range record names it) or an `sbx serve` process runs for
// it; others are left alone.
func GC(ctx context.Context, dryRun bool) ([]Orphan, error) {
	layout, err := cgroup.Detect()
	if err != nil {
		return nil, err
	}
	roots := layout.Roots()
	instances := map[string][]sandbox.ID{}
	for _, root := range roots {
		ents, _ := os.ReadDir(filepath.Join(root, "sbx"))
		for _, inst := range ents {
			if !inst.IsDir() || !instanceName.MatchString(inst.Name()) {
				continue
			}
			ids := instances[inst.Name()]
			boxes, _ := os.ReadDir(filepath.Join(root, "sbx", inst.Name()))
			for _, b := range boxes {
				if id, err := sandbox.ParseID(b.Name()); err == nil && b.IsDir() && !slices.Contains(ids, id) {
					ids = append(ids, id)
				}
			}
			instances[inst.Name()] = ids
		}
	}
	live, err := liveInstances()
	if err != nil {
		return nil, err
	}
	var out []Orphan
	var errs []error
	for _, inst := range slices.Sorted(maps.Keys(instances)) {
		if live[inst] {
			continue
		}
		for _, id := range instances[inst] {
			g, err := layout.Group("sbx/" + inst + "/" + string(id))
			if err != nil {
				errs = append(errs, err)
				continue
			}
			pids, _ := g.Procs()
			out = append(out, Orphan{Instance: inst, ID: string(id), Procs: len(pids)})
			if dryRun {
				continue
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := g.Kill(); err != nil {
				errs = append(errs, err)
			} else if err := g.WaitEmpty(wctx); err != nil {
				errs = append(errs, err)
			} else if err := g.Remove(wctx); err != nil {
				errs = append(errs, err)
			}
			cancel()
		}
		if dryRun {
			continue
		}
		// Its disk quota pool stays mounted when its sandboxes outlived the
		// daemon and the data dir was removed around the mount point.
		if err := unmountGone(inst); err != nil {
			errs = append(errs, err)
		}
		if err := layout.RemoveSpares("sbx/" + inst); err != nil {
			errs = append(errs, err)
		}
		for _, root := range roots {
			err := os.Remove(filepath.Join(root, "sbx", inst))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing instance %s's group: %w", inst, err))
			}
		}
		os.Remove(filepath.Join(uidRegistry, inst))
	}
	if !dryRun {
		if _, err := os.Stat(uidRegistry); err == nil {
			readRegistry("", true) // prunes the records of instances whose data dir is gone
		}
	}
	return out, errors.Join(errs...)
}

// unmountGone detaches the disk quota pool of instance inst, not live, if
// its data dir (from its uid range record) names no instance any more: a dir
// made again by another daemon is that daemon's, mounts included.
func unmountGone(inst string) error {
	reg, ok := readRecord(inst)
	if !ok || !filepath.IsAbs(reg.dataDir) {
		return nil
	}
	if _, err := os.Stat(filepath.Join(reg.dataDir, instanceFile)); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := quota.Unmount(reg.dataDir); err != nil {
		return fmt.Errorf("instance %s: %w", inst, err)
	}
	return nil
}

// liveInstances are the instances with a daemon or a data dir: those whose
// uid range record names a data dir that exists, and those of every running
// `sbx serve` (its --data-dir, or the default, holds the instance's name).
func liveInstances() (map[string]bool, error) {
	live := map[string]bool{}
	if _, err := os.Stat(uidRegistry); err == nil {
		others, _, err := readRegistry("", false)
		if err != nil {
			return nil, err
		}
		for _, o := range others {
			if !gone(o, true) {
				live[o.instance] = true
			}
		}
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(string(bytes.TrimRight(raw, "\x00")), "\x00")
		if len(argv) < 2 || argv[1] != "serve" {
			continue
		}
		dir := "/var/lib/sbx"
		for i, a := range argv {
			if v, ok := strings.CutPrefix(a, "--data-dir="); ok {
				dir = v
			} else if a == "--data-dir" && i+1 < len(argv) {
				dir = argv[i+1]
			}
		}
		if !filepath.IsAbs(dir) {
			if cwd, err := os.Readlink(filepath.Join("/proc", p.Name(), "cwd")); err == nil {
				dir = filepath.Join(cwd, dir)
			}
		}
		if name, err := os.ReadFile(filepath.Join(dir, "instance")); err == nil {
			live[strings.TrimSpace(string(name))] = true
		}
	}
	return live, nil
}
