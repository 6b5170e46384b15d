// Package quota bounds the disk each sandbox writes with btrfs quota groups,
// on one filesystem per daemon data dir.
//
// The filesystem is a sparse image in the data dir, made once with
// mkfs.btrfs, attached to a loop device that detaches itself once unmounted
// (LO_FLAGS_AUTOCLEAR), mounted nosuid,nodev,discard=async, with quotas
// enabled (simple quotas where the kernel has them: Pool.enable), and
// trimmed after sandboxes are deleted (DefaultTrimAfter). Each
// sandbox's directory (its overlays' upper and work directories and its
// workspace) is a subvolume of its own whose quota group is limited to the
// sandbox's disk_mb: data and metadata both count, so a million empty files
// hit it as surely as one large file. Writing past it fails with EDQUOT inside
// the sandbox; deleting files gives the space back. A released directory that
// wrote little is emptied and kept for the next sandbox (spare.go), which
// spares btrfs a subvolume's creation and deletion.
//
// Why this and not another: a size-limited tmpfs counts against memory; an
// image per sandbox needs a mkfs and a loop device per create; ext4 and XFS
// project quotas need the kernel's CONFIG_QUOTA, which hosts (this one among
// them) may lack, while btrfs quota groups are part of btrfs. Creating a
// subvolume and limiting it are two ioctls per sandbox.
package quota

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// btrfs ioctls (include/uapi/linux/btrfs.h).
const (
	iocSubvolCreate = 0x5000940e // _IOW(0x94, 14, struct btrfs_ioctl_vol_args)
	iocSnapDestroy  = 0x5000940f // _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
	iocQuotaCtl     = 0xc0109428 // _IOWR(0x94, 40, struct btrfs_ioctl_quota_ctl_args)
	iocQgroupLimit  = 0x8030942b // _IOR(0x94, 43, struct btrfs_ioctl_qgroup_limit_args)
	iocSync         = 0x00009408 // _IO(0x94, 8): commit, then wake the cleaner
	iocSubvolSync   = 0x40109441 // _IOW(0x94, 65, struct btrfs_ioctl_subvol_wait), Linux 6.9
	iocFITRIM       = 0xc0185879 // _IOWR('X', 121, struct fstrim_range)

	subvolSyncCount = 2 // BTRFS_SUBVOL_SYNC_COUNT: deleted subvolumes not yet cleaned

	quotaCtlEnable       = 1          // BTRFS_QUOTA_CTL_ENABLE: full quota groups
	quotaCtlEnableSimple = 4          // BTRFS_QUOTA_CTL_ENABLE_SIMPLE_QUOTA, Linux 6.7
	limitMaxRfer         = 1          // BTRFS_QGROUP_LIMIT_MAX_RFER
	limitClear           = ^uint64(0) // CLEAR_VALUE: the flagged limit is lifted
)

type volArgs struct {
	FD   int64
	Name [4088]byte
}

type quotaCtlArgs struct {
	Cmd    uint64
	Status uint64
}

type qgroupLimitArgs struct {
	QgroupID uint64
	Flags    uint64
	MaxRfer  uint64
	MaxExcl  uint64
	RsvRfer  uint64
	RsvExcl  uint64
}

// DefaultTrimAfter is how long after a sandbox directory is removed the pool
// starts giving the space it freed back to the host (more removals in that
// time join the same trim).
//
// btrfs drops a deleted subvolume's trees in its cleaner thread, after a
// transaction commit, and its asynchronous discard misses much of what the
// cleaner frees: 1000 create/write/delete cycles left the image 100 MB larger
// with 176 KiB of metadata in use. So the trimmer commits, waits until the
// cleaner has no deleted subvolume left, relocates the metadata block groups
// the drops left nearly empty (a filtered balance: FITRIM alone leaves their
// stale 16 KiB nodes in the image), commits again and trims: FITRIM makes the
// loop device punch holes in the sparse image. That took the image above back
// below its size after mkfs, in about 20 ms.
const DefaultTrimAfter = 5 * time.Second

