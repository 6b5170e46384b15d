package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// MaxPath is the longest wire path accepted.
const MaxPath = 4096

// FS is the sandbox's file tree as the agent serves it.
type FS struct {
	root    *os.Root // nil when the root is "/": the mount namespace is the jail
	host    string
	workdir string

	mu    sync.Mutex
	names map[string]string // guarded by mu: "u1000" / "g1000" → name
}

// New opens the tree rooted at root (a host path); workdir is the wire path
// relative paths start from.
func New(root, workdir string) (*FS, error) {
	if workdir == "" {
		workdir = "/"
	}
	f := &FS{host: path.Clean(root), workdir: path.Clean("/" + workdir), names: map[string]string{}}
	if f.host != "/" {
		r, err := os.OpenRoot(f.host)
		if err != nil {
			return nil, fmt.Errorf("opening the root: %w", err)
		}
		f.root = r
	}
	return f, nil
}

// Close releases the root.
func (f *FS) Close() error {
	if f.root != nil {
		return f.root.Close()
	}
	return nil
}

// Workdir is the default directory, as a wire path.
func (f *FS) Workdir() string { return f.workdir }

// Clean turns a wire path into a clean absolute wire path: relative paths start
// at the workdir, and ".." cannot climb above "/".
func (f *FS) Clean(p string) (string, error) {
	if len(p) > MaxPath {
		return "", errorf(Invalid, "path is longer than %d bytes", MaxPath)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errorf(Invalid, "path contains a NUL byte")
	}
	if p == "" {
		return f.workdir, nil
	}
	if p == "~" || strings.HasPrefix(p, "~/") {
		p = f.workdir + p[1:]
	}
	if !strings.HasPrefix(p, "/") {
		p = f.workdir + "/" + p
	}
	return path.Clean(p), nil
}

// rel is the name of wire path w for os.Root ("." for the root).
func rel(w string) string {
	if w == "/" {
		return "."
	}
	return strings.TrimPrefix(w, "/")
}

func (f *FS) lstat(w string) (fs.FileInfo, error) {
	if f.root == nil {
		return lstatNoMagic(w)
	}
	return f.root.Lstat(rel(w))
}

// cleanDir cleans p (Clean) and checks that it names an existing directory.
func (f *FS) cleanDir(p string) (string, error) {
	w, err := f.Clean(p)
	if err != nil {
		return "", err
	}
	st, err := f.stat(w)
	if err != nil {
		return "", pathErr(w, err)
	}
	if !st.IsDir() {
		return "", errorf(Invalid, "path '%s' is not a directory", w)
	}
	return w, nil
}

func (f *FS) stat(w string) (fs.FileInfo, error) {
	if f.root == nil {
		return statNoMagic(w)
	}
	return f.root.Stat(rel(w))
}

// OpenFile opens wire path w (already clean).
func (f *FS) OpenFile(w string, flag int, perm fs.FileMode) (*os.File, error) {
	var (
		fl  *os.File
		err error
	)
	if f.root == nil {
		fl, err = openNoMagic(w, flag, perm)
	} else {
		fl, err = f.root.OpenFile(rel(w), flag, perm)
	}
	return fl, pathErr(w, err)
}

func (f *FS) mkdirAll(w string, perm fs.FileMode) error {
	if f.root == nil {
		return mkdirAllNoMagic(w, perm)
	}
	return f.root.MkdirAll(rel(w), perm)
}

func (f *FS) readlink(w string) (string, error) {
	if f.root == nil {
		return readlinkNoMagic(w)
	}
	return f.root.Readlink(rel(w))
}

// HostDir returns a path the agent can chdir to for wire directory w, and a
// function to call once it is no longer needed: the directory opened through
// the root (or without magic links, when the root is "/"), as /proc/self/fd/N.
// A process started there cannot have been handed a directory outside the
// tree, as a cwd of /proc/self/fd/N naming one of the agent's own fds would
// (CVE-2024-21626).
func (f *FS) HostDir(w string) (string, func(), error) {
	var (
		d   *os.File
		err error
	)
	if f.root == nil {
		d, err = openNoMagic(w, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	} else {
		d, err = f.root.OpenFile(rel(w), os.O_RDONLY|syscall.O_DIRECTORY, 0)
	}
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return "", nil, errorf(Invalid, "path '%s' is not a directory", w)
		}
		return "", nil, pathErr(w, err)
	}
	return "/proc/self/fd/" + strconv.Itoa(int(d.Fd())), func() { d.Close() }, nil
}

