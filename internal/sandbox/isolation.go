package sandbox

import (
	"slices"
	"strings"
)

// Layer names, fixed: SECURITY.md §3.3.
const (
	LayerUserNS   = "userns"
	LayerPidNS    = "pidns"
	LayerMntNS    = "mntns"
	LayerNetNS    = "netns"
	LayerUTSNS    = "utsns"
	LayerIPCNS    = "ipcns"
	LayerCgroupNS = "cgroupns"
	LayerCgroup   = "cgroup"
	LayerCaps     = "caps"
	LayerRlimits  = "rlimits"
	LayerCloseFDs = "closefds"
	LayerNNP      = "nnp"
	LayerLandlock = "landlock"
	LayerSeccomp  = "seccomp"
)

// AllLayers lists every native layer in the order they are applied.
var AllLayers = []string{
	LayerUserNS, LayerPidNS, LayerMntNS, LayerNetNS, LayerUTSNS, LayerIPCNS, LayerCgroupNS,
	LayerCgroup, LayerCaps, LayerRlimits, LayerCloseFDs, LayerNNP, LayerLandlock, LayerSeccomp,
}

// LayerState says whether a layer is enforced.
type LayerState string

const (
	Applied       LayerState = "applied"
	Missing       LayerState = "missing"
	NotApplicable LayerState = "n/a"
)

// Isolation is what a sandbox actually has enforced, not what was asked for.
type Isolation struct {
	Backend string `json:"backend"`
	// Level is the backend's tier name, carrying any gap: "native",
	// "native-minus-landlock-seccomp", "none" for local.
	Level          string                `json:"level"`
	Layers         map[string]LayerState `json:"layers"`
	LandlockABI    int                   `json:"landlock_abi"`
	SeccompProfile string                `json:"seccomp_profile,omitempty"`
	Cgroup         string                `json:"cgroup"` // v1 | v2 | hybrid | none
	AcceptedGaps   []string              `json:"accepted_gaps"`
	// Sandbox is false when the backend is not a sandbox at all (local).
	Sandbox bool `json:"sandbox"`
	// Warning is shown wherever the sandbox is: "local backend: not a sandbox".
	Warning string `json:"warning,omitempty"`
}

// MissingLayers returns the layers reported as missing, sorted.
func (iso Isolation) MissingLayers() []string {
	var out []string
	for name, st := range iso.Layers {
		if st == Missing {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// LevelName returns base, or base-minus-<missing layers> when any are missing.
func LevelName(base string, layers map[string]LayerState) string {
	missing := Isolation{Layers: layers}.MissingLayers()
	if len(missing) == 0 {
		return base
	}
	return base + "-minus-" + strings.Join(missing, "-")
}
