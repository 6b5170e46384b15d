package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/osthread"
)

// nsfsMagic is NSFS_MAGIC: what statfs says of a namespace file.
const nsfsMagic = 0x6e736673

// pinNetns makes a new network namespace and pins it at path (a bind mount of
// its nsfs file), so it outlives the thread that made it and the daemon.
func pinNetns(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o600)
	if err != nil {
		return fmt.Errorf("pinning the router namespace: %w", err)
	}
	f.Close()
	err = osthread.Discarded(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("pinning the router namespace at %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		os.Remove(path)
	}
	return err
}

// openPinned opens the namespace pinned at path; os.ErrNotExist when there
// is none (a plain file left by a crash between create and mount is removed).
func openPinned(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Type != nsfsMagic {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("%s is not a pinned namespace: %w", path, os.ErrNotExist)
	}
	return f, nil
}

// unpin unmounts and removes the pin at path.
func unpin(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		err = nil // not mounted
	}
	if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// inNetns runs fn on a thread of its own, thrown away afterwards, in the
// network namespace ns.
func inNetns(ns *os.File, fn func() error) error {
	return osthread.Discarded(func() error {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("entering network namespace: %w", err)
		}
		return fn()
	})
}

// sysctl writes value to /proc/sys/<key> of the calling thread's network
// namespace (call it from inNetns).
func sysctl(key, value string) error {
	return os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0)
}
