package tools

import (
	"reflect"
	"testing"

	"sbx.dev/sbx/internal/sandbox"
)

func TestParseGitStatus(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     gitStatusOut
	}{
		{"no commits", "## No commits yet on main\x00", gitStatusOut{Branch: "main", NoCommits: true, Clean: true, Files: []gitFile{}}},
		{"old git's initial commit", "## Initial commit on master\x00?? a\x00", gitStatusOut{Branch: "master", NoCommits: true,
			Files: []gitFile{{Path: "a", Index: "?", Worktree: "?", Status: "untracked"}}}},
		{"clean with upstream", "## main...origin/main\x00", gitStatusOut{Branch: "main", Upstream: "origin/main", Clean: true, Files: []gitFile{}}},
		{"ahead and behind", "## dev...origin/dev [ahead 2, behind 13]\x00", gitStatusOut{Branch: "dev", Upstream: "origin/dev", Ahead: 2, Behind: 13, Clean: true, Files: []gitFile{}}},
		{"behind", "## dev...up/dev [behind 1]\x00", gitStatusOut{Branch: "dev", Upstream: "up/dev", Behind: 1, Clean: true, Files: []gitFile{}}},
		{"gone", "## dev...origin/dev [gone]\x00", gitStatusOut{Branch: "dev", Upstream: "origin/dev", Gone: true, Clean: true, Files: []gitFile{}}},
		{"detached", "## HEAD (no branch)\x00 M x.go\x00", gitStatusOut{Detached: true,
			Files: []gitFile{{Path: "x.go", Index: " ", Worktree: "M", Status: "modified"}}}},
		{"every kind", "## main\x00 M b\x00R  c\x00a\x00?? d/\x00?? new file\x00A  e\x00MM f\x00D  g\x00 D h\x00UU i\x00RM j k\x00i j\x00", gitStatusOut{Branch: "main", Files: []gitFile{
			{Path: "b", Index: " ", Worktree: "M", Status: "modified"},
			{Path: "c", OrigPath: "a", Index: "R", Worktree: " ", Status: "renamed", Staged: true},
			{Path: "d/", Index: "?", Worktree: "?", Status: "untracked"},
			{Path: "new file", Index: "?", Worktree: "?", Status: "untracked"},
			{Path: "e", Index: "A", Worktree: " ", Status: "added", Staged: true},
			{Path: "f", Index: "M", Worktree: "M", Status: "modified, with unstaged changes", Staged: true},
			{Path: "g", Index: "D", Worktree: " ", Status: "deleted", Staged: true},
			{Path: "h", Index: " ", Worktree: "D", Status: "deleted"},
			{Path: "i", Index: "U", Worktree: "U", Status: "conflicted"},
			{Path: "j k", OrigPath: "i j", Index: "R", Worktree: "M", Status: "renamed, with unstaged changes", Staged: true},
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseGitStatus(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
	for _, bad := range []string{"", " M x\x00", "## main\x00Mx\x00"} {
		if _, err := parseGitStatus(bad); err == nil {
			t.Errorf("parseGitStatus(%q) = nil error", bad)
		}
	}
}

func TestRepoName(t *testing.T) {
	for in, want := range map[string]string{
		"https://github.com/owner/repo.git":  "repo",
		"https://github.com/owner/repo":      "repo",
		"https://github.com/owner/repo/":     "repo",
		"git@github.com:owner/repo.git":      "repo",
		"/srv/git/project.git":               "project",
		"/srv/git/project/.git":              "project",
		"file:///tmp/origin.git":             "origin",
		"ssh://host:2222/path/to/thing.git/": "thing",
		"/":                                  "",
	} {
		if got := repoName(in); got != want {
			t.Errorf("repoName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGitClass(t *testing.T) {
	for msg, want := range map[string]error{
		"fatal: not a git repository (or any of the parent directories): .git":                                                         sandbox.ErrNotFound,
		"fatal: repository '/nope' does not exist":                                                                                     sandbox.ErrNotFound,
		"fatal: destination path 'x' already exists and is not an empty directory.":                                                    sandbox.ErrExists,
		"fatal: unable to access 'https://h/r.git/': Could not resolve host: h":                                                        sandbox.ErrUnavailable,
		" ! [rejected]        main -> main (fetch first)\nerror: failed to push some refs to '/r.git'":                                 sandbox.ErrWrongState,
		"error: remote unpack failed: unable to create temporary object directory\n ! [remote rejected] main -> main (unpacker error)": sandbox.ErrDenied,
		"error: insufficient permission for adding an object to repository database ./objects":                                         sandbox.ErrDenied,
	} {
		if got := gitClass(msg); got != want {
			t.Errorf("gitClass(%q) = %v, want %v", msg, got, want)
		}
	}
}
