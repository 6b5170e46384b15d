// This file holds what the command tools share: output bounds, the text
// form of a command's result, and argument checks.

package tools

import (
	"fmt"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// Output bounds of the command tools: per stream, head and tail are kept and
// the whole stream is saved in the sandbox (read_file pages through it).
const toolOutputLimit = 64 << 10

// Workspace is the sandbox's working directory: where commands start and
// where sandbox_bash looks for the files a command wrote.
const Workspace = "/workspace"

// maxReportedFiles bounds the files one sandbox_bash result lists.
const maxReportedFiles = 1000

type bashIn struct {
	Command        string `json:"command"`
	Description    string `json:"description"`
	TimeoutSeconds *int   `json:"timeout_seconds"`
	Cwd            string `json:"cwd"`
}

// commandText renders a command's result for a model: stdout, stderr under a
// heading, and the exit code when it is not 0.
func commandText(stdout, stderr string, code int) string {
	s := stdout
	if stderr != "" {
		if s != "" && s[len(s)-1] != '\n' {
			s += "\n"
		}
		s += "[stderr]\n" + stderr
	}
	if code != 0 {
		if s != "" && s[len(s)-1] != '\n' {
			s += "\n"
		}
		s += fmt.Sprintf("[exit code %d]", code)
	}
	if s == "" {
		s = "(no output)"
	}
	return s
}

// endNotice says why a command ended when it did not end by itself.
func endNotice(res *sandbox.ExecResult) string {
	switch res.Reason {
	case sandbox.ReasonTimeout:
		return fmt.Sprintf("\n[sbx: timed out after %s; the command and its children were killed]\n", res.Duration.Round(time.Millisecond))
	case sandbox.ReasonOOM:
		return "\n[sbx: killed: the sandbox ran out of memory]\n"
	case sandbox.ReasonPidsExhausted:
		return "\n[sbx: the sandbox's process limit was reached]\n"
	case sandbox.ReasonDiskFull:
		return "\n[sbx: the sandbox's disk is full]\n"
	case sandbox.ReasonAgentLost:
		return "\n[sbx: the sandbox's agent was lost while the command ran]\n"
	}
	return ""
}

// intInRange returns *v (def when nil) after checking it lies in [lo, hi].
func intInRange(name string, v *int, def, lo, hi int) (int, error) {
	if v == nil {
		return def, nil
	}
	if *v < lo || *v > hi {
		return 0, sandbox.Invalid(name, "%d is outside the range %d–%d", *v, lo, hi)
	}
	return *v, nil
}
