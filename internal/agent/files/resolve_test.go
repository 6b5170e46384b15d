package files

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// With the root at "/", as in the jail, the agent's own magic links lead to
// what it holds open: the file API and exec's cwd must not follow them
// (SECURITY.md FS-09, FS-16), while ordinary symlinks still resolve.
func TestMagicLinksRefused(t *testing.T) {
	f, err := New("/", "/")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("held open"), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldDir, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer heldDir.Close()
	fdFile := "/proc/self/fd/" + strconv.Itoa(int(held.Fd()))
	fdDir := "/proc/self/fd/" + strconv.Itoa(int(heldDir.Fd()))

	// Control: an ordinary symlink to the same file resolves.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	if r, err := f.ReadFile(link, 0, 0); err != nil || string(r.Content) != "held open" {
		t.Fatalf("ReadFile(%s) = %q, %v; want the file through an ordinary symlink", link, r.Content, err)
	}

	if r, err := f.ReadFile(fdFile, 0, 0); err == nil {
		t.Errorf("ReadFile(%s) = %q: a magic link was followed", fdFile, r.Content)
	}
	if _, err := f.WriteFile(fdFile, []byte("x"), 0, true); err == nil {
		t.Errorf("WriteFile(%s) succeeded: a magic link was followed", fdFile)
	}
	if _, err := f.MakeDir(fdDir + "/made"); err == nil {
		t.Errorf("MakeDir(%s/made) succeeded: a magic link was followed", fdDir)
	}
	if _, err := os.Stat(filepath.Join(dir, "made")); err == nil {
		t.Errorf("a directory was made through %s", fdDir)
	}
	if _, done, err := f.HostDir(fdDir); err == nil {
		done()
		t.Errorf("HostDir(%s) succeeded: exec could start in a directory outside the tree", fdDir)
	}
	ents, err := f.List("/proc/self/fd", 1)
	if err != nil {
		t.Fatalf("List(/proc/self/fd): %v", err)
	}
	for _, e := range ents {
		if e.SymlinkTarget != "" {
			t.Errorf("List(/proc/self/fd) shows %s -> %s: an fd's target was read", e.Path, e.SymlinkTarget)
		}
	}
}
