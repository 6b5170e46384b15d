// This file holds seed 004's git tools: git_clone, git_commit, git_push and
// git_status, each git run in the sandbox with its arguments as argv.

package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// gitEnv is the environment git runs with: it never asks for a password or a
// host key on a terminal that is not there (it fails instead), and its
// messages are in English (the tools read some of them).
var gitEnv = map[string]string{
	"GIT_TERMINAL_PROMPT": "0",
	"GIT_SSH_COMMAND":     "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new",
}

// gitFixed is what git runs with whatever env_set persisted: English
// messages, which the tools read.
var gitFixed = map[string]string{"LC_ALL": "C", "LANGUAGE": ""}

// Time bounds of git's commands.
const (
	gitNetTimeout   = 10 * time.Minute // clone, push
	gitLocalTimeout = 2 * time.Minute
)

const gitMissing = "git is not installed in this sandbox's template"

// git runs git with args in dir and returns its result; a non-zero exit is
// the caller's to judge.
func (c *Call) git(ctx context.Context, dir string, timeout time.Duration, args ...string) (*sandbox.ExecResult, error) {
	return c.gitOut(ctx, dir, timeout, 0, args...)
}

// gitOut is git with output bounded at output bytes per stream (0: the
// tools' bound).
func (c *Call) gitOut(ctx context.Context, dir string, timeout time.Duration, output int64, args ...string) (*sandbox.ExecResult, error) {
	res, err := c.run(ctx, command{argv: append([]string{"git"}, args...), cwd: dir, env: gitEnv, fixed: gitFixed, timeout: timeout, output: output})
	if errors.Is(err, errNotInstalled) {
		return nil, notInstalled(gitMissing)
	}
	if err != nil {
		return nil, err
	}
	if res.Reason == sandbox.ReasonTimeout {
		return nil, fmt.Errorf("%w: git %s ran past %s and was killed; its output:\n%s", sandbox.ErrTimeout, args[0], timeout, outputTail(res, 2000))
	}
	return res, nil
}

// gitFailed is the error of git command what that exited non-zero, classed
// by git's message, quoting it.
func gitFailed(what string, res *sandbox.ExecResult) error {
	msg := outputTail(res, 3000)
	return fmt.Errorf("%w: %s failed (exit code %d): %s", gitClass(msg), what, res.ExitCode, msg)
}

// gitClass is the error class of git's message msg.
func gitClass(msg string) error {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "not a git repository"), strings.Contains(m, "no such file or directory"),
		strings.Contains(m, "does not exist"), strings.Contains(m, "repository not found"),
		strings.Contains(m, "does not appear to be a git repository"), strings.Contains(m, "not found in upstream"),
		strings.Contains(m, "cannot change to"), strings.Contains(m, "did not match any"),
		strings.Contains(m, "does not match any"):
		return sandbox.ErrNotFound
	case strings.Contains(m, "already exists"):
		return sandbox.ErrExists
	case strings.Contains(m, "could not resolve host"), strings.Contains(m, "connection refused"),
		strings.Contains(m, "network is unreachable"), strings.Contains(m, "unable to access"),
		strings.Contains(m, "could not read from remote repository"), strings.Contains(m, "connection timed out"):
		return sandbox.ErrUnavailable
	case strings.Contains(m, "authentication failed"), strings.Contains(m, "permission denied"),
		strings.Contains(m, "could not read username"), strings.Contains(m, "insufficient permission"),
		strings.Contains(m, "unable to create temporary object directory"): // a read-only remote (local's staging jail)
		return sandbox.ErrDenied
	}
	return sandbox.ErrWrongState
}

// gitName checks a remote or branch name given as an argument: git takes a
// leading '-' as an option, and the rest git checks itself.
func gitName(field, v string) error {
	switch {
	case strings.HasPrefix(v, "-"):
		return sandbox.Invalid(field, "%q starts with '-'", truncate(v, 80))
	case strings.ContainsAny(v, "\x00\n\r\t "):
		return sandbox.Invalid(field, "%q contains a space or a control character", truncate(v, 80))
	case len(v) > 255:
		return sandbox.Invalid(field, "is longer than 255 bytes")
	}
	return nil
}

