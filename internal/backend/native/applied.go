// This file builds a sandbox's isolation report from what was done, never
// from a table: the daemon reads the init process's namespaces back from the
// kernel, and the init stage and agent report the layers they applied, each
// read back where the kernel tells (nsinit.Layers, agent's confinement).

package native

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/sandbox"
)

// nsLayers maps the namespace layers to their /proc/<pid>/ns entries.
var nsLayers = map[string]string{
	sandbox.LayerUserNS: "user", sandbox.LayerPidNS: "pid", sandbox.LayerMntNS: "mnt",
	sandbox.LayerNetNS: "net", sandbox.LayerUTSNS: "uts", sandbox.LayerIPCNS: "ipc",
	sandbox.LayerCgroupNS: "cgroup",
}

// applied is the isolation sandbox pid has: its namespaces as the kernel shows
// them against the daemon's own, its cgroup layer, and the layers rep says
// the init stage and agent applied. It returns with it the reason of each
// layer that is not applied.
func (d *Driver) applied(pid int, rep *boot.Report) (sandbox.Isolation, map[string]string) {
	why := map[string]string{}
	for _, l := range sandbox.AllLayers {
		why[l] = "not reported by the sandbox"
	}
	for layer, ns := range nsLayers {
		why[layer] = sameNS(pid, ns)
	}
	if d.cgroupComplete() {
		delete(why, sandbox.LayerCgroup)
	} else {
		why[sandbox.LayerCgroup] = d.missingReason(sandbox.LayerCgroup)
	}
	if rep != nil {
		for layer, v := range rep.Layers {
			if !isLayer(layer) {
				continue
			}
			if _, isNS := nsLayers[layer]; isNS && v == "applied" {
				continue // the kernel's view above decides
			}
			why[layer] = v
		}
	}
	iso := sandbox.Isolation{Backend: Name, Layers: map[string]sandbox.LayerState{}, Cgroup: d.layout.Mode(), Sandbox: true}
	for _, l := range sandbox.AllLayers {
		if r, ok := why[l]; !ok || r == "" || r == "applied" {
			iso.Layers[l] = sandbox.Applied
			delete(why, l)
		} else {
			iso.Layers[l] = sandbox.Missing
		}
	}
	if rep != nil {
		if iso.Layers[sandbox.LayerLandlock] == sandbox.Applied {
			iso.LandlockABI = rep.LandlockABI
		}
		if iso.Layers[sandbox.LayerSeccomp] == sandbox.Applied {
			iso.SeccompProfile = rep.SeccompProfile
		}
	}
	iso.Level = sandbox.LevelName(Name, iso.Layers)
	return iso, why
}

func isLayer(l string) bool { return slices.Contains(sandbox.AllLayers, l) }

// sameNS returns "" when pid's namespace ns differs from the daemon's (the
// sandbox has its own), else why not.
func sameNS(pid int, ns string) string {
	theirs, err := nsInode("/proc/" + strconv.Itoa(pid) + "/ns/" + ns)
	if err != nil {
		return err.Error()
	}
	ours, err := ownNS(ns)
	if err != nil {
		return err.Error()
	}
	if theirs == ours {
		return fmt.Sprintf("the sandbox shares the host's %s namespace", ns)
	}
	return ""
}

// ownNS is the inode of this process's namespace ns: read once, it does not
// change.
func ownNS(ns string) (uint64, error) {
	ownNSMu.Lock()
	defer ownNSMu.Unlock()
	if ino, ok := ownNSInodes[ns]; ok {
		return ino, nil
	}
	ino, err := nsInode("/proc/self/ns/" + ns)
	if err == nil {
		ownNSInodes[ns] = ino
	}
	return ino, err
}

var (
	ownNSMu     sync.Mutex
	ownNSInodes = map[string]uint64{}
)

func nsInode(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino, nil
}
