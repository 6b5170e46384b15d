package files

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"sbx.dev/sbx/internal/testutil"
)

// A mount point is refused before anything under it is removed: removing its
// contents and then failing on the mount (EBUSY) would lose them for an error.
func TestRemoveMountPoint(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	mnt := filepath.Join(dir, "m")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(mnt, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := New("/", "/")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = f.Remove(mnt)
	var fe *Error
	if !errors.As(err, &fe) || fe.Kind != Invalid || !strings.Contains(fe.Msg, "mount point") {
		t.Fatalf("Remove(mount point) = %v, want Invalid naming the mount point", err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "keep")); err != nil {
		t.Errorf("the refused removal removed the contents: %v", err)
	}
	// Control: what is in it goes.
	if err := f.Remove(filepath.Join(mnt, "keep")); err != nil {
		t.Errorf("Remove(a file in the mount) = %v", err)
	}
}