// cleanerPoll is how often the trimmer asks whether the cleaner is done.
const cleanerPoll = 250 * time.Millisecond

type subvolWait struct {
	ID    uint64
	Mode  uint32
	Count uint32
}

// Pool is the quota filesystem of one data dir.
type Pool struct {
	img, mnt string
	mode     string // ModeSimple or ModeQgroup
	// OnTrim, when set before the first Released, hears each trim's outcome:
	// the bytes given back to the host, or why not.
	OnTrim func(trimmed uint64, err error)
	// TrimAfter is the wait between a release and its trim (Open sets
	// DefaultTrimAfter); set it before the first Released.
	TrimAfter time.Duration

	mu        sync.Mutex
	spares    []string // guarded by mu: emptied subvolumes kept (spare.go)
	maxSpares int      // guarded by mu
	spareSeq  uint64   // guarded by mu: the next spare's number
	pending   bool     // guarded by mu: a release since the trimmer's sleep began
	trimming  bool     // guarded by mu: the trimmer runs
	stopped   bool     // guarded by mu
	stop      chan struct{}
	trimmer   sync.WaitGroup
}

type fstrimRange struct {
	Start, Len, MinLen uint64
}

// Tools reports whether this host can make a pool, and why not.
func Tools() error {
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		return errors.New("mkfs.btrfs is not installed (Debian package btrfs-progs)")
	}
	// btrfs may be a module not loaded yet: mounting loads it, and says so
	// when the kernel has none.
	return nil
}

// Open returns the pool of dir: the filesystem in dir/disk.img, mounted at
// dir/disk. A mount already there (a restarted daemon whose sandboxes live
// on) is used as it is; an image already there is mounted, never made again;
// a new image is sizeBytes large (sparse: it takes host space only as
// sandboxes write).
func Open(dir string, sizeBytes int64) (*Pool, error) {
	p := &Pool{img: filepath.Join(dir, "disk.img"), mnt: filepath.Join(dir, "disk"), stop: make(chan struct{}), TrimAfter: DefaultTrimAfter}
	if err := os.MkdirAll(p.mnt, 0o711); err != nil {
		return nil, fmt.Errorf("disk quota: %w", err)
	}
	mounted, err := isMountPoint(p.mnt)
	if err != nil {
		return nil, err
	}
	if !mounted {
		if err := Tools(); err != nil {
			return nil, fmt.Errorf("disk quota: %w", err)
		}
		if _, err := os.Stat(p.img); errors.Is(err, fs.ErrNotExist) {
			if err := format(p.img, sizeBytes); err != nil {
				return nil, err
			}
		} else if err != nil {
			return nil, fmt.Errorf("disk quota: %w", err)
		}
		if err := mountImage(p.img, p.mnt); err != nil {
			return nil, err
		}
	}
	if err := p.enable(); err != nil {
		return nil, err
	}
	// Who may enter: the sandboxes' roots, each its own directory only.
	if err := os.Chmod(p.mnt, 0o711); err != nil {
		return nil, fmt.Errorf("disk quota: %w", err)
	}
	return p, nil
}

// Dir is where sandbox directories go: the mounted filesystem.
func (p *Pool) Dir() string { return p.mnt }

// format makes a sparse image of size bytes holding a btrfs filesystem.
func format(img string, size int64) error {
	tmp := img + ".new"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("disk quota: %w", err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("disk quota: sizing %s: %w", tmp, err)
	}
	// Single copies: the image is one file on one disk already.
	out, err := exec.Command("mkfs.btrfs", "-q", "-f", "-m", "single", "-d", "single", "-L", "sbx-quota", tmp).CombinedOutput()
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("disk quota: formatting %s: mkfs.btrfs: %v: %s", img, err, strings.TrimSpace(string(out)))
	}
	if err := os.Rename(tmp, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("disk quota: %w", err)
	}
	return nil
}

