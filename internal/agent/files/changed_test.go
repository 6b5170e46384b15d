package files

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestChanged(t *testing.T) {
	f, root := newTestFS(t, map[string]string{"old.txt": "x", "sub/old.txt": "x", "sub/touched.txt": "x", ".hidden/old": "x", "empty/": ""})
	time.Sleep(50 * time.Millisecond) // the setup's timestamps fall before since, coarse clock or not
	since := time.Now().Add(-20 * time.Millisecond)
	for _, p := range []string{"new.txt", "sub/deeper/new.txt", ".hidden/new"} {
		os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), []byte("y"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if fl, err := os.OpenFile(filepath.Join(root, "sub/touched.txt"), os.O_APPEND|os.O_WRONLY, 0); err == nil {
		fl.WriteString("more")
		fl.Close()
	}
	paths, truncated, err := f.Changed("/", since, 0)
	if want := []string{"/.hidden/new", "/new.txt", "/sub/deeper/new.txt", "/sub/touched.txt"}; err != nil || truncated || !slices.Equal(paths, want) {
		t.Errorf("Changed = %q, %v, %v; want %q", paths, truncated, err, want)
	}
	paths, truncated, err = f.Changed("/sub", since, 1)
	if err != nil || !truncated || !slices.Equal(paths, []string{"/sub/deeper/new.txt"}) {
		t.Errorf("Changed(/sub, limit 1) = %q, %v, %v; want the first, truncated", paths, truncated, err)
	}
	if _, _, err := f.Changed("/new.txt", since, 0); KindOf(err) != Invalid || !strings.Contains(err.Error(), "'/new.txt' is not a directory") {
		t.Errorf("Changed(a file) = %v, want Invalid naming it", err)
	}
}

// Changed does not enter another mount below its root.
func TestChangedStaysOnItsMount(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting needs root")
	}
	f, root := newTestFS(t, map[string]string{"mnt/": ""})
	since := time.Now().Add(-time.Second)
	if err := syscall.Mount("tmpfs", filepath.Join(root, "mnt"), "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(filepath.Join(root, "mnt"), syscall.MNT_DETACH) })
	os.WriteFile(filepath.Join(root, "mnt/inside"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(root, "outside"), []byte("x"), 0o644)
	paths, _, err := f.Changed("/", since, 0)
	if err != nil || !slices.Equal(paths, []string{"/outside"}) {
		t.Errorf("Changed = %q, %v; want /outside only", paths, err)
	}
}