// gitBranchName checks a branch name argument: gitName's rules and the
// characters no ref name may hold (git check-ref-format).
func gitBranchName(field, v string) error {
	if err := gitName(field, v); err != nil {
		return err
	}
	if strings.ContainsAny(v, ":~^?*[\\") || strings.Contains(v, "..") || strings.Contains(v, "@{") {
		return sandbox.Invalid(field, "%q is not a valid branch name", truncate(v, 80))
	}
	return nil
}

// repoDir checks a repository path argument and returns it absolute.
func (c *Call) repoDir(ctx context.Context, p string) (string, error) {
	return c.existingDir(ctx, "path", p)
}

// gitBranch returns the branch HEAD is on in dir ("" when detached).
func (c *Call) gitBranch(ctx context.Context, dir string) (string, error) {
	res, err := c.git(ctx, dir, gitLocalTimeout, "symbolic-ref", "--quiet", "--short", "HEAD")
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		if res.ExitCode == 1 { // detached
			return "", nil
		}
		return "", gitFailed("git symbolic-ref HEAD", res)
	}
	return strings.TrimSpace(string(res.Stdout)), nil
}

// gitHead returns the commit HEAD names in dir ("" in a repository with no
// commit).
func (c *Call) gitHead(ctx context.Context, dir string) (string, error) {
	res, err := c.git(ctx, dir, gitLocalTimeout, "rev-parse", "--quiet", "--verify", "HEAD^{commit}")
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return "", nil
	}
	return strings.TrimSpace(string(res.Stdout)), nil
}

// ---- git_clone ----

type gitCloneIn struct {
	URL    string `json:"url"`
	Path   string `json:"path"`
	Branch string `json:"branch"`
	Depth  *int   `json:"depth"`
}

type gitCloneOut struct {
	Path   string `json:"path"`
	URL    string `json:"url"`
	Branch string `json:"branch"`
	Commit string `json:"commit"`
	Output string `json:"output"`
}

func (o gitCloneOut) Text() string {
	if o.Commit == "" {
		return fmt.Sprintf("cloned %s into %s (an empty repository)", o.URL, o.Path)
	}
	return fmt.Sprintf("cloned %s into %s: branch %s at %s", o.URL, o.Path, o.Branch, o.Commit)
}

// repoName is the directory git clone makes for url: its last path element
// without .git (and without a trailing / or /.git).
func repoName(url string) string {
	u := strings.TrimRight(url, "/")
	u = strings.TrimSuffix(u, "/.git")
	u = strings.TrimRight(u, "/")
	if i := strings.LastIndexAny(u, "/:"); i >= 0 {
		u = u[i+1:]
	}
	u = strings.TrimSuffix(u, ".git")
	if u == "." || u == ".." {
		return ""
	}
	return u
}

// ---- git_commit ----

type gitCommitIn struct {
	Path        string `json:"path"`
	Message     string `json:"message"`
	AddAll      *bool  `json:"add_all"`
	AuthorName  string `json:"author_name"`
	AuthorEmail string `json:"author_email"`
}

type gitCommitOut struct {
	Path    string `json:"path"`
	Commit  string `json:"commit"`
	Branch  string `json:"branch"`
	Summary string `json:"summary"`
}

