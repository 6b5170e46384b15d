// This file implements the mount step of the init stage: overlays, binds, /dev,
// /proc and its masks, then pivot_root. It runs inside the sandbox's new mount
// namespace, so nothing it mounts is visible on the host.

package mount

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

// Overlay is one overlay mount: Lower layers (topmost first) under a per-sandbox
// Upper and Work directory, mounted at Target inside the root.
type Overlay struct {
	Target string   `json:"target"`
	Lower  []string `json:"lower"`
	Upper  string   `json:"upper"`
	Work   string   `json:"work"`
}

// Bind is a bind mount of the host path Source at Target inside the root.
type Bind struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Plan is the root filesystem to assemble. Host paths are absolute; Target paths
// are absolute within the new root.
type Plan struct {
	// Root is an empty host directory the root overlay is mounted on.
	Root string `json:"root"`
	// RootLayer is the overlay mounted at Root; its Target is ignored.
	RootLayer Overlay `json:"root_layer"`
	// Overlays are mounted in order, after the root.
	Overlays []Overlay `json:"overlays"`
	Binds    []Bind    `json:"binds"`
	// Attach are the directories the detached idmapped layers the parent
	// sends are attached at, in order (see IDMapped); overlays name them as
	// lower layers.
	Attach []string `json:"attach,omitempty"`
	// TmpBytes and ShmBytes bound the tmpfs at /tmp and /dev/shm.
	TmpBytes int64 `json:"tmp_bytes"`
	ShmBytes int64 `json:"shm_bytes"`
}

// devices are the host device nodes bound into /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// /proc paths masked as runc masks them, and more: readOnlyProc are made
// read-only; nullProc, files that show kernel memory, keys, timers, page
// frames or allocator state, are hidden behind /dev/null; emptyProc,
// directories of hardware interfaces, behind an empty read-only tmpfs.
// Those absent on a kernel are skipped.
var (
	readOnlyProc = []string{"sys", "sysrq-trigger", "irq", "bus", "fs"}
	nullProc     = []string{"kcore", "keys", "key-users", "timer_list", "sched_debug", "latency_stats", "timer_stats",
		"kpageflags", "kpagecount", "kpagecgroup", "slabinfo", "vmallocinfo", "pagetypeinfo", "kallsyms", "kmsg",
		"config.gz", "iomem", "ioports"}
	emptyProc = []string{"acpi", "asound", "scsi", "firmware", "driver", "mtrr"}
)

const (
	nosuidNodev = unix.MS_NOSUID | unix.MS_NODEV
)

// MakePrivate stops mount propagation between the host and this namespace in
// both directions.
func MakePrivate() error {
	return mount("make-private", "", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
}

// Assemble mounts the root described by p at p.Root. Call it after MakePrivate.
//
// Every mount target within the root is checked first: a directory reached
// without a symlink and without leaving the root. A root whose /dev, /proc,
// /tmp or /workspace is a link (a hostile template, CVE-2025-31133's kind) is
// refused, naming the path, instead of followed onto a path of the host. The masks over /proc are binds of the
// host's /dev/null, never of a node the root could have planted.
func Assemble(p Plan) error {
	if err := mountOverlay(p.RootLayer, p.Root); err != nil {
		return err
	}
	root, err := unix.Open(p.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &Error{Op: "open", Target: p.Root, Err: err}
	}
	defer unix.Close(root)
	at := func(target string, f func(string) error) error { return within(root, p.Root, target, f) }
	for _, o := range p.Overlays {
		if err := at(o.Target, func(t string) error { return mountOverlay(o, t) }); err != nil {
			return err
		}
	}
	for _, b := range p.Binds {
		flags := uintptr(nosuidNodev)
		if b.ReadOnly {
			flags |= unix.MS_RDONLY
		}
		if err := at(b.Target, func(t string) error { return bind(b.Source, t, flags) }); err != nil {
			return err
		}
	}
	if err := at("/tmp", func(t string) error { return mountTmpfs(t, nosuidNodev, 0o1777, p.TmpBytes) }); err != nil {
		return err
	}
	if err := at("/dev", func(t string) error { return mountDev(t, p.ShmBytes) }); err != nil {
		return err
	}
	return at("/proc", func(t string) error { return mountProc(t, "/dev/null") })
}

// within checks target, a path within the root open at root (rootPath on
// the host): it must be a directory reached with no symlink on the way and no
// way out of the root. Then it calls f with the path on the host. (By name,
// not through the checked file's /proc/self/fd link: a walk from that link
// would not enter the mounts f puts on it. Nothing can swap the path meanwhile:
// no process of the sandbox runs yet.) Errors name the path.
func within(root int, rootPath, target string, f func(string) error) error {
	rel := strings.TrimPrefix(filepath.Clean("/"+target), "/")
	named := filepath.Join(rootPath, rel)
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOTDIR) {
			err = fmt.Errorf("refusing mount target /%s: it is, or passes through, a symlink or a non-directory: %w", rel, err)
		}
		return &Error{Op: "open", Target: named, Err: err}
	}
	unix.Close(fd)
	return f(named)
}

