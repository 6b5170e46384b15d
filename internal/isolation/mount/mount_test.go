package mount

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

func TestBuildEtc(t *testing.T) {
	etc, parent := t.TempDir(), t.TempDir()
	files := map[string]string{
		"passwd":                   "root:$6$hash:0:0:root:/root:/bin/bash\n_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\nalice:x:1001:1001::/home/alice:/bin/bash\n",
		"group":                    "root:x:0:\nalice:x:1001:\n",
		"shadow":                   "root:$6$secret",
		"sudoers":                  "secret",
		"ssh/ssh_host_rsa_key":     "secret",
		"ssl/private/k.pem":        "secret",
		"ssl/certs/ca.pem":         "cert",
		"security/opasswd":         "secret",
		"security/limits.conf":     "ok",
		"nsswitch.conf":            "hosts: files",
		"later.conf":               "not listed",
		"ld.so.conf.d/x86_64.conf": "/usr/lib",
	}
	for f, content := range files {
		os.MkdirAll(filepath.Join(etc, filepath.Dir(f)), 0o755)
		os.WriteFile(filepath.Join(etc, f), []byte(content), 0o644)
	}
	os.Symlink("../../../etc/shadow", filepath.Join(etc, "localtime"))
	layer, err := BuildEtc(parent, etc)
	if err != nil {
		t.Fatal(err)
	}
	for _, kept := range []string{"nsswitch.conf", "ssl/certs/ca.pem", "security/limits.conf", "ld.so.conf.d/x86_64.conf"} {
		if b, err := os.ReadFile(filepath.Join(layer, kept)); err != nil || string(b) != files[kept] {
			t.Errorf("%s in the layer = %q, %v; want the host's copy", kept, b, err)
		}
	}
	if sh, err := os.ReadFile(filepath.Join(layer, "shadow")); err != nil || strings.Contains(string(sh), "$6$") || !strings.Contains(string(sh), "user:*:") {
		t.Errorf("shadow = %q, %v; want the sandbox's own accounts, locked, and none of the host's", sh, err)
	}
	for _, gone := range []string{"sudoers", "ssh", "ssl/private", "security/opasswd", "later.conf"} {
		if _, err := os.Lstat(filepath.Join(layer, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is in the layer: %v", gone, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(layer, "localtime")); err != nil || target != "../../../etc/shadow" {
		t.Errorf("localtime = %q, %v; want the link copied as a link", target, err)
	}
	passwd, _ := os.ReadFile(filepath.Join(layer, "passwd"))
	for _, want := range []string{"root:x:0:0:", "_apt:x:42:", "nobody:x:65534:", "user:x:1000:1000:"} {
		if !strings.Contains(string(passwd), want) {
			t.Errorf("passwd lacks %q:\n%s", want, passwd)
		}
	}
	if strings.Contains(string(passwd), "alice") || strings.Contains(string(passwd), "$6$") {
		t.Errorf("passwd holds a host person or a hash:\n%s", passwd)
	}
	// A file added to the host's /etc later: the same layer when it is not
	// listed, a new one when it is.
	os.WriteFile(filepath.Join(etc, "later2.conf"), []byte("x"), 0o644)
	if again, err := BuildEtc(parent, etc); err != nil || again != layer {
		t.Errorf("after an unlisted file: %q, %v; want the same layer %q", again, err, layer)
	}
	os.WriteFile(filepath.Join(etc, "gai.conf"), []byte("x"), 0o644)
	if again, err := BuildEtc(parent, etc); err != nil || again == layer {
		t.Errorf("after a listed file: %q, %v; want a new layer", again, err)
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
