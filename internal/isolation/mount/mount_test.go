package mount

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
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
			sk, err := BuildSkeleton(parent, host, "")
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
			again, err := BuildSkeleton(parent, host, "")
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
	layer, err := BuildEtc(parent, etc, nil)
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
	if again, err := BuildEtc(parent, etc, nil); err != nil || again != layer {
		t.Errorf("after an unlisted file: %q, %v; want the same layer %q", again, err, layer)
	}
	os.WriteFile(filepath.Join(etc, "gai.conf"), []byte("x"), 0o644)
	if again, err := BuildEtc(parent, etc, nil); err != nil || again == layer {
		t.Errorf("after a listed file: %q, %v; want a new layer", again, err)
	}
	// An extra CA: its own file, and appended to the bundle; a new layer.
	os.WriteFile(filepath.Join(etc, "ssl/certs/ca-certificates.crt"), []byte("HOST ROOTS"), 0o644)
	withCA, err := BuildEtc(parent, etc, []byte("EXTRA CA\n"))
	if err != nil || withCA == layer {
		t.Fatalf("with a CA: %q, %v", withCA, err)
	}
	if b, _ := os.ReadFile(filepath.Join(withCA, "ssl/certs/ca-certificates.crt")); string(b) != "HOST ROOTS\nEXTRA CA\n" {
		t.Errorf("bundle with the CA = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(withCA, "ssl/certs/sbx-egress-ca.pem")); string(b) != "EXTRA CA\n" {
		t.Errorf("the CA alone = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(etc, "ssl/certs/ca-certificates.crt")); string(b) != "HOST ROOTS" {
		t.Errorf("the host's bundle changed: %q", b)
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

// inMountNS runs f on a thread of its own in a new private mount namespace;
// the thread is thrown away after, so nothing f mounts reaches the host or
// another test.
func inMountNS(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
			done <- err
			return
		}
		if err := MakePrivate(); err != nil {
			done <- err
			return
		}
		done <- f()
	}()
	return <-done
}

// FS-12 at the mount layer: a hostile root (a template's) with /dev, /proc,
// /tmp, /workspace or /etc as links out, or a planted /dev/null leading to
// core_pattern and a pre-filled /proc. Assemble refuses the links, naming
// them, and masks /proc with the host's /dev/null, not the planted node; the
// host's /proc/sys/kernel/core_pattern and /dev stay as they were.
func TestAssembleHostileRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	core, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Fatal(err)
	}
	hostDev, _ := os.ReadDir("/dev")
	base := func(t *testing.T) (string, Plan) {
		d := t.TempDir()
		for _, sub := range []string{"lower", "upper", "work", "root", "ws"} {
			os.Mkdir(filepath.Join(d, sub), 0o755)
		}
		for _, sub := range []string{"dev", "proc", "tmp", "workspace", "etc", "usr"} {
			os.Mkdir(filepath.Join(d, "lower", sub), 0o755)
		}
		return filepath.Join(d, "lower"), Plan{
			Root:      filepath.Join(d, "root"),
			RootLayer: Overlay{Lower: []string{filepath.Join(d, "lower")}, Upper: filepath.Join(d, "upper"), Work: filepath.Join(d, "work")},
			Binds:     []Bind{{Source: filepath.Join(d, "ws"), Target: "/workspace"}},
		}
	}
	for _, tc := range []struct {
		name, path, link string
		overlayEtc       bool
	}{
		{"dev to proc sys", "dev", "/proc/sys/kernel", false},
		{"proc to etc", "proc", "/etc", false},
		{"tmp to root", "tmp", "/", false},
		{"workspace climbing out", "workspace", "../../../../..", false},
		{"etc to a host path", "etc", "/root", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lower, p := base(t)
			os.Remove(filepath.Join(lower, tc.path))
			if err := os.Symlink(tc.link, filepath.Join(lower, tc.path)); err != nil {
				t.Fatal(err)
			}
			if tc.overlayEtc {
				d := t.TempDir()
				os.Mkdir(filepath.Join(d, "u"), 0o755)
				os.Mkdir(filepath.Join(d, "w"), 0o755)
				p.Overlays = []Overlay{{Target: "/etc", Lower: []string{"/etc"}, Upper: filepath.Join(d, "u"), Work: filepath.Join(d, "w")}}
			}
			err := inMountNS(t, func() error { return Assemble(p) })
			if err == nil || !strings.Contains(err.Error(), "/"+tc.path) || !strings.Contains(err.Error(), "symlink") {
				t.Errorf("Assemble of a root whose /%s -> %s = %v; want a refusal naming /%s", tc.path, tc.link, err, tc.path)
			}
		})
	}
	t.Run("planted dev null and proc", func(t *testing.T) {
		lower, p := base(t)
		os.Symlink("/proc/sys/kernel/core_pattern", filepath.Join(lower, "dev", "null"))
		os.WriteFile(filepath.Join(lower, "proc", "kcore"), []byte("planted"), 0o644)
		var kcore []byte
		var null os.FileInfo
		err := inMountNS(t, func() error {
			if err := Assemble(p); err != nil {
				return err
			}
			kcore, _ = os.ReadFile(filepath.Join(p.Root, "proc", "kcore"))
			var err error
			null, err = os.Lstat(filepath.Join(p.Root, "dev", "null"))
			return err
		})
		if err != nil {
			t.Fatalf("Assemble of a root with a planted /dev/null and /proc = %v; want them covered and the root made", err)
		}
		if len(kcore) != 0 {
			t.Errorf("/proc/kcore inside reads %q; want the mask (empty)", kcore)
		}
		if null.Mode()&os.ModeCharDevice == 0 {
			t.Errorf("/dev/null inside is %v; want the character device", null.Mode())
		}
	})
	if now, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(now) != string(core) {
		t.Errorf("host core_pattern changed: %q, was %q", now, core)
	}
	if now, _ := os.ReadDir("/dev"); len(now) != len(hostDev) {
		t.Errorf("host /dev has %d entries, had %d", len(now), len(hostDev))
	}
}
