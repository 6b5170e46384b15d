// Package repl is the engine of the repl_execute tool and of the code
// interpreter: persistent, Jupyter-like Python sessions in a sandbox, its
// default one (repl_execute's) and named others.
//
// The session is a Python process inside the sandbox running driver.py, which
// is embedded here and written into the sandbox before the first start. The
// daemon drives it through the sandbox's agent only (Agent): requests go to
// the driver's stdin, responses come back through the process's output log,
// so a daemon restart loses nothing but a cursor: the process is found again
// by its tag and the stream resynchronised with a ping. llm_query calls from
// the sandbox, which has no network, come back through the same channel and
// are answered here (LLM). The wire protocol is described at the top of
// driver.py and in wire.go.
package repl

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

//go:embed driver.py
var driverSource []byte

const (
	// Tag names the default session's driver process, so that it is found
	// again after a daemon restart; a named session's is Tag-name (TagOf).
	Tag = "sbx-repl"
	// LogBytes is the size of the driver's output log in the agent. Only
	// responses reach it (a cell's own output is captured by the driver),
	// one at a time, and the daemon reads the log while a result is being
	// written. A result holds at most about 7 MiB of text (1 MiB each of
	// stdout and stderr, 4 MiB of images, the value and the traceback; JSON
	// escapes of control characters can make it longer), so the log's window
	// is ample.
	LogBytes int64 = 16 << 20
	// DefaultTimeout bounds a cell when Options.Timeout is 0.
	DefaultTimeout = 60 * time.Second
	// InterruptGrace is how long a cell past its timeout has, after SIGINT,
	// to end with KeyboardInterrupt before its process is killed: C code that
	// does not check for signals, or a cell that ignores SIGINT, would
	// otherwise hold the session for ever.
	InterruptGrace = 2 * time.Second
	// StartTimeout bounds a driver's start, up to its ready message.
	StartTimeout = 30 * time.Second
)

// ErrNoPython is returned when the sandbox has no python3 on its PATH.
var ErrNoPython = errors.New("repl_execute: python3 is not installed in this sandbox")

// ErrClosed is returned by a call on a session that Close removed while the
// call waited for its turn.
var ErrClosed = errors.New("repl_execute: the session was removed")

// TagOf returns the process tag of session name: Tag for the default
// session (""), Tag-name for a named one.
func TagOf(name string) string {
	if name == "" {
		return Tag
	}
	return Tag + "-" + name
}

// Agent is what the REPL needs from a sandbox's agent.
type Agent interface {
	// Start runs argv in the background with stdin kept open and an output
	// log of logBytes (combined stdout+stderr, addressed by cursor); env is
	// added to the sandbox's default environment; cwd is its directory (""
	// the sandbox's workdir); tag names the process. Returns the process id.
	// A command that cannot be found may either fail here or start a process
	// that exits at once saying so (as the sbx agent does: "sbx: python3:
	// command not found"). A cwd that does not exist fails here.
	Start(ctx context.Context, argv []string, env map[string]string, cwd, tag string, logBytes int64) (string, error)
	// Find returns the id of the running process with tag, if there is one.
	Find(ctx context.Context, tag string) (id string, ok bool, err error)
	WriteStdin(ctx context.Context, id string, data []byte) error
	// ReadOutput returns output at offsets >= since, waiting up to wait for
	// some (returns at once on exit). start > since means bytes in between
	// were lost. alive is false once the process exited.
	ReadOutput(ctx context.Context, id string, since int64, wait time.Duration) (data []byte, start, cursor int64, alive bool, err error)
	// Signal sends sig to the process's group: 2 = SIGINT, 9 = kill the
	// process tree.
	Signal(ctx context.Context, id string, sig int) error
}

// LLM is the OpenAI-compatible chat completions endpoint that llm_query
// calls reach. URL is the base (POST {URL}/chat/completions); empty means
// not configured, and llm_query then raises a RuntimeError saying so. The
// key never enters the sandbox.
type LLM struct {
	URL, Model, APIKey string
	Client             *http.Client // nil: http.DefaultClient (the cell's timeout bounds the call)
}

// Options of one call.
type Options struct {
	// Session names the session: "" is the sandbox's default one
	// (repl_execute's); a name is lower-case letters and digits.
	Session string
	// Cwd is where a session this call starts runs ("": the sandbox's
	// workdir); a running session keeps its own.
	Cwd string
	// Timeout bounds the cell, llm_query calls included; 0 is DefaultTimeout.
	Timeout time.Duration
	// Restart kills the session (all state is lost) and runs code in a fresh
	// one.
	Restart bool
	// Env is set in the session's os.environ for this cell only.
	Env map[string]string
	// OnOutput, when set, is given the cell's stdout and stderr ("stdout",
	// "stderr") while it runs, in batches, all of it before Execute returns;
	// at most 8 MiB of each is streamed (a notice says what was not). It is
	// called from Execute's goroutine. The Result still holds the output.
	OnOutput func(stream, text string)
	// Rich asks for the rich representations of the cell's value (Data),
	// display() calls and figures (Displays, which then replace Images).
	Rich bool
}