// mountImage attaches img to a free loop device that detaches itself once
// unmounted, and mounts it at mnt.
func mountImage(img, mnt string) error {
	file, err := os.OpenFile(img, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("disk quota: %w", err)
	}
	defer file.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("disk quota: %w", err)
	}
	defer ctl.Close()
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("disk quota: no free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		loop, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("disk quota: %w", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(file.Fd()), Size: 4096}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], img)
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) && attempt < 10 {
			loop.Close() // taken meanwhile by another
			continue
		}
		if err != nil {
			loop.Close()
			return fmt.Errorf("disk quota: attaching %s to %s: %w", img, dev, err)
		}
		// discard=async (the default where the device can discard, named
		// so it holds everywhere): freed extents go back to the host as
		// sandboxes delete files; the trimmer gives back what it misses.
		err = unix.Mount(dev, mnt, "btrfs", unix.MS_NOSUID|unix.MS_NODEV, "discard=async")
		loop.Close() // the mount holds it now; without one it detaches
		if err != nil {
			return fmt.Errorf("disk quota: mounting %s on %s (btrfs; is the kernel's btrfs there? modprobe btrfs): %w", dev, mnt, err)
		}
		return nil
	}
}

// enable turns quota groups on, unless they are on already: a filesystem
// keeps the mode it was first given. A new one gets simple quotas (squota)
// where the kernel has them, else full quota groups. Both bound a subvolume
// the same way here (no extent is shared between subvolumes: no snapshots,
// and a sandbox reaches only its own), but full quota groups find every
// changed extent's owners by walking its back references at each commit,
// where simple quotas owe each extent to the subvolume that made it: in
// create, exec and delete cycles whose exec wrote 100 small files and 5 MB,
// the CPU per cycle (the deleted subvolumes' drops included) was 30 and 33 ms
// with full quota groups, 27 and 31 ms with simple ones. Dropping a deleted
// subvolume costs btrfs's cleaner the same in both modes (a commit each).
func (p *Pool) enable() error {
	fd, err := unix.Open(p.mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("disk quota: %w", err)
	}
	defer unix.Close(fd)
	if mode, err := quotaMode(fd); err == nil && mode != "" {
		p.mode = mode
		return nil
	}
	args := quotaCtlArgs{Cmd: quotaCtlEnableSimple}
	err = ioctl(fd, iocQuotaCtl, unsafe.Pointer(&args))
	if err != nil { // a kernel before 6.7
		args = quotaCtlArgs{Cmd: quotaCtlEnable}
		err = ioctl(fd, iocQuotaCtl, unsafe.Pointer(&args))
	}
	if err != nil {
		return fmt.Errorf("disk quota: enabling btrfs quotas on %s: %w", p.mnt, err)
	}
	p.mode = ModeQgroup
	if args.Cmd == quotaCtlEnableSimple {
		p.mode = ModeSimple
	}
	return nil
}

// The quota modes Mode reports.
const (
	ModeSimple = "squota" // simple quotas
	ModeQgroup = "qgroup" // full quota groups
)

// Mode is the filesystem's quota mode: ModeSimple or ModeQgroup.
func (p *Pool) Mode() string { return p.mode }

// quotaMode reads the quota mode of the btrfs filesystem of fd from sysfs:
// "" when quotas are off, else "squota" or "qgroup" (a kernel without
// simple quotas has no mode file: full quota groups).
func quotaMode(fd int) (string, error) {
	dir, err := sysfsDir(fd)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(dir, "qgroups", "enabled"))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && strings.TrimSpace(string(b)) != "1") {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	b, err = os.ReadFile(filepath.Join(dir, "qgroups", "mode"))
	if errors.Is(err, fs.ErrNotExist) {
		return ModeQgroup, nil
	}
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(string(b)) == ModeSimple {
		return ModeSimple, nil
	}
	return ModeQgroup, nil
}

