// This file implements repl_execute (seed 000): a persistent Python session
// per sandbox (package repl), reached through the sandbox's agent.

package tools

import (
	"context"
	"fmt"
	"strings"
	"time"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/tools/repl"
)

type replIn struct {
	Code           string `json:"code"`
	TimeoutSeconds *int   `json:"timeout_seconds"`
	Restart        bool   `json:"restart"`
}

type replOut struct{ repl.Result }

func (o replOut) Text() string {
	r := o.Result
	var b strings.Builder
	if r.Restarted {
		fmt.Fprintf(&b, "[session restarted: %s]\n", r.Message)
	}
	b.WriteString(r.Stdout)
	if r.Stderr != "" {
		fmt.Fprintf(&b, "[stderr]\n%s", r.Stderr)
	}
	if r.Value != "" {
		fmt.Fprintf(&b, "Out[%d]: %s\n", r.ExecutionCount, r.Value)
	}
	if r.Error != nil {
		b.WriteString(r.Error.Traceback)
		if !strings.HasSuffix(r.Error.Traceback, "\n") {
			b.WriteString("\n")
		}
	}
	if len(r.Images) > 0 {
		fmt.Fprintf(&b, "[%d figure(s) as PNG in images]\n", len(r.Images))
	}
	if r.Final != nil {
		fmt.Fprintf(&b, "FINAL: %s\n", *r.Final)
	}
	if r.TimedOut {
		b.WriteString("[the cell timed out and was interrupted]\n")
	}
	if b.Len() == 0 {
		return "(no output)"
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func replTools() []*Tool {
	return []*Tool{define(Tool{
		Name:  "repl_execute",
		Title: "Run Python in a persistent session",
		Description: "Run Python code in a persistent, Jupyter-like session of the sandbox: variables, imports and " +
			"loaded data stay between calls, so load big data once and work over it. Returns stdout, stderr, the " +
			"value of the last expression (value), an error with its traceback, and PNG/SVG images of matplotlib " +
			"figures left open. Built-ins: peek(obj, n=2000) previews large data; grep(pattern, text_or_var) " +
			"returns matching (line_number, line) pairs; chunk_indices(length, size, overlap=0) gives windows to " +
			"process in pieces; llm_query(prompt, system=None) asks a language model (through the sbx daemon; the " +
			"sandbox never holds a key) and returns its answer; FINAL(value) records the final answer, returned as " +
			"final. timeout_seconds (default 60, 1–3600) interrupts the cell with KeyboardInterrupt and keeps the " +
			"session; restart: true starts a fresh session first.",
		Capability: CapPython,
		Input: []byte(`{
  "type": "object",
  "properties": {
    "code": {"type": "string", "description": "Python code to run; a trailing expression's value is returned, as in Jupyter."},
    "timeout_seconds": {"type": "integer", "minimum": 1, "maximum": 3600, "default": 60, "description": "Interrupt the cell after this many seconds (the session and its state are kept). Default 60."},
    "restart": {"type": "boolean", "default": false, "description": "Start a fresh session first: every variable and import is lost."}
  },
  "required": ["code"],
  "additionalProperties": false
}`),
		Output: []byte(`{
  "type": "object",
  "properties": {
    "stdout": {"type": "string"},
    "stderr": {"type": "string"},
    "value": {"type": "string", "description": "repr of the last expression's value, when the cell ends with one (not None)."},
    "error": {"type": "object", "properties": {"name": {"type": "string"}, "value": {"type": "string"}, "traceback": {"type": "string"}}, "required": ["name", "value", "traceback"]},
    "images": {"type": "array", "items": {"type": "object", "properties": {"png": {"type": "string", "description": "base64 PNG"}, "svg": {"type": "string"}}, "required": ["png"]}},
    "final": {"type": "string", "description": "What the cell passed to FINAL()."},
    "execution_count": {"type": "integer"},
    "duration_ms": {"type": "integer"},
    "truncated": {"type": "boolean"},
    "timed_out": {"type": "boolean", "description": "The cell ran past timeout_seconds and was interrupted."},
    "restarted": {"type": "boolean", "description": "The session was restarted: earlier state is gone (message says why)."},
    "message": {"type": "string"}
  },
  "required": ["stdout", "stderr", "execution_count", "duration_ms"]
}`),
	}, func(ctx context.Context, c *Call, in replIn) (replOut, error) {
		secs, err := intInRange("timeout_seconds", in.TimeoutSeconds, 60, 1, 3600)
		if err != nil {
			return replOut{}, err
		}
		r, err := c.set.repl.Execute(ctx, string(c.Sandbox), replAgent{c}, in.Code,
			repl.Options{Timeout: time.Duration(secs) * time.Second, Restart: in.Restart})
		if err != nil {
			return replOut{}, err
		}
		return replOut{r}, nil
	})}
}

// replAgent is the REPL's view of the sandbox's agent, through the manager.
type replAgent struct{ c *Call }

func (a replAgent) Start(ctx context.Context, argv []string, env map[string]string, cwd, tag string, logBytes int64) (string, error) {
	var id string
	_, err := a.c.M().Exec(ctx, a.c.Sandbox, sandbox.ExecRequest{Argv: argv, Env: env, Cwd: cwd, Tag: tag, Background: true,
		KeepStdinOpen: true, OutputLogBytes: logBytes, Timeout: a.c.M().Policy().MaxExecTimeout}, false,
		func(ev sandbox.ExecEvent) error {
			if ev.Started != nil {
				id = ev.Started.ID
			}
			return nil
		})
	if err == nil && id == "" {
		err = fmt.Errorf("%w: the agent did not report the REPL's start", sandbox.ErrAgentLost)
	}
	return id, err
}

func (a replAgent) Find(ctx context.Context, tag string) (string, bool, error) {
	ps, err := a.c.M().Processes(ctx, a.c.Sandbox)
	if err != nil {
		return "", false, err
	}
	for _, p := range ps {
		if p.Tag == tag && p.Running {
			return p.ID, true, nil
		}
	}
	return "", false, nil
}

func (a replAgent) WriteStdin(ctx context.Context, id string, data []byte) error {
	return a.c.M().WriteStdin(ctx, a.c.Sandbox, id, data, false)
}

func (a replAgent) ReadOutput(ctx context.Context, id string, since int64, wait time.Duration) (data []byte, start, cursor int64, alive bool, err error) {
	var ch sandbox.OutputChunk
	err = a.c.M().Call(ctx, a.c.Tool, a.c.Sandbox, func(cl *agentclient.Client) error {
		ch, err = cl.ReadOutput(ctx, id, since, wait, 0, 0)
		return err
	})
	return ch.Data, ch.Start, ch.Cursor, ch.Alive, err
}

func (a replAgent) Signal(ctx context.Context, id string, sig int) error {
	_, err := a.c.M().Signal(ctx, a.c.Sandbox, id, sig)
	return err
}