func mountOverlay(o Overlay, target string) error {
	for _, p := range append([]string{o.Upper, o.Work}, o.Lower...) {
		if strings.ContainsAny(p, ",:\\") {
			return &Error{Op: "mount", Source: "overlay", Target: target, Fstype: "overlay",
				Err: fmt.Errorf("layer path %q holds a character overlayfs cannot take", p)}
		}
	}
	// userxattr: mounted in the sandbox's user namespace, overlayfs may not
	// set trusted.* xattrs on the upper layer, and without its user.overlay.*
	// ones it cannot mark a directory opaque (rm -rf of a lower directory
	// fails with EIO).
	data := "lowerdir=" + strings.Join(o.Lower, ":") + ",upperdir=" + o.Upper + ",workdir=" + o.Work + ",userxattr"
	// volatile (Linux 5.10+): no sync of the upper layer at unmount. A sandbox's
	// layers never outlive its processes, so a sync at teardown is pure cost.
	// uuid=null (6.6+; uuid=off from 5.11 to 6.5 meant the same): no uuid
	// xattr written on the fresh upper layer at each mount; nothing here uses
	// one (no index, no NFS export). From 6.6, uuid=off with layers on two
	// filesystems falls back to null and logs a kernel warning per mount: it
	// is tried second. Older kernels refuse what they do not know: dropped
	// one at a time.
	var err error
	for _, extra := range []string{",volatile,uuid=null", ",volatile,uuid=off", ",volatile", ""} {
		err = mount("mount", "overlay", target, "overlay", nosuidNodev, data+extra)
		if !errors.Is(err, unix.EINVAL) {
			break
		}
	}
	return err
}

func mountTmpfs(target string, flags uintptr, mode uint32, size int64) error {
	data := "mode=" + strconv.FormatUint(uint64(mode), 8)
	if size > 0 {
		data += ",size=" + strconv.FormatInt(size, 10)
	}
	return mount("mount", "tmpfs", target, "tmpfs", flags, data)
}

// mountDev builds a minimal /dev: binds of the host's harmless devices on a
// nodev tmpfs (a device node made inside does not work), a new devpts instance,
// /dev/shm and the usual links.
func mountDev(dev string, shmBytes int64) error {
	if err := mountTmpfs(dev, nosuidNodev|unix.MS_NOEXEC, 0o755, 1<<20); err != nil {
		return err
	}
	for _, name := range devices {
		if _, err := os.Stat("/dev/" + name); name == "tty" && err != nil {
			continue // a host without a tty device: nothing to offer
		}
		target := filepath.Join(dev, name)
		if err := os.WriteFile(target, nil, 0o666); err != nil {
			return &Error{Op: "create", Target: target, Err: err}
		}
		if err := bind("/dev/"+name, target, 0); err != nil {
			return err
		}
	}
	// nosuid and noexec on the device binds in one call for all of them (the
	// tmpfs under them has both already), instead of a remount each.
	if err := unix.MountSetattr(unix.AT_FDCWD, dev, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC}); err != nil {
		return &Error{Op: "mount_setattr", Target: dev, Flags: unix.MS_NOSUID | unix.MS_NOEXEC, Err: err}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return &Error{Op: "mkdir", Target: filepath.Join(dev, d), Err: err}
		}
	}
	if err := mount("mount", "devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC,
		"newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return err
	}
	if err := mountTmpfs(filepath.Join(dev, "shm"), nosuidNodev|unix.MS_NOEXEC, 0o1777, shmBytes); err != nil {
		return err
	}
	for _, l := range [][2]string{
		{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
	} {
		if err := os.Symlink(l[0], filepath.Join(dev, l[1])); err != nil {
			return &Error{Op: "symlink", Source: l[0], Target: filepath.Join(dev, l[1]), Err: err}
		}
	}
	return nil
}

// mountProc mounts a fresh /proc for the caller's pid namespace and masks the
// paths that reach the host kernel: read-only binds over the tunables, and devNull
// over files that show kernel memory, keys or timers.
func mountProc(proc, devNull string) error {
	if err := mount("mount", "proc", proc, "proc", nosuidNodev|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	for _, name := range readOnlyProc {
		p := filepath.Join(proc, name)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := bind(p, p, unix.MS_RDONLY|nosuidNodev|unix.MS_NOEXEC); err != nil {
			return err
		}
	}
	for _, name := range nullProc {
		p := filepath.Join(proc, name)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := bind(devNull, p, 0); err != nil {
			return err
		}
	}
	for _, name := range emptyProc {
		p := filepath.Join(proc, name)
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue
		}
		if err := mount("mount", "tmpfs", p, "tmpfs", unix.MS_RDONLY|nosuidNodev|unix.MS_NOEXEC, "size=0,mode=0555"); err != nil {
			return err
		}
	}
	return nil
}

// PivotRoot makes root the root of this mount namespace, detaches the old root
// so no host path stays reachable, and changes to workdir (within the new root).
func PivotRoot(root, workdir string) error {
	if err := unix.Chdir(root); err != nil {
		return &Error{Op: "chdir", Target: root, Err: err}
	}
	// pivot_root(".", ".") stacks the old root on the new one; unmounting "."
	// then detaches it without needing a directory to put it in.
	if err := unix.PivotRoot(".", "."); err != nil {
		return &Error{Op: "pivot_root", Target: root, Err: err}
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return &Error{Op: "umount", Target: "old root", Err: err}
	}
	if err := unix.Chdir(workdir); err != nil {
		return &Error{Op: "chdir", Target: workdir, Err: err}
	}
	return nil
}
