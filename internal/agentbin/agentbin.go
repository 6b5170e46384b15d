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
	"unsafe"

	"golang.org/x/sys/unix"
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

// Unmap drops b (what Binary returned) from this process's resident memory:
// it is part of the binary's read-only data, read back from the file if it
// is touched again. A daemon that has sealed it has no more use for it.
func Unmap(b []byte) {
	if len(b) == 0 {
		return
	}
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := (start + page - 1) &^ (page - 1) // whole pages within b only
	hi := (start + uintptr(len(b))) &^ (page - 1)
	if hi <= lo {
		return
	}
	unix.Madvise(unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), lo-start)), hi-lo), unix.MADV_DONTNEED)
}

func settings(s []debug.BuildSetting) map[string]string {
	m := make(map[string]string, len(s))
	for _, kv := range s {
		m[kv.Key] = kv.Value
	}
	return m
}
