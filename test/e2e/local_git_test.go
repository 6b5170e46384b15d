package e2e

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/internal/testutil"
)

// The local backend's git staging jail, end to end: a daemon listing a host
// repository in SBX_LOCAL_GIT_REPOS, and seed 004's git tools called over
// HTTP on a local sandbox. The clone is a staging copy with the host's
// history; a push back is refused, and the host repository is checked on
// the host, byte for byte; the operator's two ways back (a bundle through
// sbx cp, a fetch from the workspace's host path) bring the commit home.

func TestLocalGitStaging(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("requires git (scripts/deps.sh installs it): %v", err)
	}
	// The host repository: two commits on main, another user's when the test
	// can make it so (git then needs the sandbox's safe.directory).
	repo := filepath.Join(t.TempDir(), "project")
	os.Mkdir(repo, 0o755)
	testutil.HostGit(t, repo, "init", "-q")
	for _, f := range []string{"one", "two"} {
		os.WriteFile(filepath.Join(repo, f+".txt"), []byte(f+"\n"), 0o644)
		testutil.HostGit(t, repo, "add", ".")
		testutil.HostGit(t, repo, "commit", "-q", "-m", "add "+f)
	}
	// git itself would refuse a push to the checked-out branch: let it, so
	// that only the jail stands in the way.
	testutil.HostGit(t, repo, "config", "receive.denyCurrentBranch", "ignore")
	history := testutil.HostGit(t, repo, "log", "--format=%H")
	head := strings.Fields(history)[0]
	if os.Geteuid() == 0 {
		err := filepath.WalkDir(repo, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, 12345, 12345)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	before := testutil.TreeHash(t, repo)

	d := startDaemon(t, "", "SANDBOX_BACKEND=local", "SBX_POOL_SIZE=0", "SBX_LOCAL_GIT_REPOS="+repo)
	defer d.cleanup()
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	// git_clone makes the staging copy, with the host's history (control).
	var clone struct{ Path, Branch, Commit string }
	ok004(t, d, id, "git_clone", map[string]any{"url": repo}, &clone)
	if clone.Path != "/workspace/project" || clone.Branch != "main" || clone.Commit != head {
		t.Errorf("git_clone = %+v, want /workspace/project on main at %s", clone, head)
	}
	log := d.exec(id, map[string]any{"command": "git log --format=%H", "cwd": "/workspace/project"})
	if log.ExitCode != 0 || strings.TrimSpace(log.Stdout) != history {
		t.Errorf("the clone's history = %d %q %q, want the host's %q", log.ExitCode, log.Stdout, log.Stderr, history)
	}
	var byURL struct{ Commit string }
	ok004(t, d, id, "git_clone", map[string]any{"url": "file://" + repo, "path": "by-url"}, &byURL)
	if byURL.Commit != head {
		t.Errorf("git_clone of file://%s = %+v, want %s", repo, byURL, head)
	}

	// A change, committed in the staging copy.
	ok004(t, d, id, "file_write", map[string]any{"file": "project/three.txt", "content": "three\n"}, nil)
	var commit struct{ Commit, Branch string }
	ok004(t, d, id, "git_commit", map[string]any{"path": "project", "message": "add three"}, &commit)
	if commit.Branch != "main" || len(commit.Commit) != 40 || commit.Commit == head {
		t.Fatalf("git_commit = %+v", commit)
	}

	// git_push back to the host repository is refused: it is read-only to
	// the sandbox.
	msg := fail004(t, d, id, "git_push", map[string]any{"path": "project"}, 403, "git push failed", repo)
	t.Logf("git_push refused: %s", msg)
	if after := testutil.TreeHash(t, repo); after != before {
		t.Errorf("the host repository changed under the sandbox's push")
	}
	if got := testutil.HostGit(t, repo, "log", "--format=%H", "--all"); got != history {
		t.Errorf("the host repository's history = %q, want %q", got, history)
	}

	// The operator's ways back, from the host. A bundle, through sbx cp:
	// (The README's commands.)
	if _, stderr, code := d.cli("exec", "--cwd", "/workspace/project", id, "--", "git", "bundle", "create", "../project.bundle", "main"); code != 0 {
		t.Fatalf("sbx exec git bundle = %d: %s", code, stderr)
	}
	out := t.TempDir()
	if _, stderr, code := d.cli("cp", id+":/workspace/project.bundle", filepath.Join(out, "project.bundle")); code != 0 {
		t.Fatalf("sbx cp of the bundle = %d: %s", code, stderr)
	}
	staging := filepath.Join(out, "staging")
	testutil.HostGit(t, out, "clone", "-q", repo, staging)
	testutil.HostGit(t, staging, "fetch", "-q", filepath.Join(out, "project.bundle"), "main:from-bundle")
	if got := testutil.HostGit(t, staging, "rev-parse", "from-bundle"); got != commit.Commit {
		t.Errorf("the bundle's main = %s, want the sandbox's commit %s", got, commit.Commit)
	}
	// Or a fetch from the workspace's host path: the local driver's data
	// dir, the sandbox's id, its workspace (the sandbox's /).
	ws := filepath.Join(d.dataDir, "backends", "local", id, "workspace")
	testutil.HostGit(t, staging, "fetch", "-q", filepath.Join(ws, "workspace", "project"), "main:from-workspace")
	if got := testutil.HostGit(t, staging, "rev-parse", "from-workspace"); got != commit.Commit {
		t.Errorf("the workspace's main = %s, want the sandbox's commit %s", got, commit.Commit)
	}
	if after := testutil.TreeHash(t, repo); after != before {
		t.Errorf("the host repository changed")
	}
}

// A git_repos entry that cannot be a listed repository stops the daemon,
// naming it.
func TestLocalGitReposRefused(t *testing.T) {
	dir := t.TempDir()
	notRepo := filepath.Join(dir, "plain")
	os.Mkdir(notRepo, 0o755)
	data := filepath.Join(dir, "data")
	inData := filepath.Join(data, "repo")
	os.MkdirAll(filepath.Join(inData, ".git", "objects"), 0o755)
	os.MkdirAll(filepath.Join(inData, ".git", "refs"), 0o755)
	os.WriteFile(filepath.Join(inData, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	for _, c := range []struct{ repo, want string }{
		{"relative/repo", "is not an absolute path"},
		{filepath.Join(dir, "missing"), "cannot be read"},
		{notRepo, "is not a git repository"},
		{inData, "is inside data_dir"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, sbxBin, "serve", "--data-dir", data, "--listen", "127.0.0.1:0", "--socket", filepath.Join(dir, "sbx.sock"))
		cmd.Env = append(os.Environ(), "SANDBOX_BACKEND=local", "SBX_LOCAL_GIT_REPOS="+c.repo)
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil || !strings.Contains(string(out), "local.git_repos[0]: \""+c.repo+"\"") || !strings.Contains(string(out), c.want) {
			t.Errorf("sbx serve with git_repos %q = %v\n%s\nwant it refused, naming the entry and %q", c.repo, err, out, c.want)
		}
	}
}