// sysfsDir returns the sysfs directory of the btrfs filesystem of fd,
// /sys/fs/btrfs/<fsid>.
func sysfsDir(fd int) (string, error) {
	var info fsInfoArgs
	if err := ioctl(fd, iocFSInfo, unsafe.Pointer(&info)); err != nil {
		return "", fmt.Errorf("disk quota: filesystem id: %w", err)
	}
	u := info.FSID
	return fmt.Sprintf("/sys/fs/btrfs/%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

// validName reports whether name can name an entry of the pool's
// directory: one component, not . or .., at most 255 bytes.
func validName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "/\x00") && len(name) <= 255 && name != "." && name != ".."
}

// Create makes name, a directory of the pool, as a subvolume whose quota
// group is limited to maxBytes (0: no limit), and returns its path: a spare
// renamed (Release keeps them), owned by root, mode 0700 and empty, when
// there is one, else a new subvolume.
func (p *Pool) Create(name string, maxBytes uint64) (string, error) {
	if !validName(name) || IsSpare(name) {
		return "", fmt.Errorf("disk quota: bad subvolume name %q", name)
	}
	if path, err := p.takeSpare(name); err != nil {
		return "", err
	} else if path != "" {
		if err := p.Limit(path, maxBytes); err != nil {
			p.Remove(name)
			return "", err
		}
		return path, nil
	}
	parent, err := unix.Open(p.mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("disk quota: %w", err)
	}
	defer unix.Close(parent)
	var args volArgs
	copy(args.Name[:], name)
	if err := ioctl(parent, iocSubvolCreate, unsafe.Pointer(&args)); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("disk quota: %s: %w", filepath.Join(p.mnt, name), fs.ErrExist)
		}
		return "", fmt.Errorf("disk quota: creating subvolume %s: %w", filepath.Join(p.mnt, name), err)
	}
	path := filepath.Join(p.mnt, name)
	if err := p.Limit(path, maxBytes); err != nil {
		os.Remove(path)
		return "", err
	}
	return path, nil
}

// Remove deletes name, a subvolume Create made, with everything in it: one
// ioctl, after which btrfs's cleaner drops its trees in the background,
// instead of an unlink per file (which cost a cycle of create, exec and
// delete ~1 ms of the daemon's CPU). A subvolume holding subvolumes of its
// own is not deleted in one call, and one filled to its limit cannot pay for
// the metadata of deleting one: its limit is lifted, the subvolumes within
// deleted (removeNested), and then it. A name that is no subvolume (a plain
// directory) or that the kernel will not delete is removed file by file.
// Removing what does not exist is not an error.
func (p *Pool) Remove(name string) error {
	if !validName(name) {
		return fmt.Errorf("disk quota: bad subvolume name %q", name)
	}
	path := filepath.Join(p.mnt, name)
	parent, err := unix.Open(p.mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("disk quota: %w", err)
	}
	defer unix.Close(parent)
	err = destroy(parent, name)
	switch {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ENOTEMPTY):
		if err := p.removeNested(path); err != nil {
			return err
		}
		if err := destroy(parent, name); err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
	}
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("disk quota: removing %s: %w", path, err)
	}
	return nil
}

// destroy deletes the subvolume name in the directory dir.
func destroy(dir int, name string) error {
	var args volArgs
	copy(args.Name[:], name)
	return ioctl(dir, iocSnapDestroy, unsafe.Pointer(&args))
}

// subvolumeRootIno is the inode number of every subvolume's root directory
// (BTRFS_FIRST_FREE_OBJECTID).
const subvolumeRootIno = 256

