package quota

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/testutil"
)

// treeID is the id of the subvolume at path: the same id is the same
// subvolume, kept and taken again.
func treeID(t *testing.T, path string) uint64 {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	look := inoLookupArgs{ObjectID: subvolumeRootIno}
	if err := ioctl(fd, iocInoLookup, unsafe.Pointer(&look)); err != nil {
		t.Fatal(err)
	}
	return look.TreeID
}

// entries lists the pool's directory.
func entries(t *testing.T, p *Pool) []string {
	t.Helper()
	return testutil.DirNames(t, p.Dir())
}

// sandboxTree writes what a sandbox's directory holds after a short life,
// owned by uid, with a symlink out of the pool and an xattr on a directory.
func sandboxTree(t *testing.T, dir string, uid int, outside string) {
	t.Helper()
	for _, d := range []string{"root", "upper/root/etc", "upper/usr", "work/root/work/incompat/volatile", "workspace/.cache", "lower/0"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"agent.log", "upper/root/etc/hosts", "work/root/work/incompat/volatile/dirty", "workspace/notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("tenant data\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "workspace/out")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(dir, "workspace"), "user.tenant", []byte("secret"), 0); err != nil {
		t.Fatal(err)
	}
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, uid, uid) })
}

func TestSpares(t *testing.T) {
	p, _ := open(t)
	p.KeepSpares(2)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	a, err := p.Create("a", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	id := treeID(t, a)
	sandboxTree(t, a, 100000, outside)
	if err := p.Release("a"); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, p); !slices.Equal(got, []string{"spare-0"}) {
		t.Fatalf("after releasing a: %v, want one spare", got)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Fatalf("emptying followed the symlink out of the pool: %v", err)
	}

	b, err := p.Create("b", 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if treeID(t, b) != id {
		t.Errorf("b is subvolume %d, not the spare %d: not taken", treeID(t, b), id)
	}
	if got := entries(t, p); !slices.Equal(got, []string{"b"}) {
		t.Errorf("after creating b: %v", got)
	}
	var st unix.Stat_t
	if err := unix.Stat(b, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 0 || st.Gid != 0 || st.Mode&0o7777 != 0o700 {
		t.Errorf("taken spare: uid %d gid %d mode %o, want root's, 0700", st.Uid, st.Gid, st.Mode&0o7777)
	}
	if left, err := os.ReadDir(b); err != nil || len(left) != 0 {
		t.Errorf("taken spare holds %v (%v), want nothing", left, err)
	}
	// Its limit is b's, not a's: 8 MiB.
	if err := fill(filepath.Join(b, "f"), 12); !over(err) {
		t.Errorf("12 MiB in a spare limited to 8 MiB: %v, want EDQUOT", err)
	}
	unix.Sync() // what b wrote is counted at commit

	// A subvolume still counting its data (committed) is deleted, not kept.
	if err := p.Release("b"); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, p); len(got) != 0 {
		t.Errorf("after releasing b, which wrote 8 MiB: %v, want nothing kept", got)
	}

	// Nor is one with more entries than an emptying unlinks.
	c, err := p.Create("c", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i := range spareMaxEntries + 10 {
		if err := os.WriteFile(filepath.Join(c, strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Release("c"); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, p); len(got) != 0 {
		t.Errorf("after releasing c, with %d files: %v, want nothing kept", spareMaxEntries+10, got)
	}

	// Kept up to the cap; the rest deleted.
	for _, n := range []string{"d", "e", "f"} {
		dir, err := p.Create(n, 0)
		if err != nil {
			t.Fatal(err)
		}
		sandboxTree(t, dir, 200000, outside)
	}
	for _, n := range []string{"d", "e", "f"} {
		if err := p.Release(n); err != nil {
			t.Fatal(err)
		}
	}
	if got := entries(t, p); !slices.Equal(got, []string{"spare-1", "spare-2"}) {
		t.Errorf("after releasing three with room for two: %v", got)
	}

	// A second pool of the dir (a restarted daemon) removes them.
	if err := p.RemoveSpares(); err != nil {
		t.Fatal(err)
	}
	if !p.Empty() {
		t.Errorf("RemoveSpares left %v", entries(t, p))
	}
	p.spares = nil

	// DropSpares: none kept, none kept from now on.
	g, _ := p.Create("g", 0)
	sandboxTree(t, g, 300000, outside)
	p.Release("g")
	if got := entries(t, p); len(got) != 1 {
		t.Fatalf("after releasing g: %v, want a spare (the control)", got)
	}
	p.DropSpares()
	h, _ := p.Create("h", 0)
	sandboxTree(t, h, 300000, outside)
	p.Release("h")
	if !p.Empty() {
		t.Errorf("after DropSpares and a release: %v, want nothing", entries(t, p))
	}
	if _, err := p.Create("spare-9", 0); err == nil {
		t.Error("Create of a spare's name did not fail")
	}
}
