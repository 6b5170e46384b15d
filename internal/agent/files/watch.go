// This file implements directory watches through inotify.

package files

import (
	"encoding/binary"
	"errors"
	"os"
	"path"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// WatchEvent is one change in a watched tree.
type WatchEvent struct {
	Name string // relative to the watched directory
	Path string // wire path
	Op   string // create | write | remove | rename | chmod
}

// Watcher follows changes below one directory.
type Watcher struct {
	fs        *FS
	base      string
	recursive bool
	file      *os.File // the inotify instance, read through the poller

	mu  sync.Mutex
	wds map[int32]string // guarded by mu: watch descriptor → wire directory
	buf []byte
}

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// network filesystems, refused unless allowed
var networkFS = map[int64]bool{0x6969: true, 0x517B: true, 0xFF534D42: true, 0xFE534D42: true, 0x564c: true}

// Watch starts watching directory p (and, with recursive, every directory
// below it, including those created later).
func (f *FS) Watch(p string, recursive, allowNetwork bool) (*Watcher, error) {
	w, err := f.cleanDir(p)
	if err != nil {
		return nil, err
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, pathErr(w, err)
	}
	wt := &Watcher{fs: f, base: w, recursive: recursive, file: os.NewFile(uintptr(fd), "inotify"),
		wds: map[int32]string{}, buf: make([]byte, 64<<10)}
	if !allowNetwork {
		if d, done, err := f.HostDir(w); err == nil {
			var sfs unix.Statfs_t
			serr := unix.Statfs(d, &sfs)
			done()
			if serr == nil && networkFS[int64(sfs.Type)] {
				wt.Close()
				return nil, errorf(Invalid, "path '%s' is on a network mount", w)
			}
		}
	}
	if err := wt.add(w); err != nil {
		wt.Close()
		return nil, err
	}
	return wt, nil
}

// add watches directory w, and with recursive the directories below it.
func (wt *Watcher) add(w string) error {
	d, done, err := wt.fs.HostDir(w)
	if err != nil {
		return err
	}
	wd, err := unix.InotifyAddWatch(int(wt.file.Fd()), d, watchMask)
	done()
	if err != nil {
		return pathErr(w, err)
	}
	wt.mu.Lock()
	wt.wds[int32(wd)] = w
	wt.mu.Unlock()
	if wt.recursive {
		ents, err := wt.fs.readDir(w)
		if err != nil {
			return nil
		}
		for _, e := range ents {
			if e.IsDir() {
				wt.add(path.Join(w, e.Name()))
			}
		}
	}
	return nil
}

// Next blocks until changes arrive, and returns them. It fails once the
// watcher is closed.
func (wt *Watcher) Next() ([]WatchEvent, error) {
	n, err := wt.file.Read(wt.buf)
	if err != nil {
		return nil, err
	}
	var out []WatchEvent
	b := wt.buf[:n]
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:]))
		mask := binary.NativeEndian.Uint32(b[4:])
		nameLen := int(binary.NativeEndian.Uint32(b[12:]))
		if len(b) < unix.SizeofInotifyEvent+nameLen {
			break
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+nameLen]), "\x00")
		b = b[unix.SizeofInotifyEvent+nameLen:]
		wt.mu.Lock()
		dir, ok := wt.wds[wd]
		if mask&unix.IN_IGNORED != 0 {
			delete(wt.wds, wd)
		}
		wt.mu.Unlock()
		if !ok || name == "" {
			continue
		}
		full := path.Join(dir, name)
		relName := strings.TrimPrefix(strings.TrimPrefix(full, wt.base), "/")
		for _, op := range []struct {
			bit uint32
			op  string
		}{
			{unix.IN_CREATE | unix.IN_MOVED_TO, "create"},
			{unix.IN_MOVED_FROM, "rename"},
			{unix.IN_ATTRIB, "chmod"},
			{unix.IN_MODIFY, "write"},
			{unix.IN_DELETE, "remove"},
		} {
			if mask&op.bit != 0 {
				out = append(out, WatchEvent{Name: relName, Path: full, Op: op.op})
			}
		}
		if wt.recursive && mask&unix.IN_ISDIR != 0 && mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			wt.add(full)
		}
	}
	return out, nil
}

// Close stops the watch and unblocks Next.
func (wt *Watcher) Close() error {
	err := wt.file.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}
