// This file implements spare subvolumes: a released sandbox directory
// emptied and kept, for the next Create to rename instead of making a
// subvolume, as cgroup.Layout.KeepSpares does for groups. A subvolume's
// life costs btrfs more than its few files: the create ioctl, the delete
// ioctl and, after a commit, the cleaner dropping its trees. Emptying one
// takes an unlink per entry, which for a sandbox that wrote little is half
// of that (400 releases of a sandbox's tree on the pool, busy CPU of all
// threads with the cleaner's: 700 us each against 375 us).

package quota

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// SparePrefix begins the name of a spare subvolume in the pool: never a
// sandbox id's shape.
const SparePrefix = "spare-"

// spareMaxBytes is the most an emptied subvolume may still count to be
// kept. A file's extents are uncounted only once the transaction that frees
// them commits: what the emptied subvolume counts after the unlinks is what
// the next sandbox would find charged to its limit until then. An empty
// subvolume counts 16 KiB (its root's tree block).
const spareMaxBytes = 1 << 20

// IsSpare reports whether name is a spare subvolume of the pool.
func IsSpare(name string) bool { return strings.HasPrefix(name, SparePrefix) }

// KeepSpares makes Release keep up to n emptied subvolumes for Create to
// take again (0: none, every release deletes). Set it before the first
// Release.
func (p *Pool) KeepSpares(n int) {
	p.mu.Lock()
	p.maxSpares = n
	p.mu.Unlock()
}

// Release removes name, a subvolume Create made and nothing uses any more,
// as Remove does, or keeps it as a spare: when spares are kept and there is
// room, it is emptied (at most spareMaxEntries unlinks), counts at most
// spareMaxBytes once empty, and its root goes back to root's ownership and
// mode 0700 (a directory's owner says which sandbox's ids it holds:
// claimers skip uid 0). Anything else (more entries, one that cannot go, a
// nested subvolume or a mount, a count too high) deletes it. Either way the
// space it freed goes back to the host later (Released).
func (p *Pool) Release(name string) error {
	if !validName(name) || IsSpare(name) {
		return fmt.Errorf("disk quota: bad subvolume name %q", name)
	}
	if err := p.keepOrRemove(name); err != nil {
		return err
	}
	p.Released()
	return nil
}

func (p *Pool) keepOrRemove(name string) error {
	p.mu.Lock()
	room := len(p.spares) < p.maxSpares && !p.stopped
	p.mu.Unlock()
	if !room {
		return p.Remove(name)
	}
	spare, err := p.empty(name)
	if err != nil {
		return p.Remove(name)
	}
	p.mu.Lock()
	if len(p.spares) >= p.maxSpares || p.stopped {
		p.mu.Unlock()
		return p.Remove(spare)
	}
	p.spares = append(p.spares, spare)
	p.mu.Unlock()
	return nil
}

// spareMaxEntries bounds the entries Release unlinks to empty a subvolume:
// past it, deleting the subvolume in one ioctl is cheaper, and a sandbox's
// DELETE does not wait for an unlink per file of a large tree. A sandbox
// that wrote nothing leaves some twenty (its tree, its /etc entries, the
// overlays' work directories).
const spareMaxEntries = 256

// errManyEntries stops an emptying past spareMaxEntries.
var errManyEntries = errors.New("more entries than a spare's emptying unlinks")

