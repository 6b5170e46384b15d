// Package landlock builds Landlock rulesets and applies them to one thread.
//
// The agent builds one ruleset when it starts and applies it, for each
// process it starts, to the thread that process is forked from, right before
// the fork: a Landlock domain belongs to the thread's credentials and the
// child inherits it. The agent's other threads stay unrestricted (it must
// reach its cgroup and serve the whole sandbox), so restriction is always per
// thread here, never process-wide.
//
// Handled: every filesystem right the kernel's ABI knows up to ABI 5
// (execute, read, write, truncate, make and remove files and directories,
// refer, ioctl on devices). Not handled: network rights (the sandbox's network
// namespace isolates it, and loopback inside must keep working) and scopes
// (signals and abstract sockets: each exec gets its own domain, so scoping
// would cut one sandbox's processes off from each other).
package landlock

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// Rights by ABI version: ABI 1 has the first 13; 2 adds refer (linking and
// renaming across directories); 3 truncate; 5 ioctl on device files.
const (
	rightsABI1 = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSReadDir |
		ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeChar | ll.AccessFSMakeDir |
		ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym
	rightsABI2 = rightsABI1 | ll.AccessFSRefer
	rightsABI3 = rightsABI2 | ll.AccessFSTruncate
	rightsABI5 = rightsABI3 | ll.AccessFSIoctlDev

	// readRights are those of Rules.Read.
	readRights = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir
	// fileRights are the rights a rule on a file (not a directory) may hold.
	fileRights = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
	// devices: never granted, anywhere.
	deviceRights = ll.AccessFSMakeChar | ll.AccessFSMakeBlock
)

// ABI returns the kernel's Landlock ABI version, or 0 and why it has none.
func ABI() (int, error) {
	v, err := ll.LandlockGetABIVersion()
	switch {
	case errors.Is(err, unix.EOPNOTSUPP):
		return 0, errors.New("Landlock is built in but not enabled (not in the lsm= boot parameter)")
	case errors.Is(err, unix.ENOSYS):
		return 0, errors.New("the kernel has no Landlock")
	case err != nil:
		return 0, fmt.Errorf("landlock_create_ruleset: %w", err)
	}
	return v, nil
}

// handled returns the filesystem rights ABI abi knows.
func handled(abi int) uint64 {
	switch {
	case abi >= 5:
		return rightsABI5
	case abi >= 3:
		return rightsABI3
	case abi == 2:
		return rightsABI2
	default:
		return rightsABI1
	}
}

// Rules are absolute paths: beneath each of Read, reading and executing;
// beneath each of Write, every right but making device nodes.
type Rules struct {
	Read  []string
	Write []string
}

// Ruleset is a built Landlock ruleset, ready to apply.
type Ruleset struct {
	fd      int
	abi     int
	skipped []string
}

// Build creates a ruleset handling every filesystem right of the kernel's ABI
// and adds r's rules. A path that does not exist is skipped (Skipped lists
// it); any other failure is an error naming the path.
func Build(r Rules) (*Ruleset, error) {
	abi, err := ABI()
	if err != nil {
		return nil, err
	}
	all := handled(abi)
	fd, err := ll.LandlockCreateRuleset(&ll.RulesetAttr{HandledAccessFS: all}, 0)
	if err != nil {
		return nil, fmt.Errorf("landlock_create_ruleset: %w", err)
	}
	unix.CloseOnExec(fd)
	rs := &Ruleset{fd: fd, abi: abi}
	for _, rule := range []struct {
		paths  []string
		rights uint64
	}{{r.Read, readRights}, {r.Write, all &^ deviceRights}} {
		for _, p := range rule.paths {
			if err := rs.add(p, rule.rights&all); err != nil {
				rs.Close()
				return nil, err
			}
		}
	}
	return rs, nil
}

// add allows rights beneath path (only file rights on a file).
func (rs *Ruleset) add(path string, rights uint64) error {
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		rs.skipped = append(rs.skipped, path)
		return nil
	}
	if err != nil {
		return &fs.PathError{Op: "landlock: open", Path: path, Err: err}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return &fs.PathError{Op: "landlock: stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		rights &= fileRights
	}
	if err := ll.LandlockAddPathBeneathRule(rs.fd, &ll.PathBeneathAttr{AllowedAccess: rights, ParentFd: pfd}, 0); err != nil {
		return &fs.PathError{Op: "landlock: add rule", Path: path, Err: err}
	}
	return nil
}

// ABI is the Landlock ABI version the ruleset was built for.
func (rs *Ruleset) ABI() int { return rs.abi }

// Skipped lists the rules' paths that did not exist.
func (rs *Ruleset) Skipped() []string { return rs.skipped }

// Close releases the ruleset; threads restricted by it stay restricted.
func (rs *Ruleset) Close() error {
	if rs.fd < 0 {
		return nil
	}
	err := unix.Close(rs.fd)
	rs.fd = -1
	return err
}

// RestrictThread enforces the ruleset on the calling thread only. The caller
// holds runtime.LockOSThread, has set no_new_privs on this thread (else the
// kernel refuses with EPERM), and discards the thread afterwards: it must
// never run another goroutine.
func (rs *Ruleset) RestrictThread() error {
	if err := ll.LandlockRestrictSelf(rs.fd, 0); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}
