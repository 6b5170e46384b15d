// This file implements the /etc of sandboxes on the host template: an
// allowlist of the host's /etc, copied once per daemon into a read-only
// layer, with passwd and group made for the sandbox.

package mount

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// EtcAllow are the host /etc entries (globs, top level) a sandbox sees, as
// copies: what programs need to run, resolve names, verify TLS, find their
// libraries and speak the locale. Everything else of the host's /etc is left
// out, and a file the host gains later never appears inside (until the daemon
// restarts, and then only if it is listed here). Nothing under EtcSecrets is
// ever copied.
var EtcAllow = []string{
	// Name service and networking.
	"hosts", "hostname", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf",
	"protocols", "services", "networks", "ethertypes", "rpc",
	// TLS trust.
	"ssl", "ca-certificates", "ca-certificates.conf", "pki",
	// The dynamic linker and the alternatives system.
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives",
	// Time, locale, system identity.
	"localtime", "timezone", "locale.alias", "locale.gen", "locale.conf", "default",
	"os-release", "debian_version", "issue", "issue.net", "lsb-release",
	// Shells and logins.
	"profile", "profile.d", "bash.bashrc", "bash_completion", "bash_completion.d", "skel",
	"environment", "inputrc", "login.defs", "shells", "pam.conf", "pam.d", "security",
	// File types.
	"mime.types", "magic", "magic.mime", "mailcap", "mailcap.order",
	// Package managers.
	"apt", "dpkg", "debconf.conf", "ucf.conf", "adduser.conf", "deluser.conf",
	// Language runtimes and tools.
	"python3", "python3.*", "perl", "java-*", "gitconfig", "pip.conf", "npmrc", "vim", "emacs",
	"wgetrc", "curlrc", "X11", "fonts", "xdg", "ImageMagick-*", "matplotlibrc",
}

// BuildEtc makes, under parent, the read-only /etc layer of sandboxes from
// the host's hostEtc: the EtcAllow entries copied (directories walked
// without following symlinks; symlinks copied as links; devices, FIFOs and
// sockets skipped; nothing of EtcSecrets), owned by root, and passwd and
// group holding the host's system accounts (ids below 1000, and nobody)
// and a regular user, "user" (1000), with shadow and gshadow made for them,
// locked (the host's are never copied). extraCA, when set, is a CA
// certificate (PEM) the sandboxes trust besides the host's: it is written
// as ssl/certs/sbx-egress-ca.pem and appended to ssl/certs/ca-certificates.crt.
// The layer is named by a hash of what it copies (paths, modes, sizes,
// times, link targets) and of extraCA, and reused while that stays the same.
func BuildEtc(parent, hostEtc string, extraCA []byte) (string, error) {
	var entries []string
	for _, pat := range EtcAllow {
		m, err := filepath.Glob(filepath.Join(hostEtc, pat))
		if err != nil {
			return "", fmt.Errorf("building /etc: %w", err)
		}
		entries = append(entries, m...)
	}
	slices.Sort(entries)
	entries = slices.Compact(entries)
	var desc []string
	var files []string // relative to hostEtc
	for _, top := range entries {
		err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(hostEtc, p)
			if secret(rel) {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			line := fmt.Sprintf("%s %o %d %d", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				t, err := os.Readlink(p)
				if err != nil {
					return err
				}
				line += " -> " + t
			case fi.IsDir(), fi.Mode().IsRegular():
			default:
				return nil // devices, FIFOs, sockets
			}
			desc = append(desc, line)
			files = append(files, rel)
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("building /etc: %w", err)
		}
	}
	passwd, group, err := accounts(hostEtc)
	if err != nil {
		return "", fmt.Errorf("building /etc: %w", err)
	}
	shadow, gshadow := locked(passwd), locked(group)
	desc = append(desc, "passwd "+passwd, "group "+group)
	if len(extraCA) > 0 {
		desc = append(desc, "ca "+string(extraCA))
	}
	return buildLayer(parent, "etc", desc, func(tmp string) error {
		for _, rel := range files {
			if err := copyEntry(filepath.Join(hostEtc, rel), filepath.Join(tmp, rel)); err != nil {
				return err
			}
		}
		for name, content := range map[string]string{"passwd": passwd, "group": group, "shadow": shadow, "gshadow": gshadow} {
			mode := fs.FileMode(0o644)
			if strings.Contains(name, "shadow") {
				mode = 0o600
			}
			if err := os.WriteFile(filepath.Join(tmp, name), []byte(content), mode); err != nil {
				return err
			}
			if err := os.Chmod(filepath.Join(tmp, name), mode); err != nil {
				return err
			}
		}
		if len(extraCA) > 0 {
			return addCA(tmp, extraCA)
		}
		return nil
	})
}

