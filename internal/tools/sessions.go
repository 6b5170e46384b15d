// This file implements the terminal session tools: exec_command and
// write_stdin (seed 000), shell_interactive (seed 004), list_sessions and
// close_session. A session is a process in a PTY that the sandbox's agent
// runs; the agent keeps its last output addressed by byte offsets (the
// cursor), so a read resumes exactly where the last one stopped, from any
// client, across disconnects and daemon restarts.

package tools

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/sandbox"
)

// sessionTag marks the processes that are terminal sessions.
const sessionTag = "sbx.session"

const (
	// sessionLog is how much of a session's latest output the agent keeps.
	sessionLog = 4 << 20
	// sessionReadMax bounds the output one call returns; the cursor pages on.
	sessionReadMax = 64 << 10
	// sessionLinger is how long a read waits for more once output came: an
	// echo and a program's immediate answer (a REPL's result, a prompt)
	// arrive in one read, at the cost of this much delay. Slower output is
	// the next read's.
	sessionLinger = time.Millisecond
	defaultGrace  = 2 * time.Second
	defaultWait   = 2 * time.Second
	maxWait       = 300 * time.Second
)

// cursors remembers, per session, where the last read ended: write_stdin
// without since continues from there. Lost on restart, where reads start from
// the oldest output the agent still holds.
type cursors struct {
	mu sync.Mutex
	m  map[string]int64
}

