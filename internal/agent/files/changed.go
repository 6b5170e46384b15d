// This file implements Changed: the regular files of a tree changed since a
// time, for a caller reporting what a command it ran created or modified.

package files

import (
	"errors"
	"io/fs"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// Changed returns the regular files under root (a wire directory; empty: the
// workdir) whose mtime or ctime is at or after since, as sorted wire paths,
// at most limit of them (0: DefaultSearchLimit). ctime counts as well as
// mtime because a file moved in, or extracted or copied with its old mtime
// kept, has a new ctime only. The walk does not enter other mounts (a
// directory that is a mount's root, or on another device); it skips nothing
// else. It reports truncated when the list may be incomplete: limit cut it,
// it looked at maxVisited entries or went maxWalkDepth levels deep, or a
// directory could not be read (vanished ones aside).
//
// File timestamps come from the kernel's coarse clock, up to a jiffy (1 to
// 10 ms) behind the real time: a caller that wants what a command wrote
// takes since just before starting it, minus a margin of a few jiffies.
func (f *FS) Changed(root string, since time.Time, limit int) ([]string, bool, error) {
	if limit <= 0 {
		limit = DefaultSearchLimit
	}
	w, err := f.cleanDir(root)
	if err != nil {
		return nil, false, err
	}
	d, err := f.openDir(w)
	if err != nil {
		return nil, false, err
	}
	defer d.release()
	var top unix.Stat_t
	if err := unix.Fstat(d.fd, &top); err != nil {
		return nil, false, pathErr(w, err)
	}
	sinceNs := since.UnixNano()
	var out []string
	incomplete := false
	wk := walker[struct{}]{
		f: f,
		visit: func(d *dirHandle, dirW, name string, typ fs.FileMode, _ struct{}) (bool, descend, struct{}) {
			switch {
			case typ.IsDir():
				var sx unix.Statx_t
				if err := statxAt(d, name, unix.STATX_TYPE, &sx); err != nil {
					if !errors.Is(err, unix.ENOENT) {
						incomplete = true
					}
				} else if sameMount(&sx, &top) {
					return false, enter, struct{}{}
				}
			case typ.IsRegular():
				var sx unix.Statx_t
				if err := statxAt(d, name, unix.STATX_TYPE|unix.STATX_MTIME|unix.STATX_CTIME, &sx); err != nil {
					if !errors.Is(err, unix.ENOENT) {
						incomplete = true
					}
				} else if sx.Mode&unix.S_IFMT == unix.S_IFREG && (nanos(sx.Mtime) >= sinceNs || nanos(sx.Ctime) >= sinceNs) {
					return true, skip, struct{}{}
				}
			}
			return false, skip, struct{}{}
		},
		emit: func(_ *dirHandle, dirW, name string, _ fs.FileMode) { out = append(out, join(dirW, name)) },
		stop: func() bool { return len(out) > limit },
		unreadable: func(_ string, err error) {
			if !errors.Is(err, unix.ENOENT) {
				incomplete = true
			}
		},
	}
	wk.dir(d, w, 0, struct{}{})
	slices.Sort(out) // in order already
	truncated := wk.truncated || incomplete
	if len(out) > limit {
		out, truncated = out[:limit], true
	}
	return out, truncated, nil
}

// statxAt is statx of name in directory d, not following a symlink.
func statxAt(d *dirHandle, name string, mask int, sx *unix.Statx_t) error {
	for {
		err := unix.Statx(d.fd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC, mask, sx)
		if err != unix.EINTR {
			return err
		}
	}
}

// sameMount reports whether directory sx is on the mount the walk started
// on: not a mount's root (when the kernel says), and on the same device.
func sameMount(sx *unix.Statx_t, top *unix.Stat_t) bool {
	if sx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && sx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return false
	}
	return unix.Mkdev(sx.Dev_major, sx.Dev_minor) == top.Dev
}

func nanos(t unix.StatxTimestamp) int64 { return t.Sec*1e9 + int64(t.Nsec) }
