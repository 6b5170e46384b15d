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
	"strconv"
	"strings"
	"syscall"

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
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(maps), "\n") {
		// start-end perms offset dev inode path
		f := strings.Fields(line)
		if len(f) < 6 || f[1] != "r--p" || f[4] != strconv.FormatUint(ino, 10) {
			continue
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		// A private file mapping that was never written: its pages come
		// back from the file.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_DONTNEED); errno != 0 {
			return os.NewSyscallError("madvise", errno)
		}
	}
	return nil
}

func settings(s []debug.BuildSetting) map[string]string {
	m := make(map[string]string, len(s))
	for _, kv := range s {
		m[kv.Key] = kv.Value
	}
	return m
}