func (c *cursors) get(key string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

func (c *cursors) put(key string, v int64, alive bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	if alive {
		c.m[key] = v
	} else {
		delete(c.m, key)
	}
}

func sessionKey(id sandbox.ID, sid string) string { return string(id) + "/" + sid }

type sessionOut struct {
	SessionID string `json:"session_id"`
	PID       int    `json:"pid"`
	Stdout    string `json:"stdout"`
	Cursor    int64  `json:"cursor"`
	Status    string `json:"status"`
	ExitCode  *int   `json:"exit_code"`
	Alive     bool   `json:"alive"`
	// Skipped counts output bytes lost between the cursor asked for and this
	// output: the session printed more than the agent keeps.
	Skipped int64 `json:"skipped,omitempty"`
	// More says output is waiting beyond this answer's size bound.
	More bool `json:"more,omitempty"`
}

func (o sessionOut) Text() string {
	var b strings.Builder
	b.WriteString(o.Stdout)
	if o.Stdout != "" && !strings.HasSuffix(o.Stdout, "\n") {
		b.WriteString("\n")
	}
	if o.Skipped > 0 {
		fmt.Fprintf(&b, "[%d bytes of earlier output were lost]\n", o.Skipped)
	}
	if o.Alive {
		fmt.Fprintf(&b, "[session %s running (pid %d); cursor %d: send input with write_stdin]", o.SessionID, o.PID, o.Cursor)
	} else {
		fmt.Fprintf(&b, "[exited with code %d]", *o.ExitCode)
	}
	if o.More {
		fmt.Fprintf(&b, "\n[more output: call write_stdin with input \"\" and since=%d]", o.Cursor)
	}
	return b.String()
}

const sessionOutSchema = `{
  "type": "object",
  "properties": {
    "session_id": {"type": "string", "description": "The session: pass it to write_stdin."},
    "pid": {"type": "integer", "description": "Process id of the command in the sandbox."},
    "stdout": {"type": "string", "description": "Terminal output (stdout and stderr together, as a terminal shows them) after the cursor asked for."},
    "cursor": {"type": "integer", "description": "Where this output ends: pass it as since to read on from exactly here."},
    "status": {"type": "string", "enum": ["running", "exited"]},
    "exit_code": {"type": ["integer", "null"], "description": "The exit code once exited; null while running."},
    "alive": {"type": "boolean", "description": "True while the command runs."},
    "skipped": {"type": "integer", "description": "Bytes of output lost before this output (more than the 4 MiB kept)."},
    "more": {"type": "boolean", "description": "More output is waiting than one answer carries (64 KiB)."}
  },
  "required": ["session_id", "pid", "stdout", "cursor", "status", "exit_code", "alive"]
}`

func sessionTools() []*Tool {
	return []*Tool{execCommandTool(), writeStdinTool(), shellInteractiveTool(), listSessionsTool(), closeSessionTool()}
}

type execCommandIn struct {
	Command      string   `json:"command"`
	Rows         *int     `json:"rows"`
	Cols         *int     `json:"cols"`
	GraceSeconds *float64 `json:"grace_seconds"`
}

func execCommandTool() *Tool {
	return define(Tool{
		Name:  "exec_command",
		Title: "Run a command in a terminal",
		Description: "Run a command in a PTY (a real terminal) in the sandbox. A command that finishes within " +
			"grace_seconds (default 2) returns its output (stdout) and exit_code directly. A long-lived one (a " +
			"server, a REPL such as python3 or bash -i, a watcher, a prompt) keeps running and returns alive: true " +
			"with a session_id: send it keystrokes and read its new output with write_stdin. Output is addressed " +
			"by cursor: each answer's cursor is where the next read starts. Sessions survive disconnects; see " +
			"list_sessions and close_session.",
		Capability: CapShell,
		Input: []byte(`{
  "type": "object",
  "properties": {
    "command": {"type": "string", "description": "Command to run in a PTY (by /bin/sh -c)."},
    "rows": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 24, "description": "PTY rows. Default 24."},
    "cols": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 80, "description": "PTY columns. Default 80."},
    "grace_seconds": {"type": "number", "minimum": 0, "maximum": 300, "default": 2, "description": "How long to wait for a quick command to finish before returning a live session_id. Default 2."}
  },
  "required": ["command"],
  "additionalProperties": false
}`),
		Output: []byte(sessionOutSchema),
	}, func(ctx context.Context, c *Call, in execCommandIn) (sessionOut, error) {
		return c.startSession(ctx, in)
	})
}

func (c *Call) startSession(ctx context.Context, in execCommandIn) (sessionOut, error) {
	rows, err := intInRange("rows", in.Rows, 24, 1, 1000)
	if err != nil {
		return sessionOut{}, err
	}
	cols, err := intInRange("cols", in.Cols, 80, 1, 1000)
	if err != nil {
		return sessionOut{}, err
	}
	grace, err := secondsInRange("grace_seconds", in.GraceSeconds, defaultGrace, maxWait)
	if err != nil {
		return sessionOut{}, err
	}
	env, err := c.toolEnv(ctx)
	if err != nil {
		return sessionOut{}, err
	}
	var started *sandbox.ProcessInfo
	_, err = c.M().Exec(ctx, c.Sandbox, sandbox.ExecRequest{Shell: in.Command, Background: true, KeepStdinOpen: true,
		Pty: &sandbox.PtySize{Rows: uint16(rows), Cols: uint16(cols)}, OutputLogBytes: sessionLog, Tag: sessionTag,
		Env: merged(map[string]string{"TERM": "xterm-256color"}, env), Timeout: c.M().Policy().MaxExecTimeout},
		false, func(ev sandbox.ExecEvent) error {
			if ev.Started != nil {
				p := *ev.Started
				started = &p
			}
			return nil
		})
	if err != nil {
		return sessionOut{}, err
	}
	if started == nil {
		return sessionOut{}, fmt.Errorf("%w: the agent did not report the session's start", sandbox.ErrAgentLost)
	}
	return c.readSession(ctx, started.ID, 0, grace, true)
}

// readSession reads session sid's output from since for up to wait. With
// untilExit it reads on until the command exits or wait passes (exec_command's
// grace), else it returns once output came (write_stdin).
func (c *Call) readSession(ctx context.Context, sid string, since int64, wait time.Duration, untilExit bool) (sessionOut, error) {
	out := sessionOut{SessionID: sid, Cursor: since}
	deadline := time.Now().Add(wait)
	var data []byte
	first := true
	for {
		left := max(time.Until(deadline), 0)
		var ch sandbox.OutputChunk
		err := c.M().Call(ctx, c.Tool, c.Sandbox, func(cl *agentclient.Client) error {
			var err error
			ch, err = cl.ReadOutput(ctx, sid, out.Cursor, left, sessionLinger, int64(sessionReadMax-len(data)))
			return err
		})
		if err != nil {
			return sessionOut{}, sessionErr(sid, err)
		}
		if first && ch.Start > out.Cursor {
			out.Skipped = ch.Start - out.Cursor
		}
		first = false
		data = append(data, ch.Data...)
		out.Cursor = ch.Cursor
		out.Alive = ch.Alive
		if ch.Result != nil {
			code := ch.Result.ExitCode
			out.ExitCode = &code
			out.PID = ch.Result.PID
		}
		full := len(data) >= sessionReadMax
		if !ch.Alive || full || left == 0 || !untilExit {
			out.More = full
			break
		}
	}
	out.Stdout = string(data)
	out.Status = "running"
	if !out.Alive {
		out.Status = "exited"
		if out.ExitCode == nil {
			code := -1
			out.ExitCode = &code
		}
	}
	if out.PID == 0 {
		if p, err := c.M().Process(ctx, c.Sandbox, sid); err == nil {
			out.PID = p.PID
		}
	}
	c.set.cursors.put(sessionKey(c.Sandbox, sid), out.Cursor, out.Alive || out.More)
	return out, nil
}

// sessionErr names the session in the agent's errors about it.
func sessionErr(sid string, err error) error {
	if errors.Is(err, sandbox.ErrNotFound) && !strings.Contains(err.Error(), "sandbox not found") {
		return fmt.Errorf("%w: session_id: no session %q in this sandbox (exec_command starts one; list_sessions lists them)", sandbox.ErrNotFound, truncate(sid, 80))
	}
	return err
}

type writeStdinIn struct {
	SessionID   string   `json:"session_id"`
	Input       *string  `json:"input"`
	Since       *int64   `json:"since"`
	WaitSeconds *float64 `json:"wait_seconds"`
}

func writeStdinTool() *Tool {
	return define(Tool{
		Name:  "write_stdin",
		Title: "Type into a terminal session",
		Description: "Send characters to a running exec_command session's terminal and read its fresh output. " +
			"Append \\n to submit a line; control characters work as typed (\\u0003 is Ctrl-C, \\u0004 Ctrl-D). " +
			"Returns the output after since (default: where the last read of this session ended), waiting up to " +
			"wait_seconds (default 2) for some to come, and the new cursor, alive and exit_code. Input \"\" only " +
			"reads, also after the command exited.",
		Capability: CapShell,
		Input: []byte(`{
  "type": "object",
  "properties": {
    "session_id": {"type": "string", "description": "Session id from a prior exec_command that is still alive."},
    "input": {"type": "string", "description": "Characters to write to stdin. Append \\n to submit a line. \"\" only reads."},
    "since": {"type": "integer", "minimum": 0, "description": "Cursor from the previous read; returns only output produced after it."},
    "wait_seconds": {"type": "number", "minimum": 0, "maximum": 300, "default": 2, "description": "How long to wait for new output before returning. Default 2; 0 returns at once."}
  },
  "required": ["session_id", "input"],
  "additionalProperties": false
}`),
		Output: []byte(sessionOutSchema),
	}, runWriteStdin)
}

func runWriteStdin(ctx context.Context, c *Call, in writeStdinIn) (sessionOut, error) {
	if in.SessionID == "" {
		return sessionOut{}, sandbox.Invalid("session_id", "is empty")
	}
	wait, err := secondsInRange("wait_seconds", in.WaitSeconds, defaultWait, maxWait)
	if err != nil {
		return sessionOut{}, err
	}
	since := c.set.cursors.get(sessionKey(c.Sandbox, in.SessionID))
	if in.Since != nil {
		if since = *in.Since; since < 0 {
			return sessionOut{}, sandbox.Invalid("since", "%d is below 0", since)
		}
	}
	if in.Input != nil && *in.Input != "" {
		if err := c.M().WriteStdin(ctx, c.Sandbox, in.SessionID, []byte(*in.Input), false); err != nil {
			return sessionOut{}, c.exitedErr(ctx, in.SessionID, sessionErr(in.SessionID, err))
		}
	}
	return c.readSession(ctx, in.SessionID, since, wait, false)
}

// exitedErr explains a write to a session that has ended.
func (c *Call) exitedErr(ctx context.Context, sid string, err error) error {
	p, perr := c.M().Process(ctx, c.Sandbox, sid)
	if perr != nil || p.Running || p.Result == nil {
		return err
	}
	return fmt.Errorf("%w: session %s has exited (exit code %d); its output can still be read with input \"\"",
		sandbox.ErrWrongState, sid, p.Result.ExitCode)
}

// secondsInRange returns *v seconds (def when nil) after checking 0 ≤ v ≤ hi.
func secondsInRange(name string, v *float64, def, hi time.Duration) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	if math.IsNaN(*v) || *v < 0 || *v > hi.Seconds() {
		return 0, sandbox.Invalid(name, "%g is outside the range 0–%g", *v, hi.Seconds())
	}
	return time.Duration(*v * float64(time.Second)), nil
}

