// Package files is the agent's view of the sandbox's files: every path on the
// wire is resolved inside the root, through os.Root when the root is a directory
// of the host (local backend), so "..", absolute symlinks and symlink swaps
// cannot lead out of it. It also implements glob, grep and directory watches.
// It knows nothing of the wire.
package files