// Info describes one entry.
type Info struct {
	Name, Path string // wire
	// Type is file, dir, symlink or other; for a symlink, TargetType is the
	// type of what it points to ("" when dangling or leading out of the root).
	Type, TargetType string
	Size             int64
	Mode             fs.FileMode // lstat's mode, type bits included
	TargetMode       fs.FileMode
	ModTime          time.Time
	Owner, Group     string
	SymlinkTarget    string // wire path the symlink resolves to
}

func typeOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

// Stat describes w without following a final symlink (its target's type and
// mode are in TargetType and TargetMode).
func (f *FS) Stat(p string) (Info, error) {
	w, err := f.Clean(p)
	if err != nil {
		return Info{}, err
	}
	fi, err := f.lstat(w)
	if err != nil {
		return Info{}, pathErr(w, err)
	}
	return f.info(w, fi), nil
}

func (f *FS) info(w string, fi fs.FileInfo) Info {
	in := Info{Name: path.Base(w), Path: w, Type: typeOf(fi.Mode()), Size: fi.Size(),
		Mode: fi.Mode(), ModTime: fi.ModTime(), TargetType: typeOf(fi.Mode()), TargetMode: fi.Mode()}
	if w == "/" {
		in.Name = "/"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		in.Owner = f.name('u', st.Uid)
		in.Group = f.name('g', st.Gid)
	}
	if in.Type == "symlink" {
		in.TargetType, in.TargetMode = "", 0
		if target, err := f.readlink(w); err == nil {
			if !strings.HasPrefix(target, "/") {
				target = path.Join(path.Dir(w), target)
			}
			in.SymlinkTarget = path.Clean(target)
		}
		if tfi, err := f.stat(w); err == nil {
			in.TargetType, in.TargetMode = typeOf(tfi.Mode()), tfi.Mode()
		}
	}
	return in
}

// name returns the user ('u') or group ('g') name of id, numeric as a fallback.
func (f *FS) name(kind byte, id uint32) string {
	key := string(kind) + strconv.FormatUint(uint64(id), 10)
	f.mu.Lock()
	n, ok := f.names[key]
	f.mu.Unlock()
	if ok {
		return n
	}
	n = strconv.FormatUint(uint64(id), 10)
	if kind == 'u' {
		if u, err := user.LookupId(n); err == nil {
			n = u.Username
		}
	} else if g, err := user.LookupGroupId(n); err == nil {
		n = g.Name
	}
	f.mu.Lock()
	if len(f.names) < 1024 {
		f.names[key] = n
	}
	f.mu.Unlock()
	return n
}