// removeNested lifts the limit of the subvolume at path and deletes every
// subvolume beneath it, the deepest first. Sandboxes cannot make one (the
// seccomp floor denies btrfs's subvolume ioctls); this is for a directory
// that holds one anyway, so that it never outlives its sandbox.
func (p *Pool) removeNested(path string) error {
	if err := p.Limit(path, 0); err != nil {
		return err
	}
	var nested []string
	err := filepath.WalkDir(path, func(sub string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || sub == path {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(sub, &st); err != nil {
			return err
		}
		if st.Ino == subvolumeRootIno {
			nested = append(nested, sub)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("disk quota: finding the subvolumes in %s: %w", path, err)
	}
	for _, sub := range slices.Backward(nested) { // a walk lists parents first
		dir, err := unix.Open(filepath.Dir(sub), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("disk quota: %w", &fs.PathError{Op: "open", Path: filepath.Dir(sub), Err: err})
		}
		err = destroy(dir, filepath.Base(sub))
		unix.Close(dir)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("disk quota: deleting the subvolume %s: %w", sub, err)
		}
	}
	return nil
}

// Limit sets the quota of the subvolume at path to maxBytes (0: none).
func (p *Pool) Limit(path string, maxBytes uint64) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("disk quota: %w", &fs.PathError{Op: "open", Path: path, Err: err})
	}
	defer unix.Close(fd)
	args := qgroupLimitArgs{Flags: limitMaxRfer, MaxRfer: maxBytes}
	if maxBytes == 0 {
		args.MaxRfer = limitClear // without the flag the limit would stay as it is
	}
	if err := ioctl(fd, iocQgroupLimit, unsafe.Pointer(&args)); err != nil {
		return fmt.Errorf("disk quota: limiting %s to %d bytes: %w", path, maxBytes, err)
	}
	return nil
}

// Empty reports whether the pool holds nothing: no sandbox directory and
// no spare (DropSpares).
func (p *Pool) Empty() bool {
	ents, err := os.ReadDir(p.mnt)
	return err == nil && len(ents) == 0
}

// Released tells the pool a sandbox directory was removed: TrimAfter later,
// and again while removals go on, the pool's free space goes back to the host.
func (p *Pool) Released() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = true
	if p.trimming || p.stopped {
		return
	}
	p.trimming = true
	p.trimmer.Go(p.trimLoop)
}

// trimLoop trims TrimAfter after a release, and again after each sleep that
// saw another, so the last removal is always followed by a full wait and a
// trim.
func (p *Pool) trimLoop() {
	for {
		p.mu.Lock()
		p.pending = false
		p.mu.Unlock()
		t := time.NewTimer(p.TrimAfter)
		select {
		case <-p.stop:
			t.Stop()
			return
		case <-t.C:
		}
		if !p.awaitCleaner() {
			return
		}
		var n uint64
		err := p.compact()
		if err == nil {
			n, err = p.Trim()
		}
		if p.OnTrim != nil {
			p.OnTrim(n, err)
		}
		p.mu.Lock()
		if !p.pending {
			p.trimming = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// awaitCleaner commits and wakes btrfs's cleaner (BTRFS_IOC_SYNC; a plain
// syncfs leaves it asleep until the next periodic commit), waits until it has
// dropped every deleted subvolume (where the kernel can say: Linux 6.9 on),
// and commits again. It returns false when the trimmer is stopped meanwhile.
func (p *Pool) awaitCleaner() bool {
	fd, err := unix.Open(p.mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return true // Trim reports it
	}
	defer unix.Close(fd)
	ioctl(fd, iocSync, nil)
	for {
		args := subvolWait{Mode: subvolSyncCount}
		if err := ioctl(fd, iocSubvolSync, unsafe.Pointer(&args)); err != nil || args.Count == 0 {
			break // done, or a kernel that cannot tell: trim what is free now
		}
		t := time.NewTimer(cleanerPoll)
		select {
		case <-p.stop:
			t.Stop()
			return false
		case <-t.C:
		}
	}
	ioctl(fd, iocSync, nil)
	return true
}

// compact relocates the metadata block groups at most 10% full, so
// the space between their few live nodes becomes free space FITRIM can
// give back, and commits.
func (p *Pool) compact() error {
	out, err := exec.Command("btrfs", "-q", "balance", "start", "-musage=10", p.mnt).CombinedOutput()
	if err != nil {
		return fmt.Errorf("disk quota: compacting the metadata of %s: btrfs balance: %v: %s", p.mnt, err, strings.TrimSpace(string(out)))
	}
	if fd, err := unix.Open(p.mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		ioctl(fd, iocSync, nil)
		unix.Close(fd)
	}
	return nil
}

// Trim gives the pool's free space back to the host (FITRIM: the loop device
// punches holes in the sparse image) and returns how many bytes it trimmed.
func (p *Pool) Trim() (uint64, error) {
	fd, err := unix.Open(p.mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("disk quota: %w", err)
	}
	defer unix.Close(fd)
	r := fstrimRange{Len: ^uint64(0)}
	if err := ioctl(fd, iocFITRIM, unsafe.Pointer(&r)); err != nil {
		return 0, fmt.Errorf("disk quota: trimming %s: %w", p.mnt, err)
	}
	return r.Len, nil
}

// StopTrimming ends the trimmer; a pending trim is dropped (the next
// daemon's first release brings it back).
func (p *Pool) StopTrimming() {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.stop)
	}
	p.mu.Unlock()
	p.trimmer.Wait()
}

// Close stops the trimmer and unmounts the pool, which detaches its loop
// device. Sandboxes must be gone first: a busy mount stays, and Close says so.
func (p *Pool) Close() error {
	p.StopTrimming()
	if err := unix.Unmount(p.mnt, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("disk quota: unmounting %s: %w", p.mnt, err)
	}
	return nil
}

// Unmount detaches the pool of data dir dir, if mounted, without opening
// it: for sweeping the pool of a data dir whose daemon is gone.
func Unmount(dir string) error {
	mnt := filepath.Join(dir, "disk")
	if ok, err := isMountPoint(mnt); err != nil || !ok {
		return err
	}
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("disk quota: unmounting %s: %w", mnt, err)
	}
	return nil
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	runtime.KeepAlive(arg)
	if e != 0 {
		return e
	}
	return nil
}

