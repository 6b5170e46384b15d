// This file implements the git staging jail of a local sandbox: git in it
// never discovers a repository above the sandbox's directory, reads neither
// the host's system nor its global git configuration, and reaches the
// host's repositories only through those the operator lists (Options.GitRepos),
// which Landlock makes read-only (confine.go): a clone of one in the
// workspace is the staging copy, and a push back fails. The way back is
// the operator's, from the host (README, "The git staging jail").

package local

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// gitConfigDir is where, under a sandbox's scratch directory, its
// XDG_CONFIG_HOME is; its global git configuration is git/config there.
const gitConfigDir = ".config"

// gitJail writes the global git configuration of the sandbox whose
// directory is dir and scratch directory scratch, and returns the
// environment that confines its git: GIT_CEILING_DIRECTORIES (discovery
// stops below dir), GIT_CONFIG_NOSYSTEM (no /etc/gitconfig),
// GIT_CONFIG_GLOBAL and XDG_CONFIG_HOME (the sandbox's own files instead of
// the daemon's user's). The configuration marks exactly repos as
// safe.directory, so a listed repository owned by another user clones.
func gitJail(dir, scratch string, repos []string) ([]string, error) {
	if strings.ContainsRune(dir, ':') {
		// GIT_CEILING_DIRECTORIES is a ':'-separated list.
		return nil, fmt.Errorf("git ceiling: the sandbox directory %q holds a ':'", dir)
	}
	xdg := filepath.Join(scratch, gitConfigDir)
	global := filepath.Join(xdg, "git", "config")
	if err := os.MkdirAll(filepath.Dir(global), 0o700); err != nil {
		return nil, err
	}
	conf, err := gitConfig(repos)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(global, conf, 0o600); err != nil {
		return nil, err
	}
	return []string{
		"GIT_CEILING_DIRECTORIES=" + dir,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + global,
		"XDG_CONFIG_HOME=" + xdg,
	}, nil
}

// gitConfig is the text of a sandbox's global git configuration: each of
// repos as safe.directory, as listed and resolved, each with its .git
// directory too: git checks the work tree or the .git directory, by version
// and command (a bare repository has no .git, and the entry names nothing).
func gitConfig(repos []string) ([]byte, error) {
	var b strings.Builder
	b.WriteString("# This sandbox's global git configuration (GIT_CONFIG_GLOBAL), written by sbx.\n" +
		"# The host's listed repositories, read-only here, are safe to clone whoever owns them.\n")
	if len(repos) == 0 {
		return []byte(b.String()), nil
	}
	b.WriteString("[safe]\n")
	seen := map[string]bool{}
	for _, r := range repos {
		if err := checkRepoPath(r); err != nil {
			return nil, err
		}
		paths := []string{filepath.Clean(r)}
		if real, err := filepath.EvalSymlinks(r); err == nil && real != paths[0] {
			paths = append(paths, real)
		}
		for _, p := range paths {
			for _, q := range []string{p, filepath.Join(p, ".git")} {
				if !seen[q] {
					seen[q] = true
					fmt.Fprintf(&b, "\tdirectory = %s\n", quoteGitValue(q))
				}
			}
		}
	}
	return []byte(b.String()), nil
}

// checkRepoPath refuses a listed repository path git's configuration or
// Landlock could not take as it is.
func checkRepoPath(r string) error {
	switch {
	case !filepath.IsAbs(r):
		return fmt.Errorf("git repository %q is not an absolute path", r)
	case strings.ContainsFunc(r, func(c rune) bool { return c < 0x20 || c == 0x7f }):
		return fmt.Errorf("git repository %q holds a control character", r)
	}
	return nil
}

// quoteGitValue quotes v as a git configuration value: in double quotes,
// with its backslashes and double quotes escaped, so '#', ';' and spaces
// stay part of it.
func quoteGitValue(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}
