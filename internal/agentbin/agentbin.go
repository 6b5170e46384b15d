// Package agentbin holds the sbx-agent binary (cmd/sbx-agent) that make
// builds before sbx and embeds here: what the native backend runs inside each
// sandbox, smaller and quicker to start than the whole sbx binary.
package agentbin

import (
	"bytes"
	"debug/buildinfo"
	"embed"
	"fmt"
	"os"
	"runtime/debug"
	"syscall"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/procmaps"
)

//go:embed bin
var files embed.FS

// name is the embedded binary's file in bin/.
const name = "bin/sbx-agent"

// Binary returns the embedded sbx-agent, or why there is none to use: not
// built into this sbx (a plain `go build`, or the sbx_self_agent tag), or
// built from other sources than this binary (its VCS revision differs), or
// with cgo, which the jail's init cannot use. The caller then runs its own
// binary in the sandbox.
func Binary() ([]byte, error) {
	if selfAgent {
		return nil, fmt.Errorf("built with the sbx_self_agent tag")
	}
	b, err := files.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("no sbx-agent embedded (build with make)")
	}
	bi, err := buildinfo.Read(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("the embedded sbx-agent has no build info: %w", err)
	}
	agent := settings(bi.Settings)
	if agent["CGO_ENABLED"] == "1" {
		return nil, fmt.Errorf("the embedded sbx-agent was built with cgo")
	}
	if self, ok := debug.ReadBuildInfo(); ok {
		mine := settings(self.Settings)
		for _, k := range []string{"vcs.revision", "vcs.modified"} {
			if mine[k] != "" && agent[k] != mine[k] {
				return nil, fmt.Errorf("the embedded sbx-agent was built from other sources (%s %q, sbx's %q)", k, agent[k], mine[k])
			}
		}
		if self.GoVersion != bi.GoVersion {
			return nil, fmt.Errorf("the embedded sbx-agent was built by %s, sbx by %s", bi.GoVersion, self.GoVersion)
		}
	}
	return b, nil
}

// Release gives back the memory reading the embedded binary took, once the
// caller holds no reference to what Binary returned: the heap copy (a
// garbage collection and the scavenger, at once) and the pages of this
// program's read-only data it was copied from, which are the executable's
// own and read back from it when touched again.
func Release() error {
	debug.FreeOSMemory()
	self, err := os.Stat("/proc/self/exe")
	if err != nil {
		return err
	}
	ino := self.Sys().(*syscall.Stat_t).Ino
	// A private file mapping that was never written: its pages come back
	// from the file.
	return procmaps.Advise(func(m procmaps.Mapping) bool { return m.Perms == "r--p" && m.Inode == ino }, unix.MADV_DONTNEED)
}

func settings(s []debug.BuildSetting) map[string]string {
	m := make(map[string]string, len(s))
	for _, kv := range s {
		m[kv.Key] = kv.Value
	}
	return m
}