// Result is what a cell did.
type Result struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// Value is the repr of the cell's last expression, when it is one and
	// not None (a trailing ";" suppresses it, as in Jupyter).
	Value  string  `json:"value,omitempty"`
	Error  *Error  `json:"error,omitempty"`
	Images []Image `json:"images,omitempty"`
	// Final is what the cell passed to FINAL(), if it called it.
	Final          *string `json:"final,omitempty"`
	ExecutionCount int     `json:"execution_count"`
	DurationMS     int64   `json:"duration_ms"`
	// Truncated says that stdout, stderr, the value, the traceback or the
	// images were cut (each says where, in a notice).
	Truncated bool `json:"truncated,omitempty"`
	// TimedOut says the cell ran past its timeout and was interrupted.
	TimedOut bool `json:"timed_out,omitempty"`
	// Restarted says the cell ran in, or was followed by, a fresh session:
	// the variables and imports of before are gone. Message says why.
	Restarted bool   `json:"restarted,omitempty"`
	Message   string `json:"message,omitempty"`
	// Data is the value's rich representations (Options.Rich), text/plain
	// (Value) included.
	Data Bundle `json:"data,omitempty"`
	// Displays are what the cell showed with display(), then its figures,
	// in order (Options.Rich).
	Displays []Bundle `json:"displays,omitempty"`
}

// Bundle is one rich output by MIME type, as Jupyter's display data:
// "text/plain", "text/html", "text/markdown", "image/svg+xml", "image/png"
// (base64), "image/jpeg" (base64), "application/pdf" (base64), "text/latex",
// "application/json" (any JSON), "application/javascript", or others an
// object's _repr_mimebundle_ gave. Values are JSON, strings but for JSON
// types.
type Bundle map[string]json.RawMessage

// Error is the exception a cell raised.
type Error struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// Image is a matplotlib figure left open at the end of a cell.
type Image struct {
	PNG string `json:"png"`           // base64
	SVG string `json:"svg,omitempty"` // left out when over 1 MiB
}

// Sessions holds the sessions of each sandbox. It is safe for concurrent
// use; the calls on one session are serialised.
type Sessions struct {
	llm LLM
	mu  sync.Mutex
	m   map[key]*session
}

type key struct{ sandbox, name string }

// NewSessions returns an empty set of sessions whose llm_query calls go to llm.
func NewSessions(llm LLM) *Sessions {
	return &Sessions{llm: llm, m: make(map[key]*session)}
}

// Forget drops what is known of sandboxID's sessions: the sandbox is gone.
// Nothing is sent to the sandbox.
func (s *Sessions) Forget(sandboxID string) {
	s.mu.Lock()
	for k := range s.m {
		if k.sandbox == sandboxID {
			delete(s.m, k)
		}
	}
	s.mu.Unlock()
}

func (s *Sessions) session(sandboxID, name string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{sandboxID, name}
	sess := s.m[k]
	if sess == nil {
		sess = newSession(TagOf(name))
		s.m[k] = sess
	}
	return sess
}

// call takes sess's turn for one call with opt; release gives it back.
func (s *Sessions) call(ctx context.Context, sess *session, a Agent, opt Options) (c *call, release func(), err error) {
	select {
	case <-sess.turn:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	release = func() { sess.turn <- struct{}{} }
	if sess.removed {
		release()
		return nil, nil, ErrClosed
	}
	timeout := opt.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &call{llm: s.llm, sess: sess, a: a, timeout: timeout, opt: opt}, release, nil
}

// Execute runs code in sandboxID's session opt.Session, through a, starting
// the session if there is none. The error is for what kept the cell from
// running (no python3, the agent failed); what the cell itself did,
// exceptions and timeouts included, is in the Result.
func (s *Sessions) Execute(ctx context.Context, sandboxID string, a Agent, code string, opt Options) (Result, error) {
	c, release, err := s.call(ctx, s.session(sandboxID, opt.Session), a, opt)
	if err != nil {
		return Result{}, err
	}
	defer release()
	return c.execute(ctx, code, opt.Restart)
}

// Open makes sure sandboxID's session opt.Session runs, starting it in
// opt.Cwd if there is none.
func (s *Sessions) Open(ctx context.Context, sandboxID string, a Agent, opt Options) error {
	c, release, err := s.call(ctx, s.session(sandboxID, opt.Session), a, opt)
	if err != nil {
		return err
	}
	defer release()
	_, err = c.attach(ctx)
	return err
}

// Restart replaces sandboxID's session opt.Session with a fresh one, started
// in opt.Cwd: all state is lost. A cell running in it is ended at once; its
// call's Result says so (an Error named SessionEnded).
func (s *Sessions) Restart(ctx context.Context, sandboxID string, a Agent, opt Options) error {
	sess := s.session(sandboxID, opt.Session)
	sess.end(ctx, a, "the session was restarted")
	c, release, err := s.call(ctx, sess, a, opt)
	if err != nil {
		return err
	}
	defer release()
	defer sess.clearEnded()
	return c.restart(ctx)
}

// Close ends sandboxID's session name and forgets it: its process is
// killed, all state is lost, and calls waiting for it fail with ErrClosed.
// A cell running in it is ended at once; its call's Result says so (an
// Error named SessionEnded). Closing a session that does not run is no
// error.
func (s *Sessions) Close(ctx context.Context, sandboxID string, a Agent, name string) error {
	sess := s.session(sandboxID, name)
	sess.end(ctx, a, "the session was removed")
	c, release, err := s.call(ctx, sess, a, Options{Session: name})
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return nil
		}
		return err
	}
	defer release()
	if sess.proc == "" {
		id, ok, err := a.Find(ctx, sess.tag)
		if err != nil {
			return fmt.Errorf("repl_execute: looking for the session's process (tag %s): %w", sess.tag, err)
		}
		if ok {
			sess.adopt(id, false)
		}
	}
	c.kill(ctx)
	sess.removed = true
	sess.clearEnded()
	s.mu.Lock()
	if k := (key{sandboxID, name}); s.m[k] == sess {
		delete(s.m, k)
	}
	s.mu.Unlock()
	return nil
}