// isMountPoint reports whether path is a mount point in this mount namespace.
func isMountPoint(path string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("disk quota: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && unescape(fields[4]) == path {
			return true, nil
		}
	}
	return false, sc.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// More btrfs ioctls, for Used.
const (
	iocInoLookup = 0xd0009412 // _IOWR(0x94, 18, struct btrfs_ioctl_ino_lookup_args)
	iocFSInfo    = 0x8400941f // _IOR(0x94, 31, struct btrfs_ioctl_fs_info_args)
)

// inoLookupArgs is struct btrfs_ioctl_ino_lookup_args.
type inoLookupArgs struct {
	TreeID   uint64
	ObjectID uint64
	Name     [4080]byte
}

// fsInfoArgs is struct btrfs_ioctl_fs_info_args.
type fsInfoArgs struct {
	MaxID      uint64
	NumDevices uint64
	FSID       [16]byte
	_          [1024 - 32]byte
}

// Used returns the bytes the subvolume at path holds, as its quota group
// counts them (what Limit bounds): the kernel's sysfs view of the group,
// /sys/fs/btrfs/<fsid>/qgroups/0_<subvolume id>/referenced.
func (p *Pool) Used(path string) (int64, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, fmt.Errorf("disk quota: %w", &fs.PathError{Op: "open", Path: path, Err: err})
	}
	defer unix.Close(fd)
	look := inoLookupArgs{ObjectID: 256} // a subvolume's root directory
	if err := ioctl(fd, iocInoLookup, unsafe.Pointer(&look)); err != nil {
		return 0, fmt.Errorf("disk quota: subvolume id of %s: %w", path, err)
	}
	dir, err := sysfsDir(fd)
	if err != nil {
		return 0, fmt.Errorf("%w (%s)", err, path)
	}
	b, err := os.ReadFile(fmt.Sprintf("%s/qgroups/0_%d/referenced", dir, look.TreeID))
	if err != nil {
		return 0, fmt.Errorf("disk quota: usage of %s: %w", path, err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("disk quota: usage of %s: %q: %w", path, b, err)
	}
	return n, nil
}