// EgressCAFile is where a sandbox finds the egress proxy's CA alone.
const EgressCAFile = "/etc/ssl/certs/sbx-egress-ca.pem"

// addCA writes ca into the /etc layer at tmp: alone, and at the end of the
// bundle most programs read.
func addCA(tmp string, ca []byte) error {
	certs := filepath.Join(tmp, "ssl", "certs")
	if err := os.MkdirAll(certs, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(certs, filepath.Base(EgressCAFile)), ca, 0o644); err != nil {
		return err
	}
	bundle := filepath.Join(certs, "ca-certificates.crt")
	if fi, err := os.Lstat(bundle); err == nil && !fi.Mode().IsRegular() {
		if err := os.Remove(bundle); err != nil { // a link into the host: replaced by a copy
			return err
		}
	}
	old, err := os.ReadFile(bundle)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if len(old) > 0 && old[len(old)-1] != '\n' {
		old = append(old, '\n')
	}
	return os.WriteFile(bundle, append(old, ca...), 0o644)
}

// secret reports whether rel (relative to /etc) is, or is under, one of
// EtcSecrets.
func secret(rel string) bool {
	for _, pat := range EtcSecrets {
		for p := rel; p != "." && p != "/"; p = filepath.Dir(p) {
			if ok, _ := filepath.Match(pat, p); ok {
				return true
			}
		}
	}
	return false
}

// copyEntry copies one file, directory (made, not filled) or symlink.
func copyEntry(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(t, dst)
	case fi.IsDir():
		if err := os.Mkdir(dst, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		return os.Chmod(dst, fi.Mode().Perm()|fi.Mode()&(fs.ModeSticky|fs.ModeSetgid))
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Chmod(dst, fi.Mode().Perm()) // past the umask
}

// sandboxUser is the regular user every sandbox has.
const sandboxUser = "user:x:1000:1000:user:/home/user:/bin/bash\n"

// accounts returns the sandbox's passwd and group: the host's system
// accounts (ids below 1000, and 65534), which packages expect, and "user".
// The host's people are not copied.
func accounts(hostEtc string) (passwd, group string, err error) {
	pick := func(name string) (string, map[int]bool, error) {
		var b strings.Builder
		ids := map[int]bool{}
		f, err := os.Open(filepath.Join(hostEtc, name))
		if errors.Is(err, fs.ErrNotExist) {
			return "", ids, nil
		}
		if err != nil {
			return "", nil, err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) < 4 {
				continue
			}
			id, err := strconv.Atoi(fields[2])
			if err != nil || (id >= 1000 && id != 65534) {
				continue
			}
			fields[1] = "x" // never a hash, whatever the host keeps there
			b.WriteString(strings.Join(fields, ":") + "\n")
			ids[id] = true
		}
		return b.String(), ids, sc.Err()
	}
	passwd, uids, err := pick("passwd")
	if err != nil {
		return "", "", err
	}
	group, gids, err := pick("group")
	if err != nil {
		return "", "", err
	}
	if !uids[0] {
		passwd = "root:x:0:0:root:/root:/bin/bash\n" + passwd
	}
	if !uids[65534] {
		passwd += "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	}
	passwd += sandboxUser
	if !gids[0] {
		group = "root:x:0:\n" + group
	}
	if !gids[65534] {
		group += "nogroup:x:65534:\n"
	}
	group += "user:x:1000:\n"
	return passwd, group, nil
}

// locked returns the shadow (or gshadow) file of the accounts in passwd (or
// group): every one present, none with a password ("*"), so PAM finds the
// accounts it checks and no login by password works. The host's shadow files
// never reach a sandbox.
func locked(accounts string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(accounts), "\n") {
		name, _, _ := strings.Cut(line, ":")
		if strings.Count(line, ":") >= 6 { // passwd: name:*:lastchg:min:max:warn:::
			b.WriteString(name + ":*:19000:0:99999:7:::\n")
		} else { // group: name:*::
			b.WriteString(name + ":*::\n")
		}
	}
	return b.String()
}
