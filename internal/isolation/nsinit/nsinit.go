// Package nsinit is the jail's init stage: the first thing the process the native
// backend starts in new namespaces and cgroups does. It applies the remaining
// containment steps in order, then returns so the same process goes on as the
// agent (or, for tests, execs a planned program). It knows nothing of sandboxes
// beyond the plan it is handed.
package nsinit

import "sbx.dev/sbx/internal/isolation/mount"

// File descriptors of the init stage. The parent passes them as its first extra
// files, in this order.
const (
	// PlanFD is the read end of a pipe carrying the Plan (MarshalBinary).
	PlanFD = 3
	// StatusFD is the write end of a pipe on which init writes why it failed. On
	// success it is left to the agent, which closes it once it serves (or writes
	// why it could not); a successful execve closes it with nothing written.
	StatusFD = 4
)

// Plan is everything the init stage does, decided by the parent.
type Plan struct {
	// Hostname is set in the new UTS namespace.
	Hostname string `json:"hostname"`
	// Mount is the root filesystem to assemble. Its relative paths resolve
	// from the working directory the init stage was started in.
	Mount mount.Plan `json:"mount"`
	// Workdir is the cwd after pivot_root, within the new root.
	Workdir string `json:"workdir"`
	// MountsFD, when > 0, is an inherited unix socket on which the parent sends
	// the detached mounts of Mount.Attach, in order, as one SCM_RIGHTS message.
	MountsFD int `json:"mounts_fd,omitempty"`
	// CloseFDs are inherited fds init closes once started (the fd the parent
	// executed the sbx binary from).
	CloseFDs []int `json:"close_fds,omitempty"`
	// UserNamespaces, when >= 0, is the number of user namespaces processes
	// of the sandbox may create (user.max_user_namespaces of its own user
	// namespace): 0 refuses every nested one, whatever the seccomp profile.
	UserNamespaces int `json:"user_namespaces"`
	// OpenFDs are opened before pivot_root (host paths) and kept across execve.
	OpenFDs []OpenFD `json:"open_fds,omitempty"`
	// KeepFDs are inherited fds kept across execve of Path, besides 0, 1, 2 and
	// OpenFDs. Without Path every fd stays open, close-on-exec.
	KeepFDs []int `json:"keep_fds,omitempty"`
	// NoFile caps RLIMIT_NOFILE (soft and hard) at min(NoFile, current hard).
	NoFile uint64 `json:"nofile"`
	// NProc, when > 0, is RLIMIT_NPROC (soft and hard).
	NProc uint64 `json:"nproc,omitempty"`
	// BoundingPerThread leaves the bounding set of init's threads whole:
	// the agent narrows it on each thread it forks a process from, which
	// costs a syscall per capability on one thread instead of stopping every
	// thread per capability. Every set but the bounding one is narrowed on
	// all threads here, with no_new_privs, so no thread of the agent can
	// gain what it dropped anyway.
	BoundingPerThread bool `json:"bounding_per_thread,omitempty"`
	// Caps are the capabilities kept (names as in capabilities(7), "CAP_" omitted);
	// every other is dropped from every set. DefaultCaps is Docker's default set.
	Caps []string `json:"caps"`
	// Path, Argv and Env, when Path is set, are a program executed last in place
	// of going on as the agent: a test's command.
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	// Agent is the configuration (boot.AgentConfig) of the agent the process
	// goes on as when there is no Path: Main returns it. It travels here, not
	// in argv, which the host shows to every user.
	Agent []byte `json:"agent,omitempty"`
}

// OpenFD is a file opened before pivot_root and moved to fd FD.
type OpenFD struct {
	Path  string `json:"path"`
	Flags int    `json:"flags"`
	FD    int    `json:"fd"`
}
