// This file converts domain values to their wire form, once, at the edge.

package httpapi

import (
	"fmt"
	"io/fs"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/sandbox"
)

func wireSandbox(sb sandbox.Sandbox) openapi.Sandbox {
	labels := sb.Spec.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	// Times in milliseconds, as the store keeps them: a sandbox reads the same
	// from its create, a replay of it and a get.
	return openapi.Sandbox{
		ID:        string(sb.ID),
		State:     string(sb.State),
		Backend:   sb.Backend,
		Template:  sb.Spec.Template,
		CreatedAt: sb.CreatedAt.UTC().Truncate(time.Millisecond),
		ExpiresAt: sb.ExpiresAt.UTC().Truncate(time.Millisecond),
		Limits: openapi.Limits{
			MemoryMB: sb.Spec.MemoryBytes / sandbox.MiB,
			CPUs:     float64(sb.Spec.MilliCPUs) / 1000,
			Pids:     sb.Spec.Pids,
			DiskMB:   sb.Spec.DiskBytes / sandbox.MiB,
			Timeout:  int64(sb.Spec.TTL.Seconds()),
		},
		Network:     openapi.NetworkPolicy{Mode: string(sb.Spec.Network), Allow: sb.Spec.NetworkAllow, Block: sb.Spec.NetworkBlock},
		Labels:      labels,
		Isolation:   wireIsolation(sb.Backend, sb.Isolation),
		StateReason: sb.Error,
		PublicPorts: []int{}, // the server fills them (publicPorts)
	}
}

func wireIsolation(backend string, iso sandbox.Isolation) openapi.Isolation {
	layers := make(map[string]string, len(iso.Layers))
	for k, v := range iso.Layers {
		layers[k] = string(v)
	}
	gaps := iso.AcceptedGaps
	if gaps == nil {
		gaps = []string{}
	}
	if iso.Backend == "" {
		iso.Backend = backend
	}
	return openapi.Isolation{
		Backend:        iso.Backend,
		Level:          iso.Level,
		Layers:         layers,
		LandlockABI:    iso.LandlockABI,
		SeccompProfile: iso.SeccompProfile,
		Cgroup:         iso.Cgroup,
		AcceptedGaps:   gaps,
		Sandbox:        iso.Sandbox,
		Warning:        iso.Warning,
	}
}

func wireResult(r *sandbox.ExecResult) *openapi.ExecResult {
	if r == nil {
		return nil
	}
	out := &openapi.ExecResult{
		ProcessID:     r.ProcessID,
		PID:           r.PID,
		ExitCode:      r.ExitCode,
		Reason:        r.Reason,
		Signal:        r.Signal,
		DurationMS:    r.Duration.Milliseconds(),
		Truncated:     r.Truncated,
		StdoutDropped: r.StdoutDropped,
		StderrDropped: r.StderrDropped,
		StdoutPath:    r.StdoutPath,
		StderrPath:    r.StderrPath,
		StdoutBytes:   r.StdoutBytes,
		StderrBytes:   r.StderrBytes,
	}
	out.Stdout, out.StdoutBase64 = openapi.Text(r.Stdout)
	out.Stderr, out.StderrBase64 = openapi.Text(r.Stderr)
	return out
}

func wireProcess(p sandbox.ProcessInfo) openapi.Process {
	argv := p.Argv
	if argv == nil {
		argv = []string{}
	}
	state := "exited"
	if p.Running {
		state = "running"
	}
	return openapi.Process{
		ProcessID: p.ID,
		PID:       p.PID,
		Argv:      argv,
		Cwd:       p.Cwd,
		Tag:       p.Tag,
		State:     state,
		StartedAt: p.StartedAt.UTC(),
		Result:    wireResult(p.Result),
	}
}

func wireFileInfo(fi sandbox.FileInfo) openapi.FileInfo {
	return openapi.FileInfo{
		Name:          fi.Name,
		Path:          fi.Path,
		Type:          fi.Type,
		Size:          fi.Size,
		Mode:          fmt.Sprintf("%04o", unixMode(fi.Mode)),
		Permissions:   fi.Permissions,
		Owner:         fi.Owner,
		Group:         fi.Group,
		ModifiedAt:    fi.ModTime.UTC(),
		SymlinkTarget: fi.SymlinkTarget,
	}
}

// unixMode returns the permission bits of m in their Unix form, 07777.
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m & 0o7777)
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}
