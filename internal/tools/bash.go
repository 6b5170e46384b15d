// This file implements sandbox_bash (seed 000): one shell command, its output,
// and the workspace files it created or changed.

package tools

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

type bashOut struct {
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	ExitCode  int    `json:"exit_code"`
	Truncated bool   `json:"truncated"`
	// Files are the workspace files the command created or changed.
	Files      []string          `json:"files"`
	FileCount  int               `json:"file_count"`
	LocalPaths map[string]string `json:"local_paths"`
	// FilesTruncated says the workspace was too large to look through whole.
	FilesTruncated bool `json:"files_truncated,omitempty"`
}

func (o bashOut) Text() string {
	s := commandText(o.Stdout, o.Stderr, o.ExitCode)
	if o.FileCount > 0 {
		s += fmt.Sprintf("\nfiles written (%d):", o.FileCount)
		for _, f := range o.Files {
			s += "\n  " + f
		}
	}
	return s
}

var bashInput = []byte(`{
  "type": "object",
  "properties": {
    "command": {"type": "string", "description": "Shell command to execute, run by /bin/sh -c (use bash -c '…' for bash syntax). Pipes, redirections, && and ; work."},
    "description": {"type": "string", "description": "Short human-readable label of what the command does, e.g. 'Installing dependencies'. Recorded, not executed."},
    "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": 3600, "default": 60, "description": "Command timeout in seconds, 1–3600. Default 60; raise it for long installs, builds or data exports. On timeout the command and everything it started are killed and exit_code is 124."},
    "cwd": {"type": "string", "description": "Working directory (absolute, or relative to /workspace). Default: the sandbox home, /workspace."}
  },
  "required": ["command"],
  "additionalProperties": false
}`)

var bashOutput = []byte(`{
  "type": "object",
  "properties": {
    "stdout": {"type": "string", "description": "Captured standard output (head and tail with a notice when truncated; the notice names the file in the sandbox holding all of it)."},
    "stderr": {"type": "string", "description": "Captured standard error, truncated the same way."},
    "exit_code": {"type": "integer", "description": "The command's exit code; 124 on timeout, 128+n when killed by signal n."},
    "truncated": {"type": "boolean", "description": "True if stdout or stderr was clipped to the size limit."},
    "files": {"type": "array", "items": {"type": "string"}, "description": "Workspace files this command created or changed (absolute paths)."},
    "file_count": {"type": "integer", "description": "How many files are in files."},
    "local_paths": {"type": "object", "additionalProperties": {"type": "string"}, "description": "For each file in files, a download path on the sbx daemon (GET it with the API key)."},
    "files_truncated": {"type": "boolean", "description": "True if the workspace was too large to look through whole, so files may be incomplete."}
  },
  "required": ["stdout", "stderr", "exit_code", "truncated", "files", "file_count", "local_paths"]
}`)

func bashTool() *Tool {
	return define(Tool{
		Name:  "sandbox_bash",
		Title: "Run a shell command",
		Description: "Run one shell command in the sandbox and return its output. Returns stdout, stderr, exit_code, " +
			"whether the output was truncated, and the workspace files the command created or changed (files, " +
			"file_count, and local_paths: a download path for each). The sandbox keeps its files, installed packages " +
			"and working tree between calls. Output larger than 64 KiB per stream keeps its head and tail; the " +
			"notice in it names a file in the sandbox with the whole output (page through it with read_file). " +
			"For interactive programs (REPLs, servers, prompts) use exec_command instead.",
		Capability: CapShell,
		Input:      bashInput,
		Output:     bashOutput,
	}, runBash)
}

func runBash(ctx context.Context, c *Call, in bashIn) (bashOut, error) {
	timeout, err := intInRange("timeout_seconds", in.TimeoutSeconds, 60, 1, 3600)
	if err != nil {
		return bashOut{}, err
	}
	env, err := c.toolEnv(ctx)
	if err != nil {
		return bashOut{}, err
	}
	since := c.set.now()
	res, err := c.M().Exec(ctx, c.Sandbox, sandbox.ExecRequest{Shell: in.Command, Cwd: in.Cwd, Env: env,
		Timeout: time.Duration(timeout) * time.Second, OutputLimitBytes: toolOutputLimit}, false, nil)
	if err != nil {
		return bashOut{}, err
	}
	out := bashOut{Stdout: string(res.Stdout), Stderr: string(res.Stderr) + endNotice(res),
		ExitCode: res.ExitCode, Truncated: res.Truncated, Files: []string{}, LocalPaths: map[string]string{}}
	files, more, err := c.changed(ctx, since)
	if err != nil {
		return bashOut{}, err
	}
	if files != nil { // never null: the schema says an array
		out.Files = files
	}
	out.FileCount, out.FilesTruncated = len(files), more
	for _, f := range files {
		out.LocalPaths[f] = DownloadPath(c.Sandbox, f)
	}
	return out, nil
}

// DownloadPath is the daemon's download route for path in sandbox id.
func DownloadPath(id sandbox.ID, path string) string {
	return "/v1/sandboxes/" + string(id) + "/files/download?path=" + url.QueryEscape(path)
}
