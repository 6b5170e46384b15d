package sandbox

import "time"

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
	Argv          []string
	Shell         string
	Cwd           string
	Env           map[string]string
	Stdin         []byte
	KeepStdinOpen bool
	Timeout       time.Duration
	// Background returns once the process started; it keeps running.
	Background       bool
	OutputLimitBytes int64
	Tag              string
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
type ExecEvent struct {
	Started *ProcessInfo
	Stdout  []byte
	Stderr  []byte
	Result  *ExecResult
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
