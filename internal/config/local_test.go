package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeRepo makes the layout of a git repository at dir, without git: a
// work tree with .git, or a bare repository.
func fakeRepo(t *testing.T, dir string, bare bool) string {
	t.Helper()
	gd := filepath.Join(dir, ".git")
	if bare {
		gd = dir
	}
	for _, d := range []string{"objects", "refs/heads"} {
		if err := os.MkdirAll(filepath.Join(gd, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(gd, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLocalConfig(t *testing.T) {
	dir := t.TempDir()
	a, b := fakeRepo(t, filepath.Join(dir, "a"), false), fakeRepo(t, filepath.Join(dir, "b.git"), true)
	file := filepath.Join(dir, "sbx.toml")
	os.WriteFile(file, []byte("[local]\ngit_repos = [\""+a+"\"]\n"), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"defaults", nil, nil, nil},
		{"file", []string{"--config", file}, nil, []string{a}},
		{"env over file", []string{"--config", file}, map[string]string{"SBX_LOCAL_GIT_REPOS": " " + b + " ,, " + a}, []string{b, a}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := load(tc.args, envOf(tc.env), 0)
			if err != nil {
				t.Fatal(err)
			}
			l.Config.DataDir = filepath.Join(dir, "data")
			if err := l.Config.Validate(); err != nil {
				t.Fatalf("Validate = %v", err)
			}
			if !slices.Equal(l.Config.Local.GitRepos, tc.want) {
				t.Errorf("Local.GitRepos = %q, want %q", l.Config.Local.GitRepos, tc.want)
			}
			// --print-config shows them, and reads back the same.
			out := filepath.Join(t.TempDir(), "printed.toml")
			os.WriteFile(out, []byte(l.Config.TOML()), 0o600)
			back, err := load([]string{"--config", out}, envOf(nil), 0)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(back.Config.Local.GitRepos, tc.want) {
				t.Errorf("the printed config reads back as %q, want %q", back.Config.Local.GitRepos, tc.want)
			}
		})
	}
}

func TestLocalConfigChecks(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	good := fakeRepo(t, filepath.Join(dir, "good"), false)
	bare := fakeRepo(t, filepath.Join(dir, "bare.git"), true)
	inData := fakeRepo(t, filepath.Join(data, "repo"), false)
	holdsData := fakeRepo(t, dir, false) // dir itself: the data dir is inside it
	plain := filepath.Join(dir, "plain")
	os.Mkdir(plain, 0o755)
	afile := filepath.Join(dir, "file")
	os.WriteFile(afile, nil, 0o644)
	linked := filepath.Join(dir, "linked")
	os.Mkdir(linked, 0o755)
	os.WriteFile(filepath.Join(linked, ".git"), []byte("gitdir: "+good+"/.git/worktrees/x\n"), 0o644)
	viaLink := filepath.Join(dir, "datalink")
	os.Symlink(data, viaLink)
	for _, tc := range []struct {
		repo string
		want string // fragments of the error; "" for none
	}{
		{good, ""},
		{bare, ""},
		{good + "/", ""},
		{"relative/repo", "is not an absolute path"},
		{filepath.Join(dir, "missing"), "cannot be read"},
		{plain, "is not a git repository"},
		{afile, "is not a directory"},
		{linked, "has a .git file"},
		{inData, "is inside data_dir"},
		{filepath.Join(viaLink, "repo"), "is inside data_dir"},
		{holdsData, "holds data_dir"},
		{"/srv/x\ny", "control character"},
	} {
		c := defaults(envOf(nil), 0)
		c.DataDir = data
		c.Local.GitRepos = []string{good, tc.repo}
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Validate(git_repos %q) = %v", tc.repo, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), "local.git_repos[1]: "+quote(tc.repo)) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Validate(git_repos %q) = %v, want local.git_repos[1] named, %s", tc.repo, err, tc.want)
		}
	}
}

func quote(s string) string { return strings.ReplaceAll(`"`+s+`"`, "\n", `\n`) }
