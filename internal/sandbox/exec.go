package sandbox

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Exit reasons of a process (and, for agent_lost, of an exec whose agent died).
const (
	ReasonExited        = "exited"
	ReasonSignaled      = "signaled"
	ReasonTimeout       = "timeout"
	ReasonOOM           = "oom"
	ReasonKilled        = "killed"
	ReasonPidsExhausted = "pids_exhausted"
	ReasonDiskFull      = "disk_full"
	ReasonAgentLost     = "agent_lost"
)

// ExecRequest is an admitted exec: Timeout is set and within bounds.
type ExecRequest struct {
	// Exactly one of Argv (verbatim, no shell) and Shell (/bin/sh -c).
	Argv  []string
	Shell string
	Cwd   string
	Env   map[string]string
	// Secrets maps environment variables to the names of secrets of the
	// caller's API key (CreateRequest.Secrets); the manager resolves them
	// into Env before the agent sees the request.
	Secrets       map[string]string
	Stdin         []byte
	KeepStdinOpen bool
	Timeout       time.Duration
	// Background returns once the process started; it keeps running.
	Background       bool
	OutputLimitBytes int64
	Tag              string
	// StreamBounded asks a streamed exec for a bounded live view: the process
	// never waits for a slow reader, and what the reader misses is dropped
	// and reported (ExecEvent.Dropped). Without it a stream is complete: a
	// slow reader slows the process, bounded by its timeout.
	StreamBounded bool
	// Pty runs the command in a pseudo-terminal of this size: stdout then
	// carries the terminal's output, and stderr is empty.
	Pty *PtySize
	// OutputLogBytes keeps the last this many bytes of the process's output
	// addressed by cursor (ReadOutput); 0 keeps none.
	OutputLogBytes int64
}

// PtySize is a terminal's size in character cells.
type PtySize struct{ Rows, Cols uint16 }

// Command is what runs: Argv as is, or Shell run by /bin/sh -c. The one place a
// shell command becomes an argv.
func (r ExecRequest) Command() []string {
	if r.Shell != "" {
		return []string{"/bin/sh", "-c", r.Shell}
	}
	return r.Argv
}

// Check reports what is wrong with the request's shape, each problem naming
// its field as the HTTP API spells it: exactly one of a shell command and an
// argv, no empty program, no NUL byte anywhere the kernel takes a C string.
// Bounds and defaults are the policy's (Policy.AdmitExec, which calls Check).
func (r ExecRequest) Check() error {
	var errs []error
	switch {
	case r.Shell == "" && len(r.Argv) == 0:
		errs = append(errs, Invalid("command", "give command (run by /bin/sh -c) or argv (run as is)"))
	case r.Shell != "" && len(r.Argv) > 0:
		errs = append(errs, Invalid("command", "give command or argv, not both"))
	case len(r.Argv) > 0 && r.Argv[0] == "":
		errs = append(errs, Invalid("argv[0]", "is empty"))
	}
	if strings.IndexByte(r.Shell, 0) >= 0 {
		errs = append(errs, Invalid("command", "contains a NUL byte"))
	}
	for i, a := range r.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			errs = append(errs, Invalid(fmt.Sprintf("argv[%d]", i), "contains a NUL byte"))
		}
	}
	for k, v := range r.Env {
		if strings.IndexByte(k, 0) >= 0 || strings.IndexByte(v, 0) >= 0 {
			errs = append(errs, Invalid("env", "%q contains a NUL byte", truncate(strings.ReplaceAll(k, "\x00", ""), 80)))
		}
	}
	if strings.IndexByte(r.Cwd, 0) >= 0 {
		errs = append(errs, Invalid("cwd", "contains a NUL byte"))
	}
	return errors.Join(errs...)
}

// ExecResult is how a process ended and what it printed.
type ExecResult struct {
	ProcessID string
	PID       int
	// ExitCode is the command's own code; 128+n for signal n; 124 on timeout.
	ExitCode int
	Reason   string
	Signal   int
	Duration time.Duration
	// Stdout and Stderr hold head and tail with a notice of what was dropped
	// between them when Truncated; the full streams are at StdoutPath/StderrPath.
	Stdout, Stderr               []byte
	Truncated                    bool
	StdoutDropped, StderrDropped int64
	StdoutPath, StderrPath       string
	StdoutBytes, StderrBytes     int64
}

// ExecEvent is one event of a streamed exec: exactly one field is set.
// Stdout and Stderr are the caller's to read during the callback that
// receives the event only: the stream reuses their buffer for the next
// chunk, so a consumer that keeps output copies it.
type ExecEvent struct {
	Started *ProcessInfo
	Stdout  []byte
	Stderr  []byte
	Dropped *Dropped
	Result  *ExecResult
}

// Dropped says that Bytes of a stream's output were not delivered at this
// point of the stream.
type Dropped struct {
	Stream string // "stdout" or "stderr"
	Bytes  int64
}

// ProcessInfo describes a process the agent runs or ran.
type ProcessInfo struct {
	ID        string
	PID       int
	Argv      []string
	Cwd       string
	Tag       string
	Running   bool
	StartedAt time.Time
	Result    *ExecResult // set once exited
}

// Signal outcomes.
const (
	OutcomeStopped       = "stopped"
	OutcomeSignaled      = "signaled"
	OutcomeAlreadyExited = "already_exited"
)
