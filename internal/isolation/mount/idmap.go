// This file implements the idmapped lower layers of a sandbox in a user
// namespace. The read-only layers (the host's /usr, the skeleton, /etc) belong
// to host root, which the sandbox's user namespace does not map: seen from
// inside they would be nobody's, so root inside could neither copy them up
// nor chown what it installs. The daemon, privileged over the host's
// filesystems, makes a detached copy of each layer's mount with the sandbox's
// mapping applied (host 0 appears as the sandbox's root); the init stage, in
// the sandbox's namespaces, attaches the copies and stacks its overlays on
// them.

package mount

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// IDMapped returns a detached, read-only, nosuid, nodev mount of the host
// directory src whose ids are shifted by the user namespace usernsFD's
// mapping. The caller passes the fd to the init stage, which attaches it with
// Attach, and then closes it.
func IDMapped(src string, usernsFD int) (int, error) {
	return IDMappedAt(unix.AT_FDCWD, src, src, usernsFD)
}

// IDMappedAt is IDMapped of the directory open at dirfd (an O_PATH fd the
// caller holds, so the directory mapped is the one it opened, whatever its
// path names now) when path is "", else of path relative to dirfd. name
// names the directory in errors.
func IDMappedAt(dirfd int, path, name string, usernsFD int) (int, error) {
	flags := unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC
	if path == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	fd, err := unix.OpenTree(dirfd, path, uint(flags))
	if err != nil {
		return -1, &Error{Op: "open_tree", Source: name, Err: err}
	}
	src := name
	attr := unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(usernsFD),
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return -1, &Error{Op: "mount_setattr idmap", Source: src, Err: err}
	}
	return fd, nil
}

// Attach mounts each detached mount fds[i] at targets[i] (existing
// directories) in the caller's mount namespace and closes the fds.
func Attach(fds []int, targets []string) error {
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if len(fds) != len(targets) {
		return fmt.Errorf("attaching idmapped layers: %d mounts for %d targets", len(fds), len(targets))
	}
	for i, fd := range fds {
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, targets[i], unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return &Error{Op: "move_mount", Target: targets[i], Err: err}
		}
	}
	return nil
}
