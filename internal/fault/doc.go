// Package fault holds the crash points of the create path (SECURITY.md RL-02).
// fault.Point(name) kills the calling process with SIGKILL when the binary was
// built with the build tag sbxfault and the environment variable SBX_FAULT names
// the point; in every other binary it is an empty function the compiler inlines
// away. The crash test (test/e2e/crash_test.go) builds sbx with the tag, kills the
// daemon at each point, and checks what a restart makes of the half-made sandbox.
//
// The points, in the order a native create reaches them:
//
//	intent  the store holds the intent record (state creating), nothing else exists
//	rootfs  the sandbox's directory, overlay upper/work dirs and workspace exist
//	cgroup  the sandbox's cgroups exist, with their limits
//	netns   the init stage runs in its new namespaces, waiting for its plan
//	jail    the init stage has its plan and builds the jail; the agent is not ready
//	agent   the agent serves; the store still says creating
//	commit  the store says running; the caller has no answer yet
//
// Beside the points: Missing fakes a missing isolation layer (SBX_FAULT_MISSING),
// Fail fails a step (SBX_FAULT_FAIL) and Wall moves the wall clock
// (SBX_FAULT_WALL). Package fault imports nothing of sbx, and reads nothing
// but those variables and the file SBX_FAULT_WALL names.
package fault

// Env is the environment variable naming the point to crash at.
const Env = "SBX_FAULT"

// The named points; Point takes one of them.
const (
	Intent = "intent"
	Rootfs = "rootfs"
	Cgroup = "cgroup"
	Netns  = "netns"
	Jail   = "jail"
	Agent  = "agent"
	Commit = "commit"
)

// Points lists every point, in the order a native create reaches them.
var Points = []string{Intent, Rootfs, Cgroup, Netns, Jail, Agent, Commit}
