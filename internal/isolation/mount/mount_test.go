package mount

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestBuildSkeleton(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(root string)
		wantReal []string
		wantLink map[string]string
	}{
		{"merged usr", func(root string) {
			os.Symlink("usr/bin", filepath.Join(root, "bin"))
			os.Symlink("usr/lib", filepath.Join(root, "lib"))
		}, nil, map[string]string{"bin": "usr/bin", "lib": "usr/lib"}},
		{"split usr", func(root string) {
			os.Mkdir(filepath.Join(root, "bin"), 0o755)
			os.Mkdir(filepath.Join(root, "lib64"), 0o755)
			os.Symlink("usr/sbin", filepath.Join(root, "sbin"))
		}, []string{"bin", "lib64"}, map[string]string{"sbin": "usr/sbin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, parent := t.TempDir(), t.TempDir()
			tc.setup(host)
			sk, err := BuildSkeleton(parent, host)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(sk.RealDirs, tc.wantReal) {
				t.Errorf("RealDirs = %v, want %v", sk.RealDirs, tc.wantReal)
			}
			for name, target := range tc.wantLink {
				if got, err := os.Readlink(filepath.Join(sk.Dir, name)); err != nil || got != target {
					t.Errorf("skeleton %s -> %q (%v), want -> %q", name, got, err, target)
				}
			}
			for _, d := range append([]string{"proc", "dev", "workspace", "var/tmp"}, tc.wantReal...) {
				if fi, err := os.Stat(filepath.Join(sk.Dir, d)); err != nil || !fi.IsDir() {
					t.Errorf("skeleton lacks directory %s: %v", d, err)
				}
			}
			if fi, err := os.Stat(filepath.Join(sk.Dir, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 {
				t.Errorf("skeleton /tmp is not sticky: %v", fi.Mode())
			}
			again, err := BuildSkeleton(parent, host)
			if err != nil || again.Dir != sk.Dir {
				t.Errorf("second BuildSkeleton = %q, %v; want the same layer %q reused", again.Dir, err, sk.Dir)
			}
		})
	}
}

func TestBuildEtcMask(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("requires root: whiteouts are character devices") // mknod needs CAP_MKNOD
	}
	etc, parent := t.TempDir(), t.TempDir()
	for _, f := range []string{"shadow", "passwd", "ssh/ssh_host_ed25519_key", "ssh/ssh_host_ed25519_key.pub", "ssl/private/x.key"} {
		os.MkdirAll(filepath.Join(etc, filepath.Dir(f)), 0o755)
		os.WriteFile(filepath.Join(etc, f), []byte("secret"), 0o600)
	}
	os.Chmod(filepath.Join(etc, "ssh"), 0o711)
	mask, err := BuildEtcMask(parent, etc)
	if err != nil {
		t.Fatal(err)
	}
	for _, hidden := range []string{"shadow", "ssh/ssh_host_ed25519_key", "ssl/private"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(mask, hidden), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
			t.Errorf("%s is not a whiteout in the mask: %v %o", hidden, err, st.Mode)
		}
	}
	for _, kept := range []string{"passwd", "ssh/ssh_host_ed25519_key.pub"} {
		if _, err := os.Lstat(filepath.Join(mask, kept)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is in the mask, want it left visible", kept)
		}
	}
	if fi, err := os.Stat(filepath.Join(mask, "ssh")); err != nil || fi.Mode().Perm() != 0o711 {
		t.Errorf("mask ssh/ mode = %v, %v; want the host's 0711", fi.Mode(), err)
	}
}

func TestErrorText(t *testing.T) {
	err := &Error{Op: "mount", Source: "overlay", Target: "/x", Fstype: "overlay", Flags: unix.MS_NOSUID, Data: "lowerdir=/a", Err: syscall.EINVAL}
	want := "mount overlay on /x type overlay flags 0x2 (lowerdir=/a): invalid argument"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if !errors.Is(err, syscall.EINVAL) {
		t.Errorf("errors.Is(%v, EINVAL) = false", err)
	}
	if err := mountOverlay(Overlay{Lower: []string{"/a:b"}, Upper: "/u", Work: "/w"}, "/t"); err == nil {
		t.Errorf("mountOverlay with ':' in a layer path succeeded")
	}
}
