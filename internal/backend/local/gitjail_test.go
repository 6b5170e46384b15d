package local

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/backendtest"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

// The git staging jail, checked with real git under real Landlock: every
// refusal has its control beside it, and each effect is looked for at the
// far end (files on the host), not in git's answer.

// requireGit fails t on a host without git, which make deps installs.
func requireGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("requires git (scripts/deps.sh installs it): %v", err)
	}
}

// hostRepo makes a repository with a work tree at dir with two commits on
// main and returns their ids, newest first.
func hostRepo(t *testing.T, dir string) []string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testutil.HostGit(t, dir, "init", "-q")
	for i, c := range []string{"one", "two"} {
		if err := os.WriteFile(filepath.Join(dir, c+".txt"), []byte(c+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		testutil.HostGit(t, dir, "add", ".")
		testutil.HostGit(t, dir, "commit", "-q", "-m", fmt.Sprintf("commit %d", i+1))
	}
	return strings.Fields(testutil.HostGit(t, dir, "log", "--format=%H"))
}

// gitBox is a started local sandbox and a shell in it.
type gitBox struct {
	t  *testing.T
	ws string
	cl *agentclient.Client
}

// startGitBox starts sandbox sp over dataDir with a driver listing repos.
func startGitBox(t *testing.T, dataDir string, repos []string, sp sandbox.Spec) *gitBox {
	t.Helper()
	d := openWith(t, dataDir, repos)
	inst, err := d.Start(t.Context(), sp)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(func() {
		if err := d.Destroy(context.Background(), sp.ID); err != nil {
			t.Errorf("Destroy = %v", err)
		}
	})
	cl := agentclient.New(inst.ID, inst.Dial)
	t.Cleanup(func() { cl.Close() })
	return &gitBox{t: t, ws: filepath.Join(dataDir, string(sp.ID), "workspace"), cl: cl}
}

// sh runs cmd in the workspace with env over the sandbox's, and returns its
// exit code and output (stdout, then stderr).
func (g *gitBox) sh(cmd string, env map[string]string) (int, string) {
	g.t.Helper()
	res, err := g.cl.Exec(g.t.Context(), sandbox.ExecRequest{Shell: cmd, Env: env, Timeout: time.Minute}, false, nil)
	if err != nil {
		g.t.Fatalf("Exec(%q) = %v", cmd, err)
	}
	return res.ExitCode, strings.TrimSpace(string(res.Stdout) + string(res.Stderr))
}

// must runs cmd and fails the test unless it exits 0; it returns stdout and
// stderr.
func (g *gitBox) must(cmd string) string {
	g.t.Helper()
	code, out := g.sh(cmd, nil)
	if code != 0 {
		g.t.Fatalf("%q exited %d: %s", cmd, code, out)
	}
	return out
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// A repository above the workspace is never found by git in it: not one
// Landlock hides, and not one it lets the sandbox read (a listed one) either.
func TestGitCeiling(t *testing.T) {
	requireGit(t)
	for _, listed := range []bool{false, true} {
		t.Run(fmt.Sprintf("listed=%v", listed), func(t *testing.T) {
			top := t.TempDir()
			hostRepo(t, top)
			before := testutil.TreeHash(t, filepath.Join(top, ".git"))
			var repos []string
			if listed {
				repos = []string{top} // readable: only the ceiling stops discovery
			}
			g := startGitBox(t, filepath.Join(top, "data"), repos, backendtest.Spec())
			if code, out := g.sh("git rev-parse --show-toplevel", nil); code == 0 {
				t.Errorf("git in the workspace found the repository %q above it", out)
			}
			if code, out := g.sh("git status", nil); code == 0 || !strings.Contains(out, "not a git repository") {
				t.Errorf("git status in the workspace = %d %q, want not a git repository", code, out)
			}
			if listed {
				// Control: the caller can lift the ceiling (its own env), and
				// git then finds the readable repository above: what the
				// ceiling stopped.
				if code, out := g.sh("git rev-parse --show-toplevel", map[string]string{"GIT_CEILING_DIRECTORIES": ""}); code != 0 || out != top {
					t.Errorf("without the ceiling, git rev-parse --show-toplevel = %d %q, want %s", code, out, top)
				}
			}
			// Control: a repository of the workspace's own is found.
			if out := g.must("git init -q && git rev-parse --show-toplevel"); out != g.ws {
				t.Errorf("after git init, --show-toplevel = %q, want the workspace %s", out, g.ws)
			}
			if after := testutil.TreeHash(t, filepath.Join(top, ".git")); after != before {
				t.Errorf("the repository above the workspace changed")
			}
		})
	}
}

// The daemon's user's global git configuration (~/.gitconfig, and
// ~/.config/git/config) and the system's do not act in a local sandbox,
// even where Landlock lets it read them; the sandbox repository's own
// configuration does.
func TestGitHostConfigIgnored(t *testing.T) {
	requireGit(t)
	home := t.TempDir()
	hostRepo(t, home) // listed below: readable in the sandbox, as a HOME under a system dir would be
	dataDir := t.TempDir()
	sp := backendtest.Spec()
	ws := filepath.Join(dataDir, string(sp.ID), "workspace") // known before Start: the canaries land there
	hooks := filepath.Join(home, "hooks")
	if err := os.Mkdir(hooks, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hooks, "post-commit"), []byte("#!/bin/sh\ntouch "+ws+"/hook-canary\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		".gitconfig": "[alias]\n\tcanary = !touch " + ws + "/alias-canary\n[core]\n\thooksPath = " + hooks + "\n" +
			"[url \"" + home + "\"]\n\tinsteadOf = https://example.invalid/repo\n",
		".config/git/config": "[alias]\n\txdgcanary = !touch " + ws + "/xdg-canary\n",
		"sysconfig":          "[alias]\n\tsyscanary = !touch " + ws + "/sys-canary\n",
	}
	for name, text := range files {
		p := filepath.Join(home, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", home) // the daemon's HOME, which the driver hands its sandboxes
	g := startGitBox(t, dataDir, []string{home}, sp)
	if g.ws != ws {
		t.Fatalf("workspace %s, want %s", g.ws, ws)
	}

	// Controls first: the planted files are readable in the sandbox, and git
	// reads them once the jail's variables are lifted.
	for _, c := range []struct {
		env  map[string]string
		key  string
		file string
	}{
		{map[string]string{"GIT_CONFIG_GLOBAL": filepath.Join(home, ".gitconfig")}, "alias.canary", ".gitconfig"},
		{map[string]string{"GIT_CONFIG_GLOBAL": filepath.Join(home, ".config/git/config")}, "alias.xdgcanary", ".config/git/config"},
		{map[string]string{"GIT_CONFIG_NOSYSTEM": "", "GIT_CONFIG_SYSTEM": filepath.Join(home, "sysconfig")}, "alias.syscanary", "sysconfig"},
	} {
		if code, out := g.sh("git config --get "+c.key, c.env); code != 0 || !strings.Contains(out, "touch") {
			t.Errorf("control: git config --get %s with %v = %d %q, want the planted %s read", c.key, c.env, code, out, c.file)
		}
	}

	// The jail: none of it is read.
	if code, out := g.sh("git config --show-origin --list", nil); code != 0 || strings.Contains(out, "file:"+home) || strings.Contains(out, "canary") {
		t.Errorf("git config --list = %d %q: want success and nothing from a file in %s", code, out, home)
	}
	if code, out := g.sh("git config --get alias.syscanary", map[string]string{"GIT_CONFIG_SYSTEM": filepath.Join(home, "sysconfig")}); code == 0 {
		t.Errorf("GIT_CONFIG_SYSTEM was read despite GIT_CONFIG_NOSYSTEM: %q", out)
	}
	g.must("git init -q repo && cd repo && git -c user.name=a -c user.email=a@example.invalid commit -q --allow-empty -m one")
	for _, alias := range []string{"canary", "xdgcanary"} {
		if code, out := g.sh("cd repo && git "+alias, nil); code == 0 {
			t.Errorf("git %s (a host alias) ran: %q", alias, out)
		}
	}
	if code, out := g.sh("git ls-remote https://example.invalid/repo", map[string]string{"GIT_TERMINAL_PROMPT": "0"}); code == 0 {
		t.Errorf("the host's url.insteadOf rewrote a URL to %s: %q", home, out)
	}
	for _, c := range []string{"hook-canary", "alias-canary", "xdg-canary", "sys-canary"} {
		if exists(filepath.Join(ws, c)) {
			t.Errorf("%s exists: the host's git configuration acted in the sandbox", c)
		}
	}

	// Control: the same settings in the sandbox repository's own
	// configuration act, and their canaries appear in the workspace.
	g.must("cd repo && git config alias.canary '!touch " + ws + "/alias-canary' && git canary")
	g.must("cd repo && git config core.hooksPath " + hooks + " && git -c user.name=a -c user.email=a@example.invalid commit -q --allow-empty -m two")
	for _, c := range []string{"alias-canary", "hook-canary"} {
		if !exists(filepath.Join(ws, c)) {
			t.Errorf("control: %s is missing: the repository's own configuration did not act", c)
		}
	}
}

// A listed repository clones into the workspace, with its history, whoever
// owns it; a push back fails and nothing in it changes; an unlisted one
// cannot be read.
func TestGitStaging(t *testing.T) {
	requireGit(t)
	root := t.TempDir()
	repo, bare, other := filepath.Join(root, "repo"), filepath.Join(root, "bare.git"), filepath.Join(root, "other")
	commits := hostRepo(t, repo)
	testutil.HostGit(t, root, "clone", "-q", "--bare", repo, bare)
	hostRepo(t, other)
	// git itself would refuse a push to the checked-out branch: let it, so
	// that only the jail stands in the way.
	testutil.HostGit(t, repo, "config", "receive.denyCurrentBranch", "ignore")
	chowned := os.Geteuid() == 0
	if chowned {
		// Another user's repositories: git refuses them as "dubious" unless
		// safe.directory names them.
		for _, r := range []string{repo, bare} {
			if err := chownTree(r, 12345, 12345); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := map[string]string{repo: testutil.TreeHash(t, repo), bare: testutil.TreeHash(t, bare), other: testutil.TreeHash(t, other)}
	g := startGitBox(t, t.TempDir(), []string{repo, bare}, backendtest.Spec())

	// Control: the listed repositories clone, by path and by file:// URL,
	// and the clone holds the host's history.
	g.must("git clone -q " + repo + " clone")
	g.must("git clone -q file://" + bare + " clone-bare")
	for _, c := range []string{"clone", "clone-bare"} {
		if got := strings.Fields(g.must("git -C " + c + " log --format=%H main")); strings.Join(got, " ") != strings.Join(commits, " ") {
			t.Errorf("%s's history = %v, want the host's %v", c, got, commits)
		}
		if b, err := os.ReadFile(filepath.Join(g.ws, c, "two.txt")); err != nil || string(b) != "two\n" {
			t.Errorf("%s/two.txt on the host = %q, %v", c, b, err)
		}
	}
	// The clone is a copy: no object file is a hard link to the host's.
	if shared := sharedInodes(t, filepath.Join(repo, ".git", "objects"), filepath.Join(g.ws, "clone", ".git", "objects")); len(shared) > 0 {
		t.Errorf("the clone shares inodes with the host repository: %v", shared)
	}
	if chowned {
		// Control: without the sandbox's safe.directory, git refuses the
		// other user's repository.
		if code, out := g.sh("git clone -q "+repo+" refused", map[string]string{"GIT_CONFIG_GLOBAL": "/dev/null"}); code == 0 || !strings.Contains(out, "dubious ownership") {
			t.Errorf("a clone without safe.directory = %d %q, want dubious ownership", code, out)
		}
	}

	// The way back is closed: pushes, and writes by hand.
	g.must("cd clone && echo three > three.txt && git add . && git -c user.name=a -c user.email=a@example.invalid commit -q -m three")
	g.must("cd clone-bare && echo three > three.txt && git add . && git -c user.name=a -c user.email=a@example.invalid commit -q -m three")
	for _, cmd := range []string{
		"cd clone && git push origin main",
		"cd clone && git push origin main:refs/heads/new",
		"cd clone-bare && git push origin main",
		"cd clone-bare && git push origin main:refs/heads/new",
		"git -C " + repo + " -c user.name=a -c user.email=a@example.invalid commit --allow-empty -m x",
		"git -C " + repo + " config sbx.canary 1",
		"git -C " + repo + " tag canary",
		"echo x > " + repo + "/.git/hooks/post-checkout",
		"echo x >> " + repo + "/one.txt",
		"touch " + bare + "/canary",
	} {
		if code, out := g.sh(cmd, nil); code == 0 {
			t.Errorf("%q succeeded: %s", cmd, out)
		}
	}
	// Landlock, not git, refused the push: git says the remote could not write.
	if _, out := g.sh("cd clone && git push origin main", nil); !strings.Contains(out, "unable to create temporary object directory") && !strings.Contains(out, "insufficient permission") {
		t.Errorf("git push's refusal = %q, want the remote unable to write", out)
	}

	// An unlisted repository cannot be read, so not cloned.
	if code, out := g.sh("git clone -q "+other+" other", nil); code == 0 {
		t.Errorf("an unlisted repository was cloned: %s", out)
	}
	if code, _ := g.sh("cat "+other+"/one.txt", nil); code == 0 {
		t.Errorf("an unlisted repository's file was read")
	}

	for dir, h := range before {
		if got := testutil.TreeHash(t, dir); got != h {
			t.Errorf("%s changed", dir)
		}
	}
	if got := strings.Fields(testutil.HostGit(t, repo, "log", "--format=%H", "--all")); strings.Join(got, " ") != strings.Join(commits, " ") {
		t.Errorf("the host repository's history = %v, want %v unchanged", got, commits)
	}
}

func chownTree(dir string, uid, gid int) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// sharedInodes lists the files under b that are files under a.
func sharedInodes(t *testing.T, a, b string) []string {
	t.Helper()
	inodes := func(dir string) map[[2]uint64]string {
		out := map[[2]uint64]string{}
		filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil {
				return err
			}
			out[[2]uint64{st.Dev, st.Ino}] = p
			return nil
		})
		return out
	}
	ia, ib := inodes(a), inodes(b)
	if len(ib) == 0 {
		t.Fatalf("no files under %s", b)
	}
	var out []string
	for k, p := range ib {
		if _, ok := ia[k]; ok {
			out = append(out, p)
		}
	}
	return out
}

func TestOpenGitRepos(t *testing.T) {
	for _, r := range []string{"relative/repo", "/abs/with\nnewline"} {
		_, err := Open(t.Context(), backend.Options{DataDir: t.TempDir(), Exe: "/bin/true", GitRepos: []string{r}})
		if err == nil || !strings.Contains(err.Error(), "git repository") {
			t.Errorf("Open(GitRepos %q) = %v, want an error naming it", r, err)
		}
	}
	if _, err := Open(t.Context(), backend.Options{DataDir: t.TempDir(), Exe: "/bin/true", GitRepos: []string{"/srv/repo"}}); err != nil {
		t.Errorf("Open(GitRepos /srv/repo) = %v", err)
	}
}

func TestGitConfigText(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	got, err := gitConfig([]string{`/srv/a "b"\c;#d`, link})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"[safe]\n",
		"\tdirectory = \"/srv/a \\\"b\\\"\\\\c;#d\"\n",
		"\tdirectory = \"/srv/a \\\"b\\\"\\\\c;#d/.git\"\n",
		"\tdirectory = \"" + link + "\"\n",
		"\tdirectory = \"" + dir + "\"\n", // resolved
		"\tdirectory = \"" + dir + "/.git\"\n",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("gitConfig = %q, want it to hold %q", got, want)
		}
	}
	// git reads the quoted values back as they were listed.
	requireGit(t)
	f := filepath.Join(t.TempDir(), "config")
	os.WriteFile(f, got, 0o600)
	out, err := exec.Command("git", "config", "--file", f, "--get-all", "safe.directory").Output()
	if err != nil || !strings.Contains(string(out), "/srv/a \"b\"\\c;#d\n") {
		t.Errorf("git config --get-all safe.directory = %q, %v", out, err)
	}
	if strings.Contains(string(got), "*") {
		t.Errorf("gitConfig trusts every repository: %q", got)
	}
}