type shellInteractiveIn struct {
	SessionID   string   `json:"session_id"`
	Command     string   `json:"command"`
	Input       string   `json:"input"`
	WaitSeconds *float64 `json:"wait_seconds"`
}

func shellInteractiveTool() *Tool {
	return define(Tool{
		Name:  "shell_interactive",
		Title: "Interactive shell",
		Description: "An interactive shell in a terminal. Without session_id it starts one (bash -i, or command if " +
			"given) and returns its session_id and first output; with session_id it types input (append \\n to run " +
			"a line) and returns the new output. Shell state (cwd, variables, background jobs) persists in the " +
			"session. The same sessions as exec_command/write_stdin.",
		Capability: CapShell,
		Input: []byte(`{
  "type": "object",
  "properties": {
    "session_id": {"type": "string", "description": "A session to continue; omit to start a new shell."},
    "command": {"type": "string", "description": "Program to start instead of bash -i (new sessions only)."},
    "input": {"type": "string", "description": "Characters to type; append \\n to submit a line."},
    "wait_seconds": {"type": "number", "minimum": 0, "maximum": 300, "default": 2, "description": "How long to wait for output. Default 2."}
  },
  "additionalProperties": false
}`),
		Output: []byte(sessionOutSchema),
	}, func(ctx context.Context, c *Call, in shellInteractiveIn) (sessionOut, error) {
		if in.SessionID == "" {
			cmd := in.Command
			if cmd == "" {
				cmd = "exec bash -i 2>&1 || exec sh -i"
			}
			out, err := c.startSession(ctx, execCommandIn{Command: cmd, GraceSeconds: in.WaitSeconds})
			if err != nil || in.Input == "" || !out.Alive {
				return out, err
			}
			in.SessionID = out.SessionID
		} else if in.Command != "" {
			return sessionOut{}, sandbox.Invalid("command", "starts a new session: give it without session_id")
		}
		return runWriteStdin(ctx, c, writeStdinIn{SessionID: in.SessionID, Input: &in.Input, WaitSeconds: in.WaitSeconds})
	})
}

