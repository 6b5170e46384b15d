// This file resolves wire paths when the tree's root is "/", the jail's own
// root. The mount namespace confines every path there, except the agent's own
// magic links: /proc/1/fd/N, /proc/self/cwd and the like lead to what the agent
// holds open, host files and cgroup directories outside the sandbox's view,
// which the sandbox's own processes cannot follow (the agent is not dumpable).
// So no resolution follows a magic link (RESOLVE_NO_MAGICLINKS), and an
// operation on a final component goes through its parent directory opened
// that way (SECURITY.md FS-09, FS-16: the API acts with the sandbox's rights).

package files

import (
	"io/fs"
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"
)

// openNoMagic opens wire path w (clean, absolute) without following any magic
// link on the way, the final component included.
func openNoMagic(w string, flag int, perm fs.FileMode) (*os.File, error) {
	how := &unix.OpenHow{Flags: uint64(flag) | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	if flag&(os.O_CREATE|unix.O_TMPFILE) != 0 {
		how.Mode = uint64(perm.Perm())
	}
	for {
		fd, err := unix.Openat2(unix.AT_FDCWD, w, how)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: w, Err: err}
		}
		return os.NewFile(uintptr(fd), w), nil
	}
}

// inParent opens the directory holding wire path w (clean, absolute, not "/")
// without following magic links, and returns a path naming w's final
// component through that directory, for calls that do not follow it (lstat,
// readlink, mkdir, rename, remove). done closes the directory.
func inParent(w string) (p string, onProc bool, done func(), err error) {
	d, err := openNoMagic(path.Dir(w), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return "", false, nil, err
	}
	var st unix.Statfs_t
	onProc = unix.Fstatfs(int(d.Fd()), &st) == nil && st.Type == unix.PROC_SUPER_MAGIC
	return "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + path.Base(w), onProc, func() { d.Close() }, nil
}

// lstatNoMagic is os.Lstat of wire path w through inParent.
func lstatNoMagic(w string) (fs.FileInfo, error) {
	if w == "/" {
		return os.Lstat(w)
	}
	p, _, done, err := inParent(w)
	if err != nil {
		return nil, err
	}
	defer done()
	return os.Lstat(p)
}

// statNoMagic is os.Stat of wire path w, refusing magic links.
func statNoMagic(w string) (fs.FileInfo, error) {
	fl, err := openNoMagic(w, unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	return fl.Stat()
}

// readlinkNoMagic reads symlink w. The targets of procfs links (an fd's
// host path among them) are never read: they describe the agent, not the
// sandbox's files.
func readlinkNoMagic(w string) (string, error) {
	p, onProc, done, err := inParent(w)
	if err != nil {
		return "", err
	}
	defer done()
	if onProc {
		return "", &fs.PathError{Op: "readlink", Path: w, Err: unix.EPERM}
	}
	return os.Readlink(p)
}

// mkdirAllNoMagic is os.MkdirAll of wire path w, each directory made through
// its parent opened without magic links.
func mkdirAllNoMagic(w string, perm fs.FileMode) error {
	if d, err := openNoMagic(w, unix.O_PATH|unix.O_DIRECTORY, 0); err == nil {
		d.Close()
		return nil
	} else if !os.IsNotExist(err) {
		return err
	}
	if parent := path.Dir(w); parent != w {
		if err := mkdirAllNoMagic(parent, perm); err != nil {
			return err
		}
	}
	p, _, done, err := inParent(w)
	if err != nil {
		return err
	}
	defer done()
	if err := os.Mkdir(p, perm); err != nil && !os.IsExist(err) {
		return &fs.PathError{Op: "mkdir", Path: w, Err: underlying(err)}
	}
	return nil
}

// renameNoMagic is os.Rename of wire paths src to dst.
func renameNoMagic(src, dst string) error {
	ps, _, doneS, err := inParent(src)
	if err != nil {
		return err
	}
	defer doneS()
	pd, _, doneD, err := inParent(dst)
	if err != nil {
		return err
	}
	defer doneD()
	if err := os.Rename(ps, pd); err != nil {
		return &os.LinkError{Op: "rename", Old: src, New: dst, Err: underlying(err)}
	}
	return nil
}

// removeAllNoMagic is os.RemoveAll of wire path w (never "/").
func removeAllNoMagic(w string) error {
	p, _, done, err := inParent(w)
	if err != nil {
		return err
	}
	defer done()
	return os.RemoveAll(p)
}

// underlying strips the path an os error carries, which names the agent's fd.
func underlying(err error) error {
	switch e := err.(type) {
	case *fs.PathError:
		return e.Err
	case *os.LinkError:
		return e.Err
	}
	return err
}
