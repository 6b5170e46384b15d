// This file implements what the agent applies to every process of a sandbox,
// last before its execve: the seccomp filter of the policy's profile and the
// Landlock ruleset of the sandbox's writable places.

package native

import (
	"fmt"
	"slices"
	"sync"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/isolation/seccomp"
	"sbx.dev/sbx/internal/sandbox"
)

// compiled is a seccomp profile compiled for the agent.
type compiled struct {
	prog []byte
	id   string
	// nestedUserNS: the profile lets processes make user namespaces, so the
	// sandbox's limit on them is lifted too.
	nestedUserNS bool
}

// filters caches compiled profiles by name: compiling is the same work for
// every sandbox.
var filters sync.Map // name → compiled

// filter returns the compiled seccomp profile name; an unknown name is the
// caller's error.
func (d *Driver) filter(name string) (compiled, error) {
	if c, ok := filters.Load(name); ok {
		return c.(compiled), nil
	}
	prof, err := seccomp.Lookup(name)
	if err != nil {
		return compiled{}, sandbox.Invalid("seccomp_profile", "%v", err)
	}
	prog, err := seccomp.Compile(prof)
	if err != nil {
		return compiled{}, fmt.Errorf("compiling seccomp profile %q: %w", name, err)
	}
	c := compiled{prog: prog.Bytes(), id: prog.ID(), nestedUserNS: name == "nested-userns"}
	filters.Store(name, c)
	return c, nil
}

// writable are the places inside a sandbox its processes may write: every
// top-level directory that is one of its overlays or binds, its tmpfs mounts
// and the device nodes programs write to. / itself, /proc, /sys and the rest
// of /dev stay read-only to them.
var writable = []string{
	"/usr", "/etc", "/root", "/home", "/var", "/opt", "/srv", "/mnt", "/run",
	"/workspace", "/tmp", "/dev/shm", "/dev/pts", "/dev/ptmx",
	"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
}

// landlockRules are the sandbox's Landlock rules: read and execute anywhere
// in its view, write only where writable says and in extra, its template's
// own top-level directories of that kind (the host's that get their own
// overlay here; a directory template's real /bin, /lib…: rootLayers).
func landlockRules(extra []string) *boot.LandlockRules {
	return &boot.LandlockRules{Read: []string{"/"}, Write: append(slices.Clone(writable), extra...)}
}
