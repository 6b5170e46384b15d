// This file implements directory archives out of the sandbox: a tar stream of
// one directory, walked through directory fds without following any symlink,
// plus what extraction shares with it: the caps, entry-name rules and the
// fd-relative helpers.

package files

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/tarsafe"
)

// Archive caps. Extraction takes the bytes and entries caps from
// ArchiveLimits (the agent's configuration, lowered per request); depth and
// name length are fixed.
const (
	// DefaultArchiveMaxBytes bounds the uncompressed size of an archive (its tar
	// stream, headers included) and the file bytes it writes.
	DefaultArchiveMaxBytes = tarsafe.DefaultMaxBytes
	// DefaultArchiveMaxEntries bounds the entries read from an archive plus the
	// parent directories extraction creates for them.
	DefaultArchiveMaxEntries = tarsafe.DefaultMaxEntries
	// ArchiveMaxDepth bounds the components of an entry name, and how deep a
	// download walks.
	ArchiveMaxDepth = tarsafe.MaxDepth
	// ArchiveMaxName bounds an entry name and a symlink or hardlink target.
	ArchiveMaxName = tarsafe.MaxName
)

// ArchiveLimits caps one extraction; zero fields mean the defaults.
type ArchiveLimits struct {
	MaxBytes   int64
	MaxEntries int64
	// BytesCap names what set MaxBytes, for the message of a cap hit:
	// "max_bytes" unless something lower did (the sandbox's disk quota).
	BytesCap string
}

// WithDefaults returns l with zero fields set to the defaults.
func (l ArchiveLimits) WithDefaults() ArchiveLimits {
	if l.MaxBytes <= 0 {
		l.MaxBytes, l.BytesCap = DefaultArchiveMaxBytes, ""
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultArchiveMaxEntries
	}
	if l.BytesCap == "" {
		l.BytesCap = "max_bytes"
	}
	return l
}

// entryPath splits an archive entry name into its components beneath the
// destination, by tarsafe's rules (Invalid or TooLarge otherwise).
func entryPath(what, name string) ([]string, error) {
	comps, err := tarsafe.Components(what, name)
	return comps, ruleErr(err)
}

// ruleErr gives an archive rule's error (tarsafe.Error) this package's kind.
func ruleErr(err error) error {
	var te *tarsafe.Error
	if !errors.As(err, &te) {
		return err
	}
	k := Invalid
	if te.TooLarge {
		k = TooLarge
	}
	return &Error{Kind: k, Msg: te.Msg, Err: err}
}

