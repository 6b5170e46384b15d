package testutil

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// MiniRoot fills dir with a small Linux root made of the host's own files:
// each of programs (absolute host paths, e.g. /bin/sh) and the shared
// libraries ldd lists for it, at the same paths, every symlink on the way
// (a merged-/usr host's /bin -> usr/bin, /usr/bin/sh -> dash) made as the
// host has it. It is what directory-template tests use as a template's
// root; nothing is fetched.
func MiniRoot(t testing.TB, dir string, programs ...string) {
	t.Helper()
	for _, p := range programs {
		files := []string{p}
		libs, err := sharedLibs(p)
		if err != nil {
			t.Fatalf("listing the libraries of %s: %v", p, err)
		}
		for _, f := range append(files, libs...) {
			if err := copyHostPath(dir, f, 0); err != nil {
				t.Fatalf("copying %s into %s: %v", f, dir, err)
			}
		}
	}
}

// sharedLibs lists the libraries (and the loader) ldd names for prog; none
// for a static program.
func sharedLibs(prog string) ([]string, error) {
	out, err := exec.Command("ldd", prog).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && bytes.Contains(append(out, ee.Stderr...), []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, err
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && filepath.IsAbs(f[2]):
			libs = append(libs, f[2])
		case len(f) >= 1 && filepath.IsAbs(f[0]):
			libs = append(libs, f[0])
		}
	}
	return libs, sc.Err()
}

// copyHostPath copies host path p into root at the same path, walking it a
// component at a time: directories are made, symlinks made as they are on
// the host and followed, the final file copied with its mode.
func copyHostPath(root, p string, depth int) error {
	if depth > 40 {
		return fmt.Errorf("%s: too many levels of symbolic links", p)
	}
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	cur := "/"
	for i, part := range parts {
		next := filepath.Join(cur, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return err
		}
		dst := filepath.Join(root, next)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(next)
			if err != nil {
				return err
			}
			if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
				if err := os.Symlink(target, dst); err != nil {
					return err
				}
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			return copyHostPath(root, filepath.Join(append([]string{target}, parts[i+1:]...)...), depth+1)
		case fi.IsDir():
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
			cur = next
		default:
			if i != len(parts)-1 {
				return fmt.Errorf("%s is not a directory", next)
			}
			if _, err := os.Lstat(dst); err == nil {
				return nil
			}
			return copyFile(next, dst, fi.Mode().Perm())
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(dst, mode)
	}
	return err
}
