// This file implements what confines a local sandbox's processes, which run
// on the host: Landlock lets them read only the system directories programs
// need (and the operator's listed git repositories) and write only their
// workspace and scratch directory, and the default
// seccomp profile applies as in every sandbox. It makes the local backend no
// sandbox (no namespaces: host processes, the network and the rest of /proc
// stay in view), but keeps its commands out of the daemon's data dir, the API
// socket, $HOME and the host's secrets.

package local

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/isolation/mount"
	"sbx.dev/sbx/internal/isolation/seccomp"
)

// systemDirs are the host directories local processes may read and execute
// from.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/proc"}

// devices are the device nodes local processes may read and write.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/pts", "/dev/ptmx"}

// landlockRules are a local sandbox's rules: the system directories, /etc
// without its secrets (mount.EtcSecrets), the devices and the operator's
// listed git repositories (gitjail.go) to read; its workspace and scratch
// directory to write.
func landlockRules(ws, scratch string, gitRepos []string) (*boot.LandlockRules, error) {
	etc, err := readableUnder("/etc", mount.EtcSecrets)
	if err != nil {
		return nil, err
	}
	read := append(slices.Clone(systemDirs), etc...)
	read = append(read, gitRepos...)
	return &boot.LandlockRules{Read: read, Write: append([]string{ws, scratch}, devices...)}, nil
}

// readableUnder lists the entries of dir to grant read access to: each entry
// that is not a secret (secrets are globs relative to dir) and has none
// beneath it, and, for a directory with a secret beneath it, its entries by
// the same rule. Landlock grants, never subtracts: a secret is left out by
// granting everything around it.
func readableUnder(dir string, secrets []string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		secret, above := false, false
		for _, pat := range secrets {
			full := filepath.Join("/etc", pat)
			if ok, _ := filepath.Match(full, p); ok {
				secret = true
			}
			if strings.HasPrefix(full, p+"/") {
				above = true
			}
		}
		switch {
		case secret:
		case above && e.IsDir():
			sub, err := readableUnder(p, secrets)
			if err != nil {
				return nil, err
			}
			out = append(out, sub...)
		default:
			out = append(out, p)
		}
	}
	return out, nil
}

// filter is the default seccomp profile, compiled.
func filter() (prog []byte, id string, err error) {
	prof, err := seccomp.Lookup("default")
	if err != nil {
		return nil, "", err
	}
	p, err := seccomp.Compile(prof)
	if err != nil {
		return nil, "", err
	}
	return p.Bytes(), p.ID(), nil
}