// List returns the entries below p up to depth levels (depth < 1 means 1),
// not following symlinked directories below p. p itself may be a symlink.
func (f *FS) List(p string, depth int) ([]Info, error) {
	w, err := f.cleanDir(p)
	if err != nil {
		return nil, err
	}
	depth = max(depth, 1)
	var out []Info
	const maxEntries = 100000
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		ents, err := f.readDir(dir)
		if err != nil {
			if dir == w {
				return pathErr(w, err)
			}
			return nil // a subdirectory that vanished or is unreadable
		}
		for _, e := range ents {
			if len(out) >= maxEntries {
				return errorf(Invalid, "path '%s' has more than %d entries at depth %d", w, maxEntries, depth)
			}
			cw := path.Join(dir, e.Name())
			fi, err := e.Info()
			if err != nil {
				continue
			}
			out = append(out, f.info(cw, fi))
			if e.IsDir() && level < depth {
				if err := walk(cw, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(w, 1); err != nil {
		return nil, err
	}
	return out, nil
}

func (f *FS) readDir(w string) ([]fs.DirEntry, error) {
	d, err := f.OpenFile(w, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	ents, err := d.ReadDir(-1)
	if err != nil {
		return nil, pathErr(w, err)
	}
	sortEntries(ents)
	return ents, nil
}

// MakeDir creates p and its parents. An existing directory is ErrExists
// (Exists kind); an existing non-directory is Invalid.
func (f *FS) MakeDir(p string) (Info, error) {
	w, err := f.Clean(p)
	if err != nil {
		return Info{}, err
	}
	if fi, err := f.lstat(w); err == nil {
		if fi.IsDir() {
			return Info{}, errorf(Exists, "directory '%s' already exists", w)
		}
		return Info{}, errorf(Invalid, "path '%s' already exists and is not a directory", w)
	}
	if err := f.mkdirAll(w, 0o755); err != nil {
		return Info{}, pathErr(w, err)
	}
	return f.Stat(w)
}

// Move renames src to dst, creating dst's parents.
func (f *FS) Move(src, dst string) (Info, error) {
	ws, err := f.Clean(src)
	if err != nil {
		return Info{}, err
	}
	wd, err := f.Clean(dst)
	if err != nil {
		return Info{}, err
	}
	if ws == "/" || wd == "/" {
		return Info{}, errorf(Invalid, "cannot move the root directory")
	}
	if _, err := f.lstat(ws); err != nil {
		return Info{}, pathErr(ws, err)
	}
	if err := f.mkdirAll(path.Dir(wd), 0o755); err != nil {
		return Info{}, pathErr(path.Dir(wd), err)
	}
	if f.root == nil {
		err = renameNoMagic(ws, wd)
	} else {
		err = f.root.Rename(rel(ws), rel(wd))
	}
	if err != nil {
		return Info{}, pathErr(wd, err)
	}
	return f.Stat(wd)
}

// Remove removes p and everything below it; a missing p is not an error.
func (f *FS) Remove(p string) error {
	w, err := f.Clean(p)
	if err != nil {
		return err
	}
	if w == "/" {
		return errorf(Invalid, "cannot remove the root directory")
	}
	if f.root == nil {
		if mountRoot(w) {
			// Its contents would go and then the removal fail (EBUSY):
			// refuse before anything is removed.
			return errorf(Invalid, "cannot remove '%s': it is a mount point (remove what is in it instead)", w)
		}
		err = removeAllNoMagic(w)
	} else {
		err = f.root.RemoveAll(rel(w))
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return pathErr(w, err)
}

// Read limits.
const (
	DefaultReadLimit = 1 << 20
	MaxReadLimit     = 16 << 20
)

// ReadResult is one page of a file.
type ReadResult struct {
	Path    string
	Content []byte
	Size    int64
	EOF     bool
}

// OpenRegular opens p for reading and refuses anything but a regular file, so
// a FIFO without a writer or a device cannot hang or flood the agent.
func (f *FS) OpenRegular(p string) (*os.File, string, fs.FileInfo, error) {
	w, err := f.Clean(p)
	if err != nil {
		return nil, "", nil, err
	}
	fl, err := f.OpenFile(w, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, w, nil, err
	}
	st, err := fl.Stat()
	if err != nil {
		fl.Close()
		return nil, w, nil, pathErr(w, err)
	}
	if st.IsDir() {
		fl.Close()
		return nil, w, nil, errorf(Invalid, "path '%s' is a directory", w)
	}
	if !st.Mode().IsRegular() {
		fl.Close()
		return nil, w, nil, errorf(Invalid, "path '%s' is not a regular file", w)
	}
	return fl, w, st, nil
}

// ReadFile reads up to limit bytes of p at offset.
func (f *FS) ReadFile(p string, offset, limit int64) (ReadResult, error) {
	if offset < 0 {
		return ReadResult{}, errorf(Invalid, "offset %d is negative", offset)
	}
	if limit <= 0 {
		limit = DefaultReadLimit
	}
	if limit > MaxReadLimit {
		return ReadResult{}, errorf(Invalid, "limit %d is above %d", limit, MaxReadLimit)
	}
	fl, w, st, err := f.OpenRegular(p)
	if err != nil {
		return ReadResult{}, err
	}
	defer fl.Close()
	size := st.Size()
	n := max(0, min(limit, size-offset))
	buf := make([]byte, n)
	got, err := fl.ReadAt(buf, offset)
	if err != nil && err != io.EOF {
		return ReadResult{}, pathErr(w, err)
	}
	return ReadResult{Path: w, Content: buf[:got], Size: size, EOF: offset+int64(got) >= size}, nil
}

// WriteFile writes content to p (or appends), creating its parents.
func (f *FS) WriteFile(p string, content []byte, mode fs.FileMode, appendTo bool) (Info, error) {
	w, err := f.Clean(p)
	if err != nil {
		return Info{}, err
	}
	if mode == 0 {
		mode = 0o644
	}
	if w == "/" {
		return Info{}, errorf(Invalid, "path '/' is a directory")
	}
	if err := f.mkdirAll(path.Dir(w), 0o755); err != nil {
		return Info{}, pathErr(path.Dir(w), err)
	}
	flag := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if appendTo {
		flag = os.O_WRONLY | os.O_CREATE | os.O_APPEND
	}
	fl, err := f.OpenFile(w, flag|syscall.O_NONBLOCK, mode.Perm())
	if err != nil {
		return Info{}, err
	}
	if st, err := fl.Stat(); err == nil && !st.Mode().IsRegular() {
		fl.Close()
		return Info{}, errorf(Invalid, "path '%s' is not a regular file", w)
	}
	_, werr := fl.Write(content)
	cerr := fl.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return Info{}, pathErr(w, err)
	}
	return f.Stat(w)
}

// Create makes the file at p for a streamed upload: it is written to a
// temporary file beside p, which Commit renames over p, so a failed upload
// leaves p as it was.
func (f *FS) Create(p string, mode fs.FileMode) (*Upload, error) {
	w, err := f.Clean(p)
	if err != nil {
		return nil, err
	}
	if w == "/" {
		return nil, errorf(Invalid, "path '/' is a directory")
	}
	if mode == 0 {
		mode = 0o644
	}
	if fi, err := f.stat(w); err == nil && fi.IsDir() {
		return nil, errorf(Invalid, "path '%s' is a directory", w)
	}
	if err := f.mkdirAll(path.Dir(w), 0o755); err != nil {
		return nil, pathErr(path.Dir(w), err)
	}
	var fl *os.File
	var tmp string
	for range 10 {
		tmp = path.Join(path.Dir(w), fmt.Sprintf(".%s.sbx-upload-%d", path.Base(w), time.Now().UnixNano()%1e9))
		fl, err = f.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
		if KindOf(err) != Exists {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return &Upload{file: fl, fs: f, tmp: tmp, dst: w}, nil
}

// Upload is a file being written by Create.
type Upload struct {
	file     *os.File
	fs       *FS
	tmp, dst string
}

// Write implements io.Writer.
func (u *Upload) Write(p []byte) (int, error) {
	n, err := u.file.Write(p)
	return n, pathErr(u.dst, err)
}

// Commit replaces the destination with what was written.
func (u *Upload) Commit() (Info, error) {
	if err := u.file.Close(); err != nil {
		u.fs.Remove(u.tmp)
		return Info{}, pathErr(u.dst, err)
	}
	var err error
	if u.fs.root == nil {
		err = renameNoMagic(u.tmp, u.dst)
	} else {
		err = u.fs.root.Rename(rel(u.tmp), rel(u.dst))
	}
	if err != nil {
		u.fs.Remove(u.tmp)
		return Info{}, pathErr(u.dst, err)
	}
	return u.fs.Stat(u.dst)
}

// Abort drops what was written.
func (u *Upload) Abort() {
	u.file.Close()
	u.fs.Remove(u.tmp)
}

// CreateSpill creates the file name in wire directory dir for a process's full
// output, and returns it with its wire path.
func (f *FS) CreateSpill(dir, name string) (*os.File, string, error) {
	w, err := f.Clean(path.Join(dir, name))
	if err != nil {
		return nil, "", err
	}
	if err := f.mkdirAll(path.Dir(w), 0o755); err != nil {
		return nil, "", pathErr(path.Dir(w), err)
	}
	fl, err := f.OpenFile(w, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	return fl, w, err
}

// mountRoot reports whether path (not followed) is the root of a mount.
func mountRoot(path string) bool {
	var st unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, 0, &st) != nil {
		return false
	}
	return st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}
