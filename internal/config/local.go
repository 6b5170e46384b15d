package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Local configures the local backend ([local] in the file).
type Local struct {
	// GitRepos are host git repositories (absolute paths) a local sandbox
	// may clone from: read-only to it, so its clone in the workspace is a
	// staging copy and a push back fails (README, "The git staging jail").
	// None by default. Env SBX_LOCAL_GIT_REPOS (comma-separated).
	GitRepos []string `toml:"git_repos"`
}

func (l *Local) applyEnv(getenv func(string) string) {
	if v := getenv("SBX_LOCAL_GIT_REPOS"); v != "" {
		l.GitRepos = nil
		for _, r := range strings.Split(v, ",") {
			if r = strings.TrimSpace(r); r != "" {
				l.GitRepos = append(l.GitRepos, r)
			}
		}
	}
}

// checkLocal checks each listed repository: an absolute path to an existing
// git repository (with a work tree or bare), neither inside the data dir
// nor holding it, since a sandbox may read all of it.
func checkLocal(c *Config) error {
	var errs []error
	data := resolved(c.DataDir)
	for i, r := range c.Local.GitRepos {
		field := fmt.Sprintf("local.git_repos[%d]", i)
		if err := checkGitRepo(r); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q %v", field, r, err))
			continue
		}
		if filepath.IsAbs(c.DataDir) {
			p := resolved(r)
			switch {
			case within(p, data):
				errs = append(errs, fmt.Errorf("%s: %q is inside data_dir %s", field, r, c.DataDir))
			case within(data, p):
				errs = append(errs, fmt.Errorf("%s: %q holds data_dir %s, which a sandbox would then read", field, r, c.DataDir))
			}
		}
	}
	return errors.Join(errs...)
}

// checkGitRepo says why r is not a listed repository's path.
func checkGitRepo(r string) error {
	if !filepath.IsAbs(r) {
		return errors.New("is not an absolute path")
	}
	if strings.ContainsFunc(r, func(c rune) bool { return c < 0x20 || c == 0x7f }) {
		return errors.New("holds a control character")
	}
	fi, err := os.Stat(r)
	if err != nil {
		return fmt.Errorf("cannot be read: %v", err)
	}
	if !fi.IsDir() {
		return errors.New("is not a directory")
	}
	if isGitDir(r) {
		return nil // bare
	}
	dotgit := filepath.Join(r, ".git")
	if fi, err := os.Lstat(dotgit); err == nil && !fi.IsDir() {
		return errors.New("has a .git file (a linked work tree or a submodule): list the repository it points to")
	}
	if isGitDir(dotgit) {
		return nil
	}
	return errors.New("is not a git repository (no .git directory, and not a bare repository)")
}

// isGitDir reports whether dir looks like a git directory to git: a HEAD
// file, and objects and refs directories.
func isGitDir(dir string) bool {
	head, err := os.Stat(filepath.Join(dir, "HEAD"))
	if err != nil || !head.Mode().IsRegular() {
		return false
	}
	for _, d := range []string{"objects", "refs"} {
		if fi, err := os.Stat(filepath.Join(dir, d)); err != nil || !fi.IsDir() {
			return false
		}
	}
	return true
}

// resolved is p cleaned, with its symbolic links resolved as far as it
// exists.
func resolved(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for cur := p; ; cur = filepath.Dir(cur) {
		if real, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(real, rest)
		}
		if cur == filepath.Dir(cur) {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
	}
}

// within reports whether path p is dir or beneath it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}
