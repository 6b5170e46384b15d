// This file implements the read-only layers built once per driver on the host:
// the skeleton under the root overlay (and, in etc.go, /etc), and the mount
// points laid over directory templates.

package mount

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// TopLinks are the top-level host paths that merged-/usr hosts make symlinks
// (into /usr) and others real directories.
var TopLinks = []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// skeletonDirs are the top-level directories of every root, with their modes.
var skeletonDirs = []struct {
	path string
	mode fs.FileMode
}{
	{"dev", 0o755}, {"proc", 0o555}, {"sys", 0o555}, {"tmp", 0o777 | fs.ModeSticky},
	{"workspace", 0o755}, {"usr", 0o755}, {"etc", 0o755}, {"root", 0o700}, {"home", 0o755},
	{"run", 0o755}, {"mnt", 0o755}, {"opt", 0o755}, {"srv", 0o755}, {"var", 0o755},
	{"var/tmp", 0o777 | fs.ModeSticky}, {"var/lib", 0o755}, {"var/cache", 0o755},
	{"var/log", 0o755}, {"var/spool", 0o755},
}

// Skeleton is a built skeleton layer.
type Skeleton struct {
	Dir string
	// RealDirs are the TopLinks that are real directories on this host: each
	// needs its own overlay (lower = the host directory).
	RealDirs []string
}

// BuildSkeleton makes, under parent, the skeleton of a root modelled on the host
// root hostRoot: the top-level directories and the host's merged-/usr
// symlinks, and, when etc is not "", a copy of the layer etc (BuildEtc) as
// its /etc: the root's overlay then covers /etc too, one overlay fewer per
// sandbox. The layer is named by a hash of its content and reused when
// present.
func BuildSkeleton(parent, hostRoot, etc string) (Skeleton, error) {
	var desc []string
	var links [][2]string
	var sk Skeleton
	for _, name := range TopLinks {
		fi, err := os.Lstat(filepath.Join(hostRoot, name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return Skeleton{}, fmt.Errorf("building skeleton: %w", err)
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(filepath.Join(hostRoot, name))
			if err != nil {
				return Skeleton{}, fmt.Errorf("building skeleton: %w", err)
			}
			links = append(links, [2]string{name, t})
			desc = append(desc, "link "+name+" "+t)
		case fi.IsDir():
			sk.RealDirs = append(sk.RealDirs, name)
			desc = append(desc, "dir "+name)
		}
	}
	desc = append(desc, skeletonDesc()...)
	if etc != "" { // its name is the hash of its content
		desc = append(desc, "etc "+filepath.Base(etc))
	}
	dir, err := buildLayer(parent, "skel", desc, func(tmp string) error {
		if err := makeSkeletonDirs(tmp); err != nil {
			return err
		}
		for _, name := range sk.RealDirs {
			if err := os.Mkdir(filepath.Join(tmp, name), 0o755); err != nil {
				return err
			}
		}
		for _, l := range links {
			if err := os.Symlink(l[1], filepath.Join(tmp, l[0])); err != nil {
				return err
			}
		}
		if etc == "" {
			return nil
		}
		return filepath.WalkDir(etc, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(etc, p)
			return copyEntry(p, filepath.Join(tmp, "etc", rel))
		})
	})
	sk.Dir = dir
	return sk, err
}

// BuildMountPoints makes, under parent, the layer laid over a directory
// template's root (the operator's directory holding a whole Linux root): the
// top-level directories of every root (dev, proc, sys, tmp, workspace, etc,
// usr, var/tmp, …) as empty directories and nothing else. Where the template
// has a directory of that name the two merge; where it has anything else (a
// symlink to a host path, a file) overlayfs shows this layer's directory
// alone, so every mount target of the root and every place the sandbox's own
// files go is a directory of the sandbox whatever the template holds there.
// The layer is named by a hash of its content and reused when present.
func BuildMountPoints(parent string) (string, error) {
	return buildLayer(parent, "mountpoints", skeletonDesc(), makeSkeletonDirs)
}

// skeletonDesc describes skeletonDirs, for a layer's content hash.
func skeletonDesc() []string {
	var desc []string
	for _, d := range skeletonDirs {
		desc = append(desc, fmt.Sprintf("dir %s %o", d.path, d.mode))
	}
	return desc
}

// makeSkeletonDirs makes skeletonDirs under tmp, each with its mode.
func makeSkeletonDirs(tmp string) error {
	for _, d := range skeletonDirs {
		p := filepath.Join(tmp, d.path)
		if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
	}
	return nil
}

// EtcSecrets are the paths under /etc (globs) no sandbox sees, even where
// EtcAllow would let a directory above them in.
var EtcSecrets = []string{
	"shadow", "shadow-", "gshadow", "gshadow-", "passwd-", "group-",
	"ssh/ssh_host_*_key", "ssl/private", "security/opasswd", "krb5.keytab",
	"sudoers", "sudoers.d", "machine-id", "subuid", "subgid", "subuid-", "subgid-",
	"NetworkManager/system-connections", "wpa_supplicant", "letsencrypt",
	"docker/key.json", "containerd", "kubernetes", "rancher",
}

// buildLayer returns parent/<name>-<hash of desc>, building it with fill in a
// temporary directory renamed into place when it is not there yet.
func buildLayer(parent, name string, desc []string, fill func(dir string) error) (string, error) {
	sum := sha256.Sum256([]byte(strings.Join(desc, "\n")))
	dir := filepath.Join(parent, name+"-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("building %s layer: %w", name, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+name+"-")
	if err != nil {
		return "", fmt.Errorf("building %s layer: %w", name, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("building %s layer: %w", name, err)
	}
	if err := fill(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("building %s layer: %w", name, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		if _, serr := os.Stat(dir); serr == nil {
			return dir, nil // built meanwhile by another driver
		}
		return "", fmt.Errorf("building %s layer: %w", name, err)
	}
	return dir, nil
}