func (o gitCommitOut) Text() string {
	return fmt.Sprintf("committed %s on %s\n%s", o.Commit, cmpOr(o.Branch, "(detached HEAD)"), o.Summary)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// The identity a commit is made with when neither the call nor the
// repository's git configuration names one.
const (
	defaultAuthorName  = "sbx agent"
	defaultAuthorEmail = "agent@sbx.invalid"
)

// ---- git_push ----

type gitPushIn struct {
	Path   string `json:"path"`
	Remote string `json:"remote"`
	Branch string `json:"branch"`
}

type gitPushOut struct {
	Path   string `json:"path"`
	Remote string `json:"remote"`
	Branch string `json:"branch"`
	Output string `json:"output"`
}

func (o gitPushOut) Text() string {
	return fmt.Sprintf("pushed %s to %s\n%s", o.Branch, o.Remote, o.Output)
}

// ---- git_status ----

type gitStatusIn struct {
	Path string `json:"path"`
}

// gitFile is one entry of git status.
type gitFile struct {
	Path     string `json:"path"`
	OrigPath string `json:"orig_path,omitempty"`
	Index    string `json:"index"`
	Worktree string `json:"worktree"`
	Status   string `json:"status"`
	Staged   bool   `json:"staged"`
}

type gitStatusOut struct {
	Path      string    `json:"path"`
	Branch    string    `json:"branch"`
	Detached  bool      `json:"detached"`
	NoCommits bool      `json:"no_commits"`
	Upstream  string    `json:"upstream,omitempty"`
	Ahead     int       `json:"ahead"`
	Behind    int       `json:"behind"`
	Gone      bool      `json:"upstream_gone,omitempty"`
	Clean     bool      `json:"clean"`
	Files     []gitFile `json:"files"`
	Truncated bool      `json:"truncated"`
}

func (o gitStatusOut) Text() string {
	var b strings.Builder
	switch {
	case o.Detached:
		b.WriteString("HEAD detached")
	default:
		b.WriteString("on branch " + o.Branch)
	}
	if o.NoCommits {
		b.WriteString(" (no commits yet)")
	}
	if o.Upstream != "" {
		fmt.Fprintf(&b, ", tracking %s", o.Upstream)
		if o.Gone {
			b.WriteString(" (gone)")
		}
		if o.Ahead > 0 || o.Behind > 0 {
			fmt.Fprintf(&b, " [ahead %d, behind %d]", o.Ahead, o.Behind)
		}
	}
	b.WriteString("\n")
	if o.Clean {
		b.WriteString("nothing to commit, working tree clean\n")
	}
	for _, f := range o.Files {
		fmt.Fprintf(&b, "%s%s %s", f.Index, f.Worktree, f.Path)
		if f.OrigPath != "" {
			fmt.Fprintf(&b, " (from %s)", f.OrigPath)
		}
		fmt.Fprintf(&b, "\t%s\n", f.Status)
	}
	return b.String()
}

// git_status's bounds: files listed, and bytes of git's output read.
const (
	gitStatusMax    = 1000
	gitStatusOutput = 8 << 20
)

var aheadBehind = regexp.MustCompile(`\[(?:ahead (\d+))?(?:, )?(?:behind (\d+))?(gone)?\]$`)

// parseGitStatus parses `git status --porcelain=v1 -b -z`: a branch header,
// then "XY path" entries, each NUL-terminated, a rename's or copy's path
// followed by its original one.
func parseGitStatus(out string) (gitStatusOut, error) {
	st := gitStatusOut{Files: []gitFile{}}
	fields := strings.Split(out, "\x00")
	if len(fields) > 0 && fields[len(fields)-1] == "" {
		fields = fields[:len(fields)-1]
	}
	if len(fields) == 0 || !strings.HasPrefix(fields[0], "## ") {
		return st, fmt.Errorf("git status printed no branch line: %q", truncate(out, 200))
	}
	parseBranchLine(&st, strings.TrimPrefix(fields[0], "## "))
	for i := 1; i < len(fields); i++ {
		e := fields[i]
		if len(e) < 4 || e[2] != ' ' {
			return st, fmt.Errorf("git status entry %q is not \"XY path\"", truncate(e, 200))
		}
		f := gitFile{Index: e[0:1], Worktree: e[1:2], Path: e[3:]}
		if f.Index == "R" || f.Index == "C" || f.Worktree == "R" || f.Worktree == "C" {
			if i+1 < len(fields) {
				i++
				f.OrigPath = fields[i]
			}
		}
		f.Status, f.Staged = gitStatusWord(f.Index[0], f.Worktree[0])
		if len(st.Files) >= gitStatusMax {
			st.Truncated = true
			continue
		}
		st.Files = append(st.Files, f)
	}
	st.Clean = len(st.Files) == 0
	return st, nil
}

// parseBranchLine reads the branch header of porcelain v1 (without "## "):
// "main", "main...origin/main [ahead 1, behind 2]", "No commits yet on
// main" (older git: "Initial commit on main"), "HEAD (no branch)".
func parseBranchLine(st *gitStatusOut, h string) {
	for _, p := range []string{"No commits yet on ", "Initial commit on "} {
		if b, ok := strings.CutPrefix(h, p); ok {
			st.NoCommits = true
			h = b
		}
	}
	if h == "HEAD (no branch)" {
		st.Detached = true
		return
	}
	if m := aheadBehind.FindStringSubmatch(h); m != nil && m[0] != "[]" {
		st.Ahead, _ = strconv.Atoi(m[1])
		st.Behind, _ = strconv.Atoi(m[2])
		st.Gone = m[3] != ""
		h = strings.TrimSpace(strings.TrimSuffix(h, m[0]))
	}
	st.Branch, st.Upstream, _ = strings.Cut(h, "...")
}

// gitStatusWord names the change of status code XY and whether it is staged.
func gitStatusWord(x, y byte) (string, bool) {
	switch string([]byte{x, y}) {
	case "??":
		return "untracked", false
	case "!!":
		return "ignored", false
	case "DD", "AU", "UD", "UA", "DU", "AA", "UU":
		return "conflicted", false
	}
	code, staged := y, false
	if x != ' ' {
		code, staged = x, true
	}
	word := map[byte]string{'M': "modified", 'A': "added", 'D': "deleted", 'R': "renamed", 'C': "copied", 'T': "type_changed"}[code]
	if word == "" {
		word = "changed"
	}
	if staged && y != ' ' {
		word += ", with unstaged changes"
	}
	return word, staged
}

// ---- the tools ----

func gitTools() []*Tool {
	return []*Tool{
		define(Tool{
			Name:  "git_clone",
			Title: "Clone a git repository",
			Description: "Clone a git repository into the sandbox (git clone, run inside the sandbox, so its network " +
				"policy applies). url is anything git clone takes: https://…, ssh://…, git@host:owner/repo.git, or " +
				"a path or file:// URL of a repository in the sandbox. path is where to clone to (relative paths " +
				"start at /workspace; default: the repository's name, as git names it, in /workspace); it must not " +
				"exist or be an empty directory. branch checks out that branch or tag instead of the remote's " +
				"default; depth makes a shallow clone of that many commits. Git never prompts: a repository that " +
				"needs credentials fails unless they are configured in the sandbox (e.g. a token in the URL). " +
				"Stops after 10 minutes. Returns path, url, branch, commit (the HEAD commit; empty for an empty " +
				"repository) and git's output.",
			Capability:  CapGit,
			Destructive: true,
			Input: json.RawMessage(`{
  "type": "object",
  "required": ["url"],
  "properties": {
    "url": {"type": "string", "description": "The repository, e.g. \"https://github.com/owner/repo.git\" or \"/srv/repo.git\"."},
    "path": {"type": "string", "description": "Directory to clone into. Default: /workspace/<repository name>."},
    "branch": {"type": "string", "description": "Branch or tag to check out (git clone --branch)."},
    "depth": {"type": "integer", "minimum": 1, "maximum": 1000000, "description": "Shallow clone of this many commits (git clone --depth)."}
  },
  "additionalProperties": false
}`),
			Output: json.RawMessage(`{
  "type": "object",
  "required": ["path", "url", "branch", "commit", "output"],
  "properties": {
    "path": {"type": "string", "description": "The clone's absolute path."},
    "url": {"type": "string"},
    "branch": {"type": "string", "description": "The branch checked out (empty when HEAD is detached, e.g. at a tag)."},
    "commit": {"type": "string", "description": "The commit checked out; empty for an empty repository."},
    "output": {"type": "string", "description": "git's messages."}
  }
}`),
		}, runGitClone),
		define(Tool{
			Name:  "git_commit",
			Title: "Commit changes",
			Description: "Record a commit in the git repository at path (relative paths start at /workspace). With " +
				"add_all (default true) every change in the working tree is staged first (git add -A: new, " +
				"modified and deleted files, honoring .gitignore); with add_all false only what is already staged " +
				"is committed. message is the commit message. author_name and author_email set the author (and " +
				"committer) of this commit; without them the repository's git configuration is used, or \"" +
				defaultAuthorName + " <" + defaultAuthorEmail + ">\" when it has none. Nothing to commit is an error. " +
				"Returns commit (the new commit's full hash), branch and summary (git's one-line report and file " +
				"counts).",
			Capability:  CapGit,
			Destructive: true,
			Input: json.RawMessage(`{
  "type": "object",
  "required": ["path", "message"],
  "properties": {
    "path": {"type": "string", "description": "The repository (its working tree or any directory in it)."},
    "message": {"type": "string", "description": "The commit message."},
    "add_all": {"type": "boolean", "default": true, "description": "Stage every change first (git add -A). Default true."},
    "author_name": {"type": "string", "description": "Author name for this commit."},
    "author_email": {"type": "string", "description": "Author email for this commit."}
  },
  "additionalProperties": false
}`),
			Output: json.RawMessage(`{
  "type": "object",
  "required": ["path", "commit", "branch", "summary"],
  "properties": {
    "path": {"type": "string"},
    "commit": {"type": "string", "description": "The new commit's full hash."},
    "branch": {"type": "string", "description": "The branch committed to (empty on a detached HEAD)."},
    "summary": {"type": "string", "description": "git commit's report, e.g. \"[main 1a2b3c4] Fix\\n 1 file changed, 2 insertions(+)\"."}
  }
}`),
		}, runGitCommit),
		define(Tool{
			Name:  "git_push",
			Title: "Push commits to a remote",
			Description: "Push a branch of the git repository at path to a remote (git push, run inside the sandbox, so " +
				"its network policy applies). remote defaults to origin. branch is the local branch to push, to the " +
				"remote branch of the same name; by default the current branch, which then tracks the remote's " +
				"(--set-upstream). No force push: a push the remote rejects (e.g. not a fast-forward) is an error " +
				"quoting git. Git never prompts: a remote that needs credentials fails unless they are configured " +
				"in the sandbox. Stops after 10 minutes. Returns remote, branch and git's output.",
			Capability:  CapGit,
			Destructive: true,
			Input: json.RawMessage(`{
  "type": "object",
  "required": ["path"],
  "properties": {
    "path": {"type": "string", "description": "The repository."},
    "remote": {"type": "string", "default": "origin", "description": "The remote's name or URL. Default origin."},
    "branch": {"type": "string", "description": "The local branch to push. Default: the current branch."}
  },
  "additionalProperties": false
}`),
			Output: json.RawMessage(`{
  "type": "object",
  "required": ["path", "remote", "branch", "output"],
  "properties": {
    "path": {"type": "string"},
    "remote": {"type": "string"},
    "branch": {"type": "string"},
    "output": {"type": "string", "description": "git's report, e.g. \"To /srv/repo.git\\n   1a2b3c4..5d6e7f8  main -> main\"."}
  }
}`),
		}, runGitPush),
		define(Tool{
			Name:  "git_status",
			Title: "Show a repository's status",
			Description: "Show the status of the git repository at path (relative paths start at /workspace), from " +
				"git status --porcelain=v1 -b: branch (empty with detached true when HEAD is detached), no_commits " +
				"for a repository without commits, upstream with ahead/behind counts, clean, and files: each " +
				"changed or untracked file with path (relative to the repository's top), orig_path for a rename or " +
				"copy, the two status letters index (staged) and worktree (unstaged) as git prints them (M " +
				"modified, A added, D deleted, R renamed, C copied, T type changed, U unmerged, ? untracked, " +
				"space unchanged), a status word (modified, added, deleted, renamed, copied, untracked, " +
				"conflicted, …) and staged. An untracked directory is listed once, ending in /. At most 1000 files.",
			Capability: CapGit,
			ReadOnly:   true,
			Input: json.RawMessage(`{
  "type": "object",
  "required": ["path"],
  "properties": {
    "path": {"type": "string", "description": "The repository."}
  },
  "additionalProperties": false
}`),
			Output: json.RawMessage(`{
  "type": "object",
  "required": ["path", "branch", "detached", "no_commits", "ahead", "behind", "clean", "files", "truncated"],
  "properties": {
    "path": {"type": "string"},
    "branch": {"type": "string"},
    "detached": {"type": "boolean"},
    "no_commits": {"type": "boolean"},
    "upstream": {"type": "string", "description": "The upstream branch, e.g. origin/main."},
    "ahead": {"type": "integer", "description": "Commits on the branch not on its upstream."},
    "behind": {"type": "integer", "description": "Commits on the upstream not on the branch."},
    "upstream_gone": {"type": "boolean", "description": "The upstream branch no longer exists."},
    "clean": {"type": "boolean", "description": "No changed or untracked files."},
    "files": {"type": "array", "items": {
      "type": "object",
      "required": ["path", "index", "worktree", "status", "staged"],
      "properties": {
        "path": {"type": "string"},
        "orig_path": {"type": "string"},
        "index": {"type": "string", "description": "Status letter in the index (X of XY)."},
        "worktree": {"type": "string", "description": "Status letter in the working tree (Y of XY)."},
        "status": {"type": "string"},
        "staged": {"type": "boolean"}
      }
    }},
    "truncated": {"type": "boolean"}
  }
}`),
		}, runGitStatus),
	}
}

func runGitClone(ctx context.Context, c *Call, in gitCloneIn) (gitCloneOut, error) {
	switch {
	case strings.TrimSpace(in.URL) == "":
		return gitCloneOut{}, sandbox.Invalid("url", "is empty")
	case strings.HasPrefix(in.URL, "-"):
		return gitCloneOut{}, sandbox.Invalid("url", "%q starts with '-'", truncate(in.URL, 80))
	case strings.ContainsAny(in.URL, "\x00\n\r"):
		return gitCloneOut{}, sandbox.Invalid("url", "contains a NUL byte or a line break")
	}
	dest := in.Path
	if dest == "" {
		if dest = repoName(in.URL); dest == "" {
			return gitCloneOut{}, sandbox.Invalid("path", "cannot be derived from url %q: give path", truncate(in.URL, 80))
		}
	}
	dest, err := sandboxPath("path", dest)
	if err != nil {
		return gitCloneOut{}, err
	}
	if dest == "/" {
		return gitCloneOut{}, sandbox.Invalid("path", "cannot be /")
	}
	args := []string{"clone"}
	if in.Branch != "" {
		if err := gitBranchName("branch", in.Branch); err != nil {
			return gitCloneOut{}, err
		}
		args = append(args, "--branch", in.Branch)
	}
	if in.Depth != nil {
		d, err := intInRange("depth", in.Depth, 0, 1, 1000000)
		if err != nil {
			return gitCloneOut{}, err
		}
		args = append(args, "--depth", strconv.Itoa(d))
	}
	// git clone makes dest's parents itself; it runs where dest will be, in
	// /workspace, else at the root (local's tree has no /workspace until
	// something makes it), and is given dest relative to where it runs: the
	// commands of a local sandbox see the host's paths, not the sandbox's.
	cwd := Workspace
	if _, err := c.existingDir(ctx, "path", Workspace); errors.Is(err, sandbox.ErrNotFound) {
		cwd = "/"
	}
	relDest, err := filepath.Rel(cwd, dest)
	if err != nil {
		return gitCloneOut{}, err
	}
	args = append(args, "--", in.URL, relDest)
	res, err := c.git(ctx, cwd, gitNetTimeout, args...)
	if err != nil {
		return gitCloneOut{}, err
	}
	if res.ExitCode != 0 {
		return gitCloneOut{}, gitFailed("git clone", res)
	}
	out := gitCloneOut{Path: dest, URL: in.URL, Output: strings.TrimSpace(string(res.Stderr) + string(res.Stdout))}
	if out.Branch, err = c.gitBranch(ctx, dest); err != nil {
		return gitCloneOut{}, err
	}
	if out.Commit, err = c.gitHead(ctx, dest); err != nil {
		return gitCloneOut{}, err
	}
	return out, nil
}

func runGitCommit(ctx context.Context, c *Call, in gitCommitIn) (gitCommitOut, error) {
	if strings.TrimSpace(in.Message) == "" {
		return gitCommitOut{}, sandbox.Invalid("message", "is empty")
	}
	if len(in.Message) > 64<<10 || strings.IndexByte(in.Message, 0) >= 0 {
		return gitCommitOut{}, sandbox.Invalid("message", "must be at most 64 KiB with no NUL byte")
	}
	for _, f := range []struct{ name, v string }{{"author_name", in.AuthorName}, {"author_email", in.AuthorEmail}} {
		if strings.ContainsAny(f.v, "\x00\n\r<>") || len(f.v) > 255 {
			return gitCommitOut{}, sandbox.Invalid(f.name, "%q may not hold <, >, line breaks or NUL, nor pass 255 bytes", truncate(f.v, 80))
		}
	}
	dir, err := c.repoDir(ctx, in.Path)
	if err != nil {
		return gitCommitOut{}, err
	}
	// The identity: the call's, else the repository's configuration, else the default.
	name, email := in.AuthorName, in.AuthorEmail
	if name == "" || email == "" {
		res, err := c.git(ctx, dir, gitLocalTimeout, "config", "--get-regexp", `^user\.(name|email)$`)
		if err != nil {
			return gitCommitOut{}, err
		}
		if res.ExitCode > 1 { // 1: none set
			return gitCommitOut{}, gitFailed("git config", res)
		}
		have := map[string]bool{}
		for _, l := range strings.Split(string(res.Stdout), "\n") {
			if k, v, ok := strings.Cut(l, " "); ok && strings.TrimSpace(v) != "" {
				have[k] = true
			}
		}
		if name == "" && !have["user.name"] {
			name = defaultAuthorName
		}
		if email == "" && !have["user.email"] {
			email = defaultAuthorEmail
		}
	}
	var ident []string
	if name != "" {
		ident = append(ident, "-c", "user.name="+name)
	}
	if email != "" {
		ident = append(ident, "-c", "user.email="+email)
	}
	if in.AddAll == nil || *in.AddAll {
		res, err := c.git(ctx, dir, gitLocalTimeout, "add", "-A")
		if err != nil {
			return gitCommitOut{}, err
		}
		if res.ExitCode != 0 {
			return gitCommitOut{}, gitFailed("git add -A", res)
		}
	}
	res, err := c.git(ctx, dir, gitLocalTimeout, append(ident, "commit", "--no-edit", "--message", in.Message)...)
	if err != nil {
		return gitCommitOut{}, err
	}
	if res.ExitCode != 0 {
		if out := string(res.Stdout); strings.Contains(out, "nothing to commit") || strings.Contains(out, "no changes added to commit") ||
			strings.Contains(out, "nothing added to commit") {
			return gitCommitOut{}, fmt.Errorf("%w: nothing to commit in %s: %s", sandbox.ErrWrongState, dir, outputTail(res, 1500))
		}
		return gitCommitOut{}, gitFailed("git commit", res)
	}
	out := gitCommitOut{Path: dir, Summary: strings.TrimSpace(string(res.Stdout))}
	if out.Commit, err = c.gitHead(ctx, dir); err != nil {
		return gitCommitOut{}, err
	}
	if out.Branch, err = c.gitBranch(ctx, dir); err != nil {
		return gitCommitOut{}, err
	}
	return out, nil
}

func runGitPush(ctx context.Context, c *Call, in gitPushIn) (gitPushOut, error) {
	remote := cmpOr(in.Remote, "origin")
	if err := gitName("remote", remote); err != nil {
		return gitPushOut{}, err
	}
	if in.Branch != "" {
		if err := gitBranchName("branch", in.Branch); err != nil {
			return gitPushOut{}, err
		}
	}
	dir, err := c.repoDir(ctx, in.Path)
	if err != nil {
		return gitPushOut{}, err
	}
	branch := in.Branch
	args := []string{"push"}
	if branch == "" {
		if branch, err = c.gitBranch(ctx, dir); err != nil {
			return gitPushOut{}, err
		}
		if branch == "" {
			return gitPushOut{}, fmt.Errorf("%w: HEAD is detached in %s: give branch, or check out a branch first", sandbox.ErrWrongState, dir)
		}
		args = append(args, "--set-upstream")
	}
	args = append(args, "--", remote, "refs/heads/"+branch+":refs/heads/"+branch)
	res, err := c.git(ctx, dir, gitNetTimeout, args...)
	if err != nil {
		return gitPushOut{}, err
	}
	if res.ExitCode != 0 {
		return gitPushOut{}, gitFailed("git push", res)
	}
	return gitPushOut{Path: dir, Remote: remote, Branch: branch,
		Output: strings.TrimSpace(strings.TrimSpace(string(res.Stdout)) + "\n" + strings.TrimSpace(string(res.Stderr)))}, nil
}

func runGitStatus(ctx context.Context, c *Call, in gitStatusIn) (gitStatusOut, error) {
	dir, err := c.repoDir(ctx, in.Path)
	if err != nil {
		return gitStatusOut{}, err
	}
	res, err := c.gitOut(ctx, dir, gitLocalTimeout, gitStatusOutput, "status", "--porcelain=v1", "-b", "-z")
	if err != nil {
		return gitStatusOut{}, err
	}
	if res.ExitCode != 0 {
		return gitStatusOut{}, gitFailed("git status", res)
	}
	if res.Truncated {
		// The cut output is not all of the list; git status -z has no bound of its own.
		return gitStatusOut{}, fmt.Errorf("%w: git status printed more than %d MiB; look at %s with shell_exec (git status --short | head)",
			sandbox.ErrTooLarge, gitStatusOutput>>20, dir)
	}
	st, err := parseGitStatus(string(res.Stdout))
	if err != nil {
		return gitStatusOut{}, err
	}
	st.Path = dir
	return st, nil
}