// empty unlinks everything in subvolume name, checks what it still
// counts, resets its root's owner and mode, and renames it to a spare name,
// which it returns.
func (p *Pool) empty(name string) (string, error) {
	path := filepath.Join(p.mnt, name)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	if st.Ino != subvolumeRootIno {
		return "", fmt.Errorf("%s is not a subvolume", path)
	}
	c := clearer{budget: spareMaxEntries, buf: make([]byte, 8192)}
	if err := c.clearDir(fd); err != nil {
		return "", fmt.Errorf("emptying %s: %w", path, err)
	}
	if used, err := p.Used(path); err != nil || used > spareMaxBytes {
		return "", fmt.Errorf("%s still counts %d bytes: %v", path, used, err)
	}
	if err := unix.Fchownat(fd, "", 0, 0, unix.AT_EMPTY_PATH); err != nil {
		return "", err
	}
	if err := unix.Fchmod(fd, 0o700); err != nil {
		return "", err
	}
	for {
		p.mu.Lock()
		spare := SparePrefix + strconv.FormatUint(p.spareSeq, 10)
		p.spareSeq++
		p.mu.Unlock()
		err := unix.Renameat2(unix.AT_FDCWD, path, unix.AT_FDCWD, filepath.Join(p.mnt, spare), unix.RENAME_NOREPLACE)
		if err == nil {
			return spare, nil
		}
		if !errors.Is(err, unix.EEXIST) { // EEXIST: another pool's (a test's) spare
			return "", err
		}
	}
}

// clearer empties a subvolume: at most budget entries unlinked, directories
// read into buf (one for the whole tree: names are copied out before a
// subdirectory is read).
type clearer struct {
	budget int
	buf    []byte
}

// clearDir unlinks every entry of the directory dir, depth first, each
// through its parent's descriptor (nothing is followed), taking one from
// the budget per entry. It reads the directory again after unlinking what
// it read, until nothing is left.
func (c *clearer) clearDir(dir int) error {
	for {
		names, err := c.readNames(dir)
		if err != nil || len(names) == 0 {
			return err
		}
		for _, name := range names {
			if c.budget <= 0 {
				return errManyEntries
			}
			c.budget--
			err := unix.Unlinkat(dir, name, 0)
			if errors.Is(err, unix.EISDIR) {
				err = c.clearSubdir(dir, name)
			}
			if err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
}

// clearSubdir empties and removes the directory name in dir. A mount
// point or a nested subvolume's root refuses (EBUSY, EPERM).
func (c *clearer) clearSubdir(dir int, name string) error {
	sub, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	err = c.clearDir(sub)
	unix.Close(sub)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
}

// readNames lists the directory dir's entries but . and .., from its start.
func (c *clearer) readNames(dir int) ([]string, error) {
	if _, err := unix.Seek(dir, 0, 0); err != nil {
		return nil, err
	}
	var names []string
	for {
		n, err := unix.Getdents(dir, c.buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(c.buf[:n], -1, names)
	}
}

// takeSpare renames a spare to name and returns its path, or "" when there
// is none to take; fs.ErrExist when name exists. A spare the rename fails
// on otherwise is deleted.
func (p *Pool) takeSpare(name string) (string, error) {
	for {
		p.mu.Lock()
		n := len(p.spares)
		if n == 0 {
			p.mu.Unlock()
			return "", nil
		}
		spare := p.spares[n-1]
		p.spares = p.spares[:n-1]
		p.mu.Unlock()
		path := filepath.Join(p.mnt, name)
		err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(p.mnt, spare), unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
		if err == nil {
			return path, nil
		}
		if errors.Is(err, unix.EEXIST) {
			p.mu.Lock()
			p.spares = append(p.spares, spare)
			p.mu.Unlock()
			return "", fmt.Errorf("disk quota: %s: %w", path, fs.ErrExist)
		}
		p.Remove(spare)
	}
}

// DropSpares deletes every spare the pool keeps and keeps none from here
// on: before Close, so that an empty pool unmounts.
func (p *Pool) DropSpares() {
	p.mu.Lock()
	spares := p.spares
	p.spares, p.maxSpares = nil, 0
	p.mu.Unlock()
	for _, s := range spares {
		p.Remove(s)
	}
}

// RemoveSpares deletes every spare in the pool's directory, whoever kept
// it: those of a daemon that died left them to the next one. It returns
// the first error.
func (p *Pool) RemoveSpares() error {
	ents, err := os.ReadDir(p.mnt)
	if err != nil {
		return fmt.Errorf("disk quota: %w", err)
	}
	var first error
	for _, e := range ents {
		if IsSpare(e.Name()) {
			if err := p.Remove(e.Name()); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}
