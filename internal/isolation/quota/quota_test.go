package quota

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// open makes a pool in a temporary dir and unmounts it at the end (the loop
// device detaches with the mount).
func open(t *testing.T) (*Pool, string) {
	t.Helper()
	if err := Tools(); err != nil || os.Geteuid() != 0 {
		if strings.Contains(os.Getenv("SBX_TEST_REQUIRE"), "quota") {
			t.Fatalf("quota required: %v, euid %d", err, os.Geteuid())
		}
		t.Skipf("needs root and btrfs: %v", err)
	}
	dir := t.TempDir()
	p, err := Open(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
		if ok, _ := isMountPoint(p.Dir()); ok {
			t.Errorf("%s still mounted", p.Dir())
		}
	})
	return p, dir
}

// fill writes mib MiB to path and returns the error (nil: all written).
func fill(path string, mib int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for range mib {
		if _, err := f.Write(buf); err != nil {
			return err
		}
	}
	return f.Sync()
}

func over(err error) bool { return errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.ENOSPC) }

func TestBytes(t *testing.T) {
	p, _ := open(t)
	a, err := p.Create("a", 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Create("b", 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := fill(filepath.Join(a, "x"), 4); err != nil {
		t.Fatalf("4 MiB under 8: %v", err)
	}
	if err := fill(filepath.Join(a, "sub"), 8); !over(err) {
		t.Fatalf("past the quota: %v, want EDQUOT", err)
	}
	if err := fill(filepath.Join(b, "x"), 4); err != nil {
		t.Errorf("control: the sibling cannot write: %v", err)
	}
	os.Remove(filepath.Join(a, "x"))
	os.Remove(filepath.Join(a, "sub"))
	unix.Sync()
	if err := fill(filepath.Join(a, "y"), 6); err != nil {
		t.Errorf("after deleting, the space came back: %v", err)
	}
	if _, err := p.Create("a", 1); !errors.Is(err, os.ErrExist) {
		t.Errorf("Create of an existing name = %v, want ErrExist", err)
	}
	// A subvolume goes as a directory does.
	if err := os.RemoveAll(a); err != nil {
		t.Errorf("removing a subvolume: %v", err)
	}
}

// Metadata counts: empty files, as many as it takes, hit the quota too.
func TestManyFiles(t *testing.T) {
	p, _ := open(t)
	a, err := p.Create("a", 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for n = 0; n < 200000; n++ {
		f, err := os.Create(filepath.Join(a, "f"+strconv.Itoa(n)))
		if err != nil {
			if !over(err) {
				t.Fatalf("file %d: %v, want EDQUOT", n, err)
			}
			break
		}
		f.Close()
		if n%1000 == 999 {
			unix.Sync() // quota groups are accounted at commit
		}
	}
	if n == 200000 {
		t.Fatalf("200000 empty files under a 2 MiB quota")
	}
	t.Logf("%d empty files fit 2 MiB", n)
}

// An overlay whose upper layer lies in a subvolume counts against it: how a
// sandbox's root uses the pool.
func TestOverlayUpper(t *testing.T) {
	p, _ := open(t)
	a, err := p.Create("a", 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"upper", "work", "merged"} {
		os.Mkdir(filepath.Join(a, d), 0o755)
	}
	merged := filepath.Join(a, "merged")
	if err := unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+t.TempDir()+",upperdir="+filepath.Join(a, "upper")+",workdir="+filepath.Join(a, "work")); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(merged, unix.MNT_DETACH)
	if err := fill(filepath.Join(merged, "big"), 16); !over(err) {
		t.Fatalf("16 MiB through an overlay over an 8 MiB quota: %v", err)
	}
}

// A restarted daemon finds its pool mounted; once unmounted it is mounted
// again from the image, whose files stay.
func TestReopen(t *testing.T) {
	p, dir := open(t)
	a, err := p.Create("a", 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(a, "keep"), []byte("kept"), 0o644)
	if _, err := Open(dir, 1<<30); err != nil {
		t.Fatalf("reopening a mounted pool: %v", err)
	}
	if err := fill(filepath.Join(a, "x"), 12); !over(err) {
		t.Errorf("the limit did not hold after reopening: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	p3, err := Open(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mounting an existing image: %s", time.Since(began))
	if b, err := os.ReadFile(filepath.Join(p3.Dir(), "a", "keep")); err != nil || string(b) != "kept" {
		t.Errorf("after remounting: %q, %v; want the file kept", b, err)
	}
}

// A new filesystem gets simple quotas where the kernel has them (6.7 on:
// the sysfs mode file), full quota groups before; one whose quotas are on
// already keeps its mode, and a reopened pool reports it.
func TestMode(t *testing.T) {
	p, dir := open(t)
	want := ModeQgroup
	if _, err := os.Stat("/sys/fs/btrfs/features/simple_quota"); err == nil {
		want = ModeSimple
	}
	if p.Mode() != want {
		t.Errorf("a new pool's mode = %q, want %q", p.Mode(), want)
	}
	if p2, err := Open(dir, 1<<30); err != nil || p2.Mode() != want {
		t.Errorf("reopened: mode %q, %v; want %q", p2.Mode(), err, want)
	}
	// A filesystem with full quota groups on before the pool opens it.
	other := t.TempDir()
	img := filepath.Join(other, "disk.img")
	if err := format(img, 1<<30); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(other, "disk")
	if err := os.Mkdir(mnt, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := mountImage(img, mnt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, 0) })
	fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	args := quotaCtlArgs{Cmd: quotaCtlEnable}
	err = ioctl(fd, iocQuotaCtl, unsafe.Pointer(&args))
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	q, err := Open(other, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if q.Mode() != ModeQgroup {
		t.Errorf("a filesystem with full quota groups on: mode %q after Open, want %q", q.Mode(), ModeQgroup)
	}
	a, err := q.Create("a", 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := fill(filepath.Join(a, "x"), 12); !over(err) {
		t.Errorf("full quota groups: 12 MiB into 8 MiB: %v", err)
	}
}

func BenchmarkCreate(b *testing.B) {
	if Tools() != nil {
		b.Skip()
	}
	p, err := Open(b.TempDir(), 1<<30)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for i := 0; b.Loop(); i++ {
		if _, err := p.Create("s"+strconv.Itoa(i), 1<<30); err != nil {
			b.Fatal(err)
		}
	}
}

// imageUse is the host space the pool's image takes.
func imageUse(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "disk.img"), &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// A removed directory's space goes back to the host: Released trims the
// pool after TrimAfter. (btrfs's own asynchronous discard would give some of
// it back too, minutes later: the control shows it has not yet.)
func TestTrim(t *testing.T) {
	p, dir := open(t)
	empty := imageUse(t, dir)
	a, err := p.Create("a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := fill(filepath.Join(a, "x"), 32); err != nil {
		t.Fatal(err)
	}
	full := imageUse(t, dir)
	if full-empty < 30<<20 {
		t.Fatalf("the image grew %d KiB for 32 MiB written", (full-empty)>>10)
	}
	trimmed := make(chan error, 4)
	p.TrimAfter = 50 * time.Millisecond
	p.OnTrim = func(n uint64, err error) { trimmed <- err }
	if err := os.RemoveAll(a); err != nil {
		t.Fatal(err)
	}
	// The commit that frees the extents; without it they stay pinned.
	if fd, err := unix.Open(p.Dir(), unix.O_RDONLY, 0); err == nil {
		unix.Syncfs(fd)
		unix.Close(fd)
	}
	if got := imageUse(t, dir); got-empty < 30<<20 {
		t.Fatalf("control: the image gave back its space before any trim (%d KiB over empty)", (got-empty)>>10)
	}
	p.Released()
	select {
	case err := <-trimmed:
		if err != nil {
			t.Fatalf("trim: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no trim 30 s after a release")
	}
	if got := imageUse(t, dir); got-empty > 4<<20 {
		t.Errorf("after the trim the image holds %d KiB over its empty size, want < 4 MiB", (got-empty)>>10)
	}
	p.StopTrimming()
	p.Released() // after the stop: no trimmer starts
	select {
	case <-trimmed:
		t.Error("a trim ran after StopTrimming")
	case <-time.After(200 * time.Millisecond):
	}
}

// Remove deletes a subvolume full of files in one call, and a plain
// directory file by file; what does not exist is no error.
func TestRemove(t *testing.T) {
	p, _ := open(t)
	a, err := p.Create("a", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		d := filepath.Join(a, "d"+strconv.Itoa(i))
		os.MkdirAll(filepath.Join(d, "x", "y"), 0o755)
		os.WriteFile(filepath.Join(d, "x", "y", "f"), []byte("data"), 0o644)
	}
	if err := p.Remove("a"); err != nil {
		t.Fatalf("Remove of a full subvolume = %v", err)
	}
	if _, err := os.Lstat(a); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Remove, %s: %v", a, err)
	}
	plain := filepath.Join(p.Dir(), "plain")
	os.MkdirAll(filepath.Join(plain, "sub"), 0o755)
	os.WriteFile(filepath.Join(plain, "sub", "f"), []byte("x"), 0o644)
	if err := p.Remove("plain"); err != nil {
		t.Fatalf("Remove of a plain directory = %v", err)
	}
	if _, err := os.Lstat(plain); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Remove, %s: %v", plain, err)
	}
	if err := p.Remove("never-made"); err != nil {
		t.Errorf("Remove of a missing name = %v", err)
	}
	for _, bad := range []string{"", "..", "a/b"} {
		if err := p.Remove(bad); err == nil {
			t.Errorf("Remove(%q) succeeded", bad)
		}
	}
	// The name can be made again at once.
	if _, err := p.Create("a", 1<<20); err != nil {
		t.Errorf("Create after Remove = %v", err)
	}
}

// A sandbox directory holding subvolumes of its own (which the seccomp floor
// keeps sandboxes from making), filled to its limit, still goes in one
// Remove, nested subvolumes and all.
func TestRemoveNested(t *testing.T) {
	p, _ := open(t)
	a, err := p.Create("a", 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	mkSubvol := func(dir, name string) string {
		t.Helper()
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		var args volArgs
		copy(args.Name[:], name)
		if err := ioctl(fd, iocSubvolCreate, unsafe.Pointer(&args)); err != nil {
			t.Fatalf("making subvolume %s in %s: %v", name, dir, err)
		}
		return filepath.Join(dir, name)
	}
	ws := filepath.Join(a, "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	n1 := mkSubvol(ws, "nested")
	n2 := mkSubvol(n1, "deeper")
	// The nested subvolumes are outside a's limit: what the floor's rules are for.
	if err := fill(filepath.Join(n2, "big"), 48); err != nil {
		t.Fatalf("writing 48 MiB in a nested subvolume of a 32 MiB one: %v", err)
	}
	if err := fill(filepath.Join(ws, "fill"), 64); !over(err) {
		t.Fatalf("filling the limited subvolume: %v, want EDQUOT or ENOSPC", err)
	}
	if err := p.Remove("a"); err != nil {
		t.Fatalf("Remove of a full subvolume holding two nested ones = %v", err)
	}
	if _, err := os.Lstat(a); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Remove, %s: %v", a, err)
	}
	if !p.Empty() {
		t.Errorf("the pool still holds something after Remove")
	}
}

func TestUsed(t *testing.T) {
	p, _ := open(t)
	a, err := p.Create("a", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Create("b", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := fill(filepath.Join(a, "x"), 5); err != nil {
		t.Fatal(err)
	}
	unix.Sync() // the quota group is counted at commit
	ua, err := p.Used(a)
	if err != nil {
		t.Fatal(err)
	}
	ub, err := p.Used(b)
	if err != nil {
		t.Fatal(err)
	}
	if ua < 5<<20 || ua > 6<<20 {
		t.Errorf("Used after 5 MiB = %d bytes", ua)
	}
	if ub >= 1<<20 {
		t.Errorf("control: the empty sibling uses %d bytes", ub)
	}
	if _, err := p.Used(filepath.Join(p.Dir(), "nope")); err == nil {
		t.Error("Used of a missing subvolume did not fail")
	}
}