type listSessionsIn struct{}

type sessionInfo struct {
	SessionID string `json:"session_id"`
	PID       int    `json:"pid"`
	Command   string `json:"command"`
	Alive     bool   `json:"alive"`
	ExitCode  *int   `json:"exit_code"`
	StartedAt string `json:"started_at"`
}

type listSessionsOut struct {
	Sessions []sessionInfo `json:"sessions"`
}

func (o listSessionsOut) Text() string {
	if len(o.Sessions) == 0 {
		return "No sessions"
	}
	var b strings.Builder
	for _, s := range o.Sessions {
		state := "running"
		if !s.Alive {
			state = fmt.Sprintf("exited %d", *s.ExitCode)
		}
		fmt.Fprintf(&b, "%s pid %d %s: %s\n", s.SessionID, s.PID, state, s.Command)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func listSessionsTool() *Tool {
	return define(Tool{
		Name:        "list_sessions",
		Title:       "List terminal sessions",
		Description: "List the terminal sessions of the sandbox (started by exec_command or shell_interactive): id, pid, command, whether it runs, exit code.",
		Capability:  CapShell,
		ReadOnly:    true,
		Input:       []byte(`{"type": "object", "properties": {}, "additionalProperties": false}`),
		Output: []byte(`{
  "type": "object",
  "properties": {
    "sessions": {"type": "array", "items": {"type": "object", "properties": {
      "session_id": {"type": "string"}, "pid": {"type": "integer"}, "command": {"type": "string"},
      "alive": {"type": "boolean"}, "exit_code": {"type": ["integer", "null"]}, "started_at": {"type": "string"}
    }, "required": ["session_id", "pid", "command", "alive", "exit_code", "started_at"]}}
  },
  "required": ["sessions"]
}`),
	}, func(ctx context.Context, c *Call, _ listSessionsIn) (listSessionsOut, error) {
		ps, err := c.M().Processes(ctx, c.Sandbox)
		if err != nil {
			return listSessionsOut{}, err
		}
		out := listSessionsOut{Sessions: []sessionInfo{}}
		for _, p := range ps {
			if p.Tag != sessionTag {
				continue
			}
			s := sessionInfo{SessionID: p.ID, PID: p.PID, Command: commandOf(p.Argv), Alive: p.Running,
				StartedAt: p.StartedAt.UTC().Format(time.RFC3339)}
			if p.Result != nil {
				code := p.Result.ExitCode
				s.ExitCode = &code
			}
			out.Sessions = append(out.Sessions, s)
		}
		sort.Slice(out.Sessions, func(i, j int) bool { return out.Sessions[i].StartedAt < out.Sessions[j].StartedAt })
		return out, nil
	})
}

// commandOf shows a session's command as it was given.
func commandOf(argv []string) string {
	if len(argv) == 3 && argv[0] == "/bin/sh" && argv[1] == "-c" {
		return argv[2]
	}
	return strings.Join(argv, " ")
}

type closeSessionIn struct {
	SessionID string `json:"session_id"`
}

type closeSessionOut struct {
	SessionID string `json:"session_id"`
	Outcome   string `json:"outcome"`
}

func (o closeSessionOut) Text() string { return "session " + o.SessionID + ": " + o.Outcome }

func closeSessionTool() *Tool {
	return define(Tool{
		Name:        "close_session",
		Title:       "Close a terminal session",
		Description: "End a terminal session: its command and everything it started are killed. Closing one that already exited is not an error.",
		Capability:  CapShell,
		Destructive: true,
		Input: []byte(`{
  "type": "object",
  "properties": {"session_id": {"type": "string", "description": "The session to close."}},
  "required": ["session_id"],
  "additionalProperties": false
}`),
		Output: []byte(`{
  "type": "object",
  "properties": {
    "session_id": {"type": "string"},
    "outcome": {"type": "string", "enum": ["signaled", "already_exited", "stopped"]}
  },
  "required": ["session_id", "outcome"]
}`),
	}, func(ctx context.Context, c *Call, in closeSessionIn) (closeSessionOut, error) {
		if in.SessionID == "" {
			return closeSessionOut{}, sandbox.Invalid("session_id", "is empty")
		}
		outcome, err := c.M().Signal(ctx, c.Sandbox, in.SessionID, int(syscall.SIGKILL))
		if err != nil {
			return closeSessionOut{}, sessionErr(in.SessionID, err)
		}
		c.set.cursors.put(sessionKey(c.Sandbox, in.SessionID), 0, false)
		return closeSessionOut{SessionID: in.SessionID, Outcome: outcome}, nil
	})
}