// openDirAt opens name in dir as a directory, never following a symlink.
func openDirAt(dir int, name string) (int, error) {
	for {
		fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// isDir, isReg and isLink read a stat mode.
func isDir(m uint32) bool  { return m&unix.S_IFMT == unix.S_IFDIR }
func isReg(m uint32) bool  { return m&unix.S_IFMT == unix.S_IFREG }
func isLink(m uint32) bool { return m&unix.S_IFMT == unix.S_IFLNK }

// pseudoFS reports whether fd is on a kernel filesystem whose files are not
// data (proc, sysfs, cgroup), which archives leave out.
func pseudoFS(fd int) (string, bool) {
	var s unix.Statfs_t
	if unix.Fstatfs(fd, &s) != nil {
		return "", false
	}
	switch s.Type {
	case unix.PROC_SUPER_MAGIC:
		return "proc", true
	case unix.SYSFS_MAGIC:
		return "sysfs", true
	case unix.CGROUP_SUPER_MAGIC, unix.CGROUP2_SUPER_MAGIC:
		return "cgroup", true
	}
	return "", false
}

// ArchiveSource is a directory opened for OpenArchive.
type ArchiveSource struct {
	Path    string // wire path of the directory
	dir     *os.File
	Skipped int64 // special files and pseudo-filesystems left out by Write
}

// OpenArchive opens directory p to stream as a tar archive. Errors that a
// caller should see as a status (missing, not a directory) come from here,
// before anything is written.
func (f *FS) OpenArchive(p string) (*ArchiveSource, error) {
	w, err := f.cleanDir(p)
	if err != nil {
		return nil, err
	}
	d, err := f.OpenFile(w, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	if kind, ok := pseudoFS(int(d.Fd())); ok {
		d.Close()
		return nil, errorf(Invalid, "path '%s' is on a %s filesystem, which is not archived", w, kind)
	}
	return &ArchiveSource{Path: w, dir: d}, nil
}

// Close releases the directory.
func (a *ArchiveSource) Close() error { return a.dir.Close() }

// Write streams the directory's contents to w as a tar archive, names relative
// to the directory: directories, regular files and symlinks (stored as
// symlinks, never followed). Device nodes, FIFOs, sockets and pseudo
// filesystems are left out and counted in Skipped; hard links are stored as
// separate files. Entries that vanish during the walk are left out. A
// directory nested deeper than ArchiveMaxDepth is an error: the caller must
// then end the stream as broken, not as complete.
func (a *ArchiveSource) Write(w io.Writer) error {
	tw := tar.NewWriter(w)
	if err := a.walk(tw, a.dir, "", 0); err != nil {
		return err
	}
	return tw.Close()
}

// walk writes the entries of directory d, whose names start with prefix and
// which is depth levels below the root.
func (a *ArchiveSource) walk(tw *tar.Writer, d *os.File, prefix string, depth int) error {
	dfd := int(d.Fd())
	for {
		names, err := d.Readdirnames(256)
		for _, name := range names {
			if err := a.entry(tw, dfd, prefix, name, depth+1); err != nil {
				return err
			}
		}
		if err == io.EOF || (err == nil && len(names) == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading directory '%s': %w", prefix, err)
		}
	}
}

// gone reports whether err says the entry vanished or changed type under the
// walk: the sandbox may change its files while they are archived.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR)
}

func (a *ArchiveSource) entry(tw *tar.Writer, dfd int, prefix, name string, depth int) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if gone(err) {
			return nil
		}
		return fmt.Errorf("stat of '%s%s': %w", prefix, name, err)
	}
	rel := prefix + name
	hdr := &tar.Header{
		Name:    rel,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: time.Unix(st.Mtim.Sec, 0),
	}
	switch {
	case isDir(st.Mode):
		if depth > ArchiveMaxDepth {
			return fmt.Errorf("directory '%s' is nested deeper than %d levels (max_depth)", rel, ArchiveMaxDepth)
		}
		fd, err := openDirAt(dfd, name)
		if err != nil {
			if gone(err) {
				return nil
			}
			return fmt.Errorf("opening directory '%s': %w", rel, err)
		}
		sub := os.NewFile(uintptr(fd), rel)
		defer sub.Close()
		if _, ok := pseudoFS(fd); ok {
			a.Skipped++
			return nil
		}
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		return a.walk(tw, sub, rel+"/", depth)
	case isReg(st.Mode):
		fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			if gone(err) {
				return nil
			}
			return fmt.Errorf("opening '%s': %w", rel, err)
		}
		fl := os.NewFile(uintptr(fd), rel)
		defer fl.Close()
		if err := unix.Fstat(fd, &st); err != nil || !isReg(st.Mode) {
			return nil // swapped for something else since the stat
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		// Exactly the size announced: a file that grows is cut, one that
		// shrinks is padded with zeros, so the archive stays well formed.
		n, err := io.CopyN(tw, readerOnly{fl}, st.Size)
		if err != nil && err != io.EOF {
			return fmt.Errorf("reading '%s': %w", rel, err)
		}
		if n < st.Size {
			_, err = io.CopyN(tw, zeros{}, st.Size-n)
		}
		return err
	case isLink(st.Mode):
		target, err := readlinkAt(dfd, name)
		if err != nil {
			if gone(err) || errors.Is(err, unix.EINVAL) {
				return nil
			}
			return fmt.Errorf("reading symlink '%s': %w", rel, err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return tw.WriteHeader(hdr)
	}
	a.Skipped++
	return nil
}

// readlinkAt reads the symlink name in dir.
func readlinkAt(dir int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) > ArchiveMaxName {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, 2*len(buf))
	}
}

// readerOnly hides a file's WriterTo, so copies use the caller's path.
type readerOnly struct{ io.Reader }

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
