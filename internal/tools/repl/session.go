package repl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// session is what the daemon knows of one session's driver.
type session struct {
	// turn holds one token: the call that took it drives the process.
	turn chan struct{}
	// tag names the driver's process (TagOf).
	tag string

	mu sync.Mutex
	// running is proc, for Restart and Close to kill a process a running
	// call drives (mu).
	running string
	// ended says why the process was killed by Restart or Close, for the
	// call that sees it die (mu).
	ended string

	// removed says Close forgot the session (turn holder only).
	removed bool
	// proc is the agent's id of the driver process; "" until found or started.
	proc string
	// synced says out.cursor is at a response boundary the daemon knows;
	// false for a process found again by its tag (resync with a ping).
	synced bool
	out    reader
}

func newSession(tag string) *session {
	s := &session{turn: make(chan struct{}, 1), tag: tag}
	s.turn <- struct{}{}
	return s
}

// adopt makes proc the session's process, read from its log's start on.
func (s *session) adopt(proc string, synced bool) {
	s.proc, s.synced, s.out = proc, synced, reader{}
	s.mu.Lock()
	s.running = proc
	s.mu.Unlock()
}

// end kills the session's process without waiting for the turn, so that a
// cell running in it ends now; the call driving it learns why (takeEnded).
func (s *session) end(ctx context.Context, a Agent, why string) {
	s.mu.Lock()
	proc := s.running
	s.ended = why
	s.mu.Unlock()
	if proc != "" {
		_ = a.Signal(ctx, proc, 9)
	}
}

// takeEnded returns why end killed the process, once.
func (s *session) takeEnded() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	why := s.ended
	s.ended = ""
	return why
}

func (s *session) clearEnded() { s.takeEnded() }

var (
	errDeadline = errors.New("deadline passed")
	errExited   = errors.New("the Python process exited")
	errKilled   = errors.New("the Python process was killed")
	errStale    = errors.New("the Python driver speaks another protocol version")
)

// driverEnv is added to the sandbox's environment for the driver: matplotlib
// must pick Agg before it is imported, and Python children of a cell should
// write UTF-8 whatever the locale.
var driverEnv = map[string]string{
	"MPLBACKEND":       "Agg",
	"PYTHONIOENCODING": "utf-8",
	"PYTHONUNBUFFERED": "1",
}

const (
	// maxWait bounds one ReadOutput wait.
	maxWait = 10 * time.Second
	// interruptEvery is how often SIGINT is repeated during InterruptGrace.
	interruptEvery = 500 * time.Millisecond
	// killWait bounds the wait for a killed driver to be gone, before a new
	// one is started with the same tag.
	killWait = 5 * time.Second
)

// llmMode says what await does with an llm_query.
type llmMode int

const (
	llmAnswerIt llmMode = iota // ask the model and answer
	llmRefuse                  // answer with an error at once (the cell is past its timeout)
	llmIgnore                  // do not answer (a stale query: the driver asks again)
)

// call is one Execute (or Open, Restart, Close) on one session, which it
// holds.
type call struct {
	llm     LLM
	sess    *session
	a       Agent
	timeout time.Duration
	opt     Options
	cellID  string // the id of the cell that runs, whose output goes to opt.OnOutput
}

func (c *call) execute(ctx context.Context, code string, restart bool) (Result, error) {
	var (
		lost string
		err  error
	)
	if restart {
		err = c.restart(ctx)
		lost = "the session was restarted as asked: all state (variables, imports) was lost"
	} else {
		lost, err = c.attach(ctx)
	}
	if err != nil {
		return Result{}, err
	}
	res, err := c.cell(ctx, code)
	if err != nil {
		return Result{}, err
	}
	if lost != "" {
		res.Restarted = true
		res.Message = joinMessages(lost, res.Message)
	}
	return res, nil
}

