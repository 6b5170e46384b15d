// Package boot is the contract between a backend and the processes it starts from the
// sbx binary: the hidden arguments that select a stage and the configuration each
// stage receives. It holds data only.
package boot

// Hidden first arguments of the sbx binary. cmd/sbx dispatches on them before any
// flag parsing, signal handling or goroutine starts.
const (
	// InitArg selects the jail's init stage (isolation/nsinit): it finishes
	// containment inside the new namespaces, then the same process goes on as the
	// agent, whose AgentConfig came in the init stage's plan.
	InitArg = "__sbx_init"
	// AgentArg selects the in-sandbox agent; a further argument (the sandbox
	// id) only names the process. It reads AgentConfig (MarshalBinary) from ConfigFD.
	AgentArg = "__sbx_agent"
	// SpawnerArg selects the native driver's spawner, which forks the
	// sandboxes' init stages for the daemon (backend/native).
	SpawnerArg = "__sbx_spawner"
)

// ConfigFD is the inherited descriptor, a pipe, the agent started with AgentArg
// reads its AgentConfig from, to EOF. The configuration is never an argument:
// argv is world-readable on the host (/proc/<pid>/cmdline), and Env may hold
// the caller's secrets.
const ConfigFD = 3

// RuntimeEnv is the Go runtime's configuration for the agent, given in its
// environment so the runtime starts with it: an idle agent should cost little
// memory (one P, a small heap), and changing these after start stops the world.
var RuntimeEnv = []string{"GOMAXPROCS=1", "GOGC=50", "GOMEMLIMIT=16MiB"}

// AgentConfig is what the agent needs to serve. Code in the sandbox may read
// it from the agent's memory; only Env, which that code receives anyway, may
// hold the caller's secrets.
type AgentConfig struct {
	// SandboxID names the sandbox, for logs and the hostname.
	SandboxID string `json:"sandbox_id"`
	// ListenFD is an inherited, listening unix socket to serve on. Backends that
	// jail the agent create the socket on the host side and pass the fd, so the
	// sandbox never controls the path the daemon dials.
	ListenFD int `json:"listen_fd,omitempty"`
	// Listen is a unix socket path to create and serve on, used when ListenFD is 0.
	Listen string `json:"listen,omitempty"`
	// Root is the directory every file operation is confined to: "/" inside a jail
	// (the mount namespace is the boundary), the workspace for the local backend.
	// Paths on the wire are absolute paths within Root.
	Root string `json:"root"`
	// Workdir is the default cwd of processes and base of relative paths, as seen
	// on the wire (within Root): "/workspace".
	Workdir string `json:"workdir"`
	// OutputDir is where the full output of a truncated exec is kept, as seen on
	// the wire (within Root).
	OutputDir string `json:"output_dir"`
	// Env is the base environment of every process (PATH, HOME, LANG, ...).
	Env []string `json:"env"`
	// OutputLimitBytes is the default per-stream cap on output kept in a result.
	OutputLimitBytes int64 `json:"output_limit_bytes"`
	// SpillLimitBytes caps the full output saved per stream.
	SpillLimitBytes int64 `json:"spill_limit_bytes"`
	// ArchiveMaxBytes caps an archive extraction's uncompressed bytes;
	// 0 means the agent's default (8 GiB).
	ArchiveMaxBytes int64 `json:"archive_max_bytes,omitempty"`
	// ArchiveMaxEntries caps an archive extraction's entries; 0 means the
	// agent's default (100 000).
	ArchiveMaxEntries int64 `json:"archive_max_entries,omitempty"`
	// CgroupFD, when > 0, is an inherited O_DIRECTORY fd of a cgroup v2 directory
	// (the sandbox's own, in the unified hierarchy; on a pure v2 host its work
	// leaf) under which the agent makes one group per process, so a kill
	// reaches the whole tree through cgroup.kill. Its pids.events, when it has
	// one (the work leaf's), tells that a fork hit the workload's pids limit.
	CgroupFD int `json:"cgroup_fd,omitempty"`
	// FreezerFD, when > 0 and CgroupFD is not, is the same for a cgroup v1 freezer
	// directory: kill is freeze, SIGKILL every member, thaw.
	FreezerFD int `json:"freezer_fd,omitempty"`
	// OOMFD, when > 0, is an inherited fd of the sandbox's memory.events (v2) or
	// memory.oom_control (v1); its oom_kill counter tells an OOM kill from others.
	OOMFD int `json:"oom_fd,omitempty"`
	// PidsDirFD, when > 0 (cgroup v1), is an inherited fd of the sandbox's
	// pids directory: the agent makes its "work" group there, limited to
	// WorkPids, and starts every process in it, so a fork bomb leaves the
	// agent the room above WorkPids that the sandbox's own limit grants.
	PidsDirFD int   `json:"pids_dir_fd,omitempty"`
	WorkPids  int64 `json:"work_pids,omitempty"`
	// OOMFormat is "v2" or "v1" for OOMFD.
	OOMFormat string `json:"oom_format,omitempty"`
	// Subreaper makes the agent adopt orphans when it is not PID 1 (local backend).
	Subreaper bool `json:"subreaper,omitempty"`
	// ReadyFD, when > 0, is the write end of a pipe the backend reads to EOF: the
	// agent closes it once it serves, or first writes why it could not start.
	ReadyFD int `json:"ready_fd,omitempty"`
	// Seccomp, when set, is the seccomp-bpf program (struct sock_filter
	// entries, 8 bytes each, native byte order) every process the agent starts
	// runs under, loaded on the thread it is forked from; SeccompID names it
	// ("<profile>@<hash>").
	Seccomp   []byte `json:"seccomp,omitempty"`
	SeccompID string `json:"seccomp_id,omitempty"`
	// Landlock, when set, is the Landlock ruleset every process the agent
	// starts runs under: what it may read and what it may write.
	Landlock *LandlockRules `json:"landlock,omitempty"`
	// Layers, when set, are the layers the init stage applied before the
	// agent, each "applied" or why not; the agent adds its own and reports
	// them all on ReadyFD.
	Layers map[string]string `json:"layers,omitempty"`
	// LogFD, when > 0, receives the agent's own logs (JSON lines), kept apart from
	// every process's stdout and stderr. Otherwise logs go to stderr.
	LogFD int `json:"log_fd,omitempty"`
}

// LandlockRules are absolute paths inside the sandbox: beneath Read only
// reading and executing, beneath Write everything but making devices.
type LandlockRules struct {
	Read  []string `json:"read"`
	Write []string `json:"write"`
}

// ReadyPrefix starts the line an agent writes on ReadyFD once it serves,
// followed by its Report (MarshalBinary). Anything else written there is why it
// could not start.
const ReadyPrefix = "ready "

// Report is what the init stage and agent actually applied.
type Report struct {
	// Layers maps a layer name to "applied", or to why it is not.
	Layers         map[string]string `json:"layers"`
	LandlockABI    int               `json:"landlock_abi,omitempty"`
	SeccompProfile string            `json:"seccomp_profile,omitempty"`
	// Marks are when the process reached each step of its start, in order:
	// the backend logs the time between them (the host and the sandbox share
	// CLOCK_MONOTONIC: no time namespace).
	Marks []Mark `json:"marks,omitempty"`
}

// Mark is a step of the init stage or agent and the CLOCK_MONOTONIC time,
// in nanoseconds, at which it was done.
type Mark struct {
	Step string `json:"step"`
	Mono int64  `json:"mono"`
}