func joinMessages(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

// attach makes sure the session's driver runs and its output is in step,
// starting one if there is none. lost says why the state of before is gone,
// when a session was known and had to be replaced.
func (c *call) attach(ctx context.Context) (lost string, err error) {
	had := c.sess.proc != ""
	if had && c.sess.synced {
		alive, err := c.poll(ctx)
		if err == nil && alive {
			return "", nil
		}
		if err == nil {
			lost = "the Python session had exited since the previous call (" + c.sess.out.said() +
				"), so a fresh one was started: all state (variables, imports) was lost"
			return lost, c.start(ctx)
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		c.sess.proc = "" // the agent no longer knows it: look it up by its tag
	}
	if c.sess.proc == "" {
		id, ok, err := c.a.Find(ctx, c.sess.tag)
		if err != nil {
			return "", fmt.Errorf("repl_execute: looking for the session's process (tag %s): %w", c.sess.tag, err)
		}
		if !ok {
			if had {
				lost = "the Python session was gone, so a fresh one was started: all state (variables, imports) was lost"
			}
			return lost, c.start(ctx)
		}
		c.sess.adopt(id, false)
	}
	return c.resyncOrReplace(ctx)
}

// resyncOrReplace brings a process found by its tag in step, or replaces it
// when that cannot be done.
func (c *call) resyncOrReplace(ctx context.Context) (lost string, err error) {
	err = c.resync(ctx)
	switch {
	case err == nil:
		return "", nil
	case errors.Is(err, errExited):
		lost = "the Python session had exited, so a fresh one was started: all state (variables, imports) was lost"
	case errors.Is(err, errKilled):
		lost = fmt.Sprintf("a cell from before the daemon restarted was still running past %s and ignored an interrupt, so its Python process was killed and a fresh one started: all state (variables, imports) was lost", c.timeout)
	case errors.Is(err, errStale):
		c.kill(ctx)
		lost = "the session had been started by another version of sbx and was replaced: all state (variables, imports) was lost"
	default:
		return "", err
	}
	return lost, c.start(ctx)
}

// resync finds the response boundary in a log read from an unknown point:
// everything before the pong to a fresh ping is stale. A driver waiting for
// an llm_answer says so in its pong (busy) and asks again right after it:
// that cell is seen through before ours runs.
func (c *call) resync(ctx context.Context) error {
	id := newID()
	if err := c.send(ctx, pingRequest{Type: "ping", ID: id}); err != nil {
		return err
	}
	deadline := time.Now().Add(c.timeout)
	pong, _, err := c.wait(ctx, deadline, llmIgnore, func(m *message) bool { return m.Type == "pong" && m.ID == id })
	if err != nil {
		return err
	}
	c.sess.synced = true
	if pong.Protocol != protocolVersion {
		return errStale
	}
	if !pong.Busy {
		return nil
	}
	_, _, err = c.wait(ctx, deadline, llmAnswerIt, isReply(pong.Cell))
	return err
}

// restart kills the session's driver, if there is one, and starts a new one.
func (c *call) restart(ctx context.Context) error {
	if c.sess.proc == "" {
		id, ok, err := c.a.Find(ctx, c.sess.tag)
		if err != nil {
			return fmt.Errorf("repl_execute: looking for the session's process (tag %s): %w", c.sess.tag, err)
		}
		if ok {
			c.sess.adopt(id, false)
		}
	}
	c.kill(ctx)
	return c.start(ctx)
}

// bootstrap runs the driver from the environment variable it travels in,
// removed at once so that no cell or child inherits it. The driver is no
// file in the sandbox: under the local backend the file API's paths are the
// sandbox's and a process's are the host's, and an environment is the same
// for both.
const bootstrap = "import os; exec(compile(os.environ.pop('" + driverVar + "'), '" + driverName + "', 'exec'))"

const (
	driverVar  = "SBX_REPL_DRIVER"
	driverName = "<sbx-repl>" // the driver's frames, left out of tracebacks
)

// start starts the driver and waits for it to be ready.
func (c *call) start(ctx context.Context) error {
	c.sess.adopt("", false)
	env := maps.Clone(driverEnv)
	env[driverVar] = string(driverSource)
	id, err := c.a.Start(ctx, []string{"python3", "-u", "-c", bootstrap}, env, c.opt.Cwd, c.sess.tag, LogBytes)
	if err != nil {
		if notFound(err.Error()) || errors.Is(err, exec.ErrNotFound) {
			return ErrNoPython
		}
		return fmt.Errorf("repl_execute: starting python3: %w", err)
	}
	c.sess.adopt(id, true)
	m, err := c.await(ctx, time.Now().Add(StartTimeout), llmRefuse, func(m *message) bool {
		return m.Type == "ready" || m.Type == "fatal"
	})
	switch {
	case errors.Is(err, errExited):
		c.sess.proc = ""
		if notFound(c.sess.out.said()) {
			return ErrNoPython
		}
		return fmt.Errorf("repl_execute: python3 exited before the REPL driver was ready; %s", c.sess.out.said())
	case errors.Is(err, errDeadline):
		c.kill(ctx)
		return fmt.Errorf("repl_execute: the REPL driver was not ready within %s; %s", StartTimeout, c.sess.out.said())
	case err != nil:
		return err
	case m.Type == "fatal":
		c.kill(ctx)
		return fmt.Errorf("repl_execute: %s", m.Message)
	}
	return nil
}

// notFound tells an agent's or a shell's "no such command" for python3.
func notFound(s string) bool {
	return strings.Contains(s, "python3: command not found") || strings.Contains(s, "python3: not found") ||
		strings.Contains(s, "executable file not found")
}

// kill ends the driver's process tree and waits, briefly, until it is gone:
// Find must not see it beside the next one.
func (c *call) kill(ctx context.Context) {
	proc := c.sess.proc
	if proc == "" {
		return
	}
	_ = c.a.Signal(ctx, proc, 9)
	deadline := time.Now().Add(killWait)
	cursor := c.sess.out.cursor
	for time.Now().Before(deadline) {
		_, _, next, alive, err := c.a.ReadOutput(ctx, proc, cursor, min(time.Until(deadline), time.Second))
		if err != nil || !alive {
			break
		}
		cursor = next
	}
	c.sess.adopt("", false)
}

// cell runs code and waits for its result, within the timeout and its
// grace.
func (c *call) cell(ctx context.Context, code string) (Result, error) {
	id := newID()
	began := time.Now()
	req := executeRequest{Type: "execute", ID: id, Code: code, Env: c.opt.Env, Stream: c.opt.OnOutput != nil, Rich: c.opt.Rich}
	if err := c.send(ctx, req); err != nil {
		return Result{}, err
	}
	c.cellID = id
	m, interrupted, err := c.wait(ctx, began.Add(c.timeout), llmAnswerIt, isReply(id))
	c.cellID = ""
	elapsed := time.Since(began).Milliseconds()
	if errors.Is(err, errKilled) || errors.Is(err, errExited) {
		if why := c.sess.takeEnded(); why != "" {
			return Result{
				Error:      &Error{Name: "SessionEnded", Value: why},
				Restarted:  true,
				DurationMS: elapsed,
				Message:    why + " while the cell ran: all state (variables, imports) was lost",
			}, nil
		}
	}
	switch {
	case errors.Is(err, errKilled):
		if err := c.start(ctx); err != nil {
			return Result{}, fmt.Errorf("repl_execute: the cell ran past its %s timeout and did not stop on an interrupt, so its Python process was killed; starting a new session failed: %w", c.timeout, err)
		}
		return Result{TimedOut: true, Restarted: true, DurationMS: elapsed, Message: fmt.Sprintf(
			"the cell ran past its %s timeout and did not stop within %s of an interrupt (SIGINT), so its Python process was killed and a fresh session started: all state (variables, imports) was lost, and so was the cell's output",
			c.timeout, InterruptGrace)}, nil
	case errors.Is(err, errExited):
		why := c.sess.out.said()
		if err := c.start(ctx); err != nil {
			return Result{}, fmt.Errorf("repl_execute: the Python process exited during the cell (%s); starting a new session failed: %w", why, err)
		}
		return Result{
			Error:      &Error{Name: "SessionExited", Value: "the Python process exited during the cell; " + why},
			Restarted:  true,
			DurationMS: elapsed,
			Message:    "the Python process exited during the cell (os._exit, a crash or the memory limit), so a fresh session was started: all state (variables, imports) was lost, and so was the cell's output",
		}, nil
	case err != nil:
		return Result{}, err
	case m.Type == "error":
		return Result{}, fmt.Errorf("repl_execute: the REPL driver could not run the cell: %s", m.Message)
	}
	var res Result
	if err := json.Unmarshal(m.raw, &res); err != nil {
		return Result{}, fmt.Errorf("repl_execute: the REPL driver's result does not decode: %w", err)
	}
	if interrupted {
		res.TimedOut = true
		res.Message = fmt.Sprintf("the cell ran past its %s timeout and was interrupted (KeyboardInterrupt); the session and its variables are kept", c.timeout)
	}
	return res, nil
}

// isReply matches the driver's result (or error) for request id.
func isReply(id string) func(*message) bool {
	return func(m *message) bool { return m.ID == id && (m.Type == "result" || m.Type == "error") }
}

// wait is await under the timeout rule: past deadline the driver's cell is
// interrupted (SIGINT) and given InterruptGrace to answer; then its process
// is killed (errKilled). interrupted says SIGINT was sent.
//
// SIGINT is sent again every interruptEvery of the grace: the driver ignores
// one that comes before its cell started (a process starved of CPU), as it
// cannot tell it from one meant for the cell it just finished.
func (c *call) wait(ctx context.Context, deadline time.Time, mode llmMode, want func(*message) bool) (m *message, interrupted bool, err error) {
	m, err = c.await(ctx, deadline, mode, want)
	if !errors.Is(err, errDeadline) {
		return m, false, err
	}
	if mode == llmAnswerIt {
		mode = llmRefuse
	}
	end := time.Now().Add(InterruptGrace)
	for time.Now().Before(end) {
		if err := c.a.Signal(ctx, c.sess.proc, 2); err != nil {
			return nil, true, c.failed(ctx, "interrupting the cell", err)
		}
		next := time.Now().Add(interruptEvery)
		if next.After(end) {
			next = end
		}
		m, err = c.await(ctx, next, mode, want)
		if !errors.Is(err, errDeadline) {
			return m, true, err
		}
	}
	c.kill(ctx)
	return nil, true, errKilled
}

// await reads responses until want accepts one, dealing with llm_query
// requests on the way as mode says. Past deadline it returns errDeadline;
// once the process exited and its output is read, errExited.
func (c *call) await(ctx context.Context, deadline time.Time, mode llmMode, want func(*message) bool) (*message, error) {
	for {
		m, err := c.next(ctx, deadline)
		if err != nil {
			return nil, err
		}
		if want(m) {
			return m, nil
		}
		if m.Type == "output" && m.ID == c.cellID && c.cellID != "" && c.opt.OnOutput != nil {
			c.opt.OnOutput(m.Stream, m.Text)
			continue
		}
		if m.Type == "llm_query" && mode != llmIgnore {
			if err := c.answer(ctx, deadline, m, mode); err != nil {
				return nil, err
			}
		}
	}
}

// next returns the next response, reading the log as needed.
func (c *call) next(ctx context.Context, deadline time.Time) (*message, error) {
	r := &c.sess.out
	for {
		if m, ok := r.next(); ok {
			return m, nil
		}
		if r.exited {
			return nil, errExited
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, errDeadline
		}
		data, start, cursor, alive, err := c.a.ReadOutput(ctx, c.sess.proc, r.cursor, min(wait, maxWait))
		if err != nil {
			return nil, c.failed(ctx, "reading the session's output", err)
		}
		r.add(data, start, cursor, alive)
	}
}

// poll reads what the log holds now, without waiting: has the process exited?
func (c *call) poll(ctx context.Context) (alive bool, err error) {
	for {
		data, start, cursor, alive, err := c.a.ReadOutput(ctx, c.sess.proc, c.sess.out.cursor, 0)
		if err != nil {
			return false, err
		}
		c.sess.out.add(data, start, cursor, alive)
		if alive || len(data) == 0 {
			// Keep the lines for await (an llm_query of an abandoned cell
			// waits there), but note what the process said before exiting.
			if !alive {
				for {
					if _, ok := c.sess.out.next(); !ok {
						break
					}
				}
			}
			return alive, nil
		}
	}
}

func (c *call) send(ctx context.Context, req any) error {
	line, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("repl_execute: encoding a request: %w", err)
	}
	if err := c.a.WriteStdin(ctx, c.sess.proc, append(line, '\n')); err != nil {
		return c.failed(ctx, "writing to the session's stdin", err)
	}
	return nil
}

// answer answers the llm_query m, within the cell's deadline. A call cut
// by the deadline is not answered: the cell is interrupted instead.
func (c *call) answer(ctx context.Context, deadline time.Time, m *message, mode llmMode) error {
	reply := llmAnswer{Type: "llm_answer", QID: m.QID}
	if mode == llmRefuse {
		reply.Error = "the cell ran past its timeout"
	} else {
		qctx, cancel := context.WithDeadline(ctx, deadline)
		text, err := c.llm.ask(qctx, m.Prompt, m.System)
		cancel()
		switch {
		case ctx.Err() != nil:
			return c.failed(ctx, "asking the model", ctx.Err())
		case err != nil && !time.Now().Before(deadline):
			return errDeadline
		case err != nil:
			reply.Error = err.Error()
		default:
			reply.Text = text
		}
	}
	return c.send(ctx, reply)
}

// failed is an agent call's failure. When the caller gave up (ctx), the
// running cell is interrupted, best effort, so that it does not hold the
// session; the log position stays right. Otherwise the daemon no longer
// knows where the process stands: the next call finds it by its tag and
// resyncs.
func (c *call) failed(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = c.a.Signal(ictx, c.sess.proc, 2)
		cancel()
		return fmt.Errorf("repl_execute: %s: %w", op, ctx.Err())
	}
	c.sess.adopt("", false)
	return fmt.Errorf("repl_execute: %s: %w", op, err)
}
