// This file implements the E2B code interpreter's HTTP API, what E2B serves
// on a sandbox's port 49999, over the REPL (package repl): each context is a
// persistent Python session in the sandbox, the default python context being
// repl_execute's own; an execution streams NDJSON while its cell runs.

package tools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/tools/repl"
)

// ciTool names the code interpreter in agent calls and audit records.
const ciTool = "code_interpreter"

// ciKeepalive is how long an execution's stream may be silent before a
// keepalive line, as upstream's server does.
const ciKeepalive = 5 * time.Second

// Body limits of the code interpreter's requests.
const (
	maxExecuteBody = 16 << 20
	maxContextBody = 64 << 10
)

// The languages: python is the only one served; E2B's short names are
// normalised first, as upstream does.
const ciPython = "python"

var ciLanguageAliases = map[string]string{"js": "javascript", "ts": "typescript"}

// ciHost is what the code interpreter needs of the sandboxes: the manager in
// production, a local stand-in in tests.
type ciHost interface {
	// Check returns nil when sandbox id runs and is the caller's, else why
	// not (sandbox.ErrNotFound, sandbox.ErrWrongState, …).
	Check(ctx context.Context, id sandbox.ID) error
	// Agent returns the REPL's view of sandbox id's agent.
	Agent(id sandbox.ID) ciAgent
	// MaxTimeout bounds one execution.
	MaxTimeout() time.Duration
}

// ciAgent is a sandbox's agent as the code interpreter uses it.
type ciAgent interface {
	repl.Agent
	Processes(ctx context.Context) ([]sandbox.ProcessInfo, error)
	// Stat describes path ("" is the sandbox's workdir); FileInfo.Path is
	// the clean absolute path.
	Stat(ctx context.Context, path string) (sandbox.FileInfo, error)
}

// managerHost is ciHost over the Set's manager.
type managerHost struct{ s *Set }

func (h managerHost) Check(ctx context.Context, id sandbox.ID) error {
	sb, err := h.s.m.Get(ctx, id)
	if err != nil {
		return err
	}
	if sb.State != sandbox.StateRunning {
		return &sandbox.Error{Op: ciTool, ID: id, Err: fmt.Errorf("%w: the sandbox is %s", sandbox.ErrWrongState, sb.State)}
	}
	return nil
}

func (h managerHost) Agent(id sandbox.ID) ciAgent {
	return replAgent{&Call{Tool: ciTool, Sandbox: id, set: h.s}}
}

func (h managerHost) MaxTimeout() time.Duration { return h.s.m.Policy().MaxExecTimeout }

func (a replAgent) Processes(ctx context.Context) ([]sandbox.ProcessInfo, error) {
	return a.c.M().Processes(ctx, a.c.Sandbox)
}

func (a replAgent) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	return a.c.M().Stat(ctx, a.c.Sandbox, path)
}

// codeInterp is the code interpreter's state: the contexts of each sandbox.
type codeInterp struct {
	host      ciHost
	keepalive time.Duration

	mu    sync.Mutex
	boxes map[sandbox.ID]*ciBox // guarded by mu
}

func newCodeInterp(host ciHost) *codeInterp {
	return &codeInterp{host: host, keepalive: ciKeepalive, boxes: map[sandbox.ID]*ciBox{}}
}

// ciBox is what is known of one sandbox's contexts.
type ciBox struct {
	mu sync.Mutex
	// loaded says the sandbox's processes were looked at for contexts made
	// before this daemon started (each is found by its process's tag).
	loaded bool
	// workdir is the sandbox's default directory, once asked.
	workdir string
	// made holds the created contexts by id.
	made map[string]ciContext
}

// ciContext is a context as the API shows it; its session is repl's
// Options.Session ("" for the default context).
type ciContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
	session  string
}

// ciContextID matches a created context's id (and so its session's name).
var ciContextID = regexp.MustCompile(`^[0-9a-f]{12}$`)

func newContextID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (ci *codeInterp) box(id sandbox.ID) *ciBox {
	ci.mu.Lock()
	defer ci.mu.Unlock()
	b := ci.boxes[id]
	if b == nil {
		b = &ciBox{made: map[string]ciContext{}}
		ci.boxes[id] = b
	}
	return b
}

func (ci *codeInterp) forget(id sandbox.ID) {
	ci.mu.Lock()
	delete(ci.boxes, id)
	ci.mu.Unlock()
}

// load finds the contexts of a daemon of before, once; b.mu is held.
func (b *ciBox) load(ctx context.Context, a ciAgent) error {
	if b.loaded {
		return nil
	}
	ps, err := a.Processes(ctx)
	if err != nil {
		return err
	}
	for _, p := range ps {
		name, ok := strings.CutPrefix(p.Tag, repl.Tag+"-")
		if ok && p.Running && ciContextID.MatchString(name) {
			if _, known := b.made[name]; !known {
				b.made[name] = ciContext{ID: name, Language: ciPython, Cwd: p.Cwd, session: name}
			}
		}
	}
	b.loaded = true
	return nil
}

// dir returns the sandbox's workdir, asked once; b.mu is held.
func (b *ciBox) dir(ctx context.Context, a ciAgent) (string, error) {
	if b.workdir == "" {
		fi, err := a.Stat(ctx, "")
		if err != nil {
			return "", err
		}
		b.workdir = fi.Path
	}
	return b.workdir, nil
}

// defaultContext is the sandbox's default python context, repl_execute's
// session; b.mu is held.
func (b *ciBox) defaultContext(ctx context.Context, a ciAgent) (ciContext, error) {
	dir, err := b.dir(ctx, a)
	if err != nil {
		return ciContext{}, err
	}
	return ciContext{ID: ciPython, Language: ciPython, Cwd: dir}, nil
}

// lookup returns context cid, or a 404 error.
func (b *ciBox) lookup(ctx context.Context, a ciAgent, cid string) (ciContext, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cid == ciPython {
		return b.defaultContext(ctx, a)
	}
	if err := b.load(ctx, a); err != nil {
		return ciContext{}, err
	}
	c, ok := b.made[cid]
	if !ok {
		return ciContext{}, contextNotFound(cid)
	}
	return c, nil
}

// ciStatus is an error the code interpreter answers with its own status
// and text.
type ciStatus struct {
	code int
	msg  string
}

func (e *ciStatus) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &ciStatus{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

func contextNotFound(cid string) error {
	return &ciStatus{http.StatusNotFound, fmt.Sprintf("Context %s not found", truncate(cid, 80))}
}

// ServeCodeInterpreter answers one request of the E2B code interpreter's HTTP API (what E2B serves on
// a sandbox's port 49999) for sandbox id: POST /execute (NDJSON stream), POST/GET /contexts,
// DELETE /contexts/{id}, POST /contexts/{id}/restart, GET /health. r.URL.Path is that route; the
// caller has already authenticated the request for sandbox id, and r.Context() carries the
// sandbox owner's key (manager.WithKey), whose capabilities apply (tools.python).
//
// Errors are plain text, as the E2B SDK reads them: 400 for a bad request
// or an unsupported language, 403 without tools.python, 404 for an unknown
// context or route, 502 when the sandbox is gone. Once an execution's
// stream began, a failure is an error line instead.
func (s *Set) ServeCodeInterpreter(w http.ResponseWriter, r *http.Request, id sandbox.ID) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	routes, cid := s.ciRoutes(path)
	h := routes[r.Method]
	var err error
	switch {
	case routes == nil:
		err = &ciStatus{http.StatusNotFound, "not found"}
	case h == nil:
		allow := slices.Sorted(maps.Keys(routes))
		w.Header().Set("Allow", strings.Join(allow, ", "))
		err = &ciStatus{http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed here (allowed: %s)",
			truncate(r.Method, 20), strings.Join(allow, ", "))}
	default:
		err = h(w, r, id, cid)
		if r.Method != http.MethodGet && s.m != nil {
			// As a tool call is: never the code or the environment.
			s.m.Record(r.Context(), id, "tool", ciTool, r.Method+" "+truncate(path, 100), err)
		}
	}
	if err != nil {
		s.ciError(w, r, id, err)
	}
}

// ciHandler serves one route; cid is the context its path names, if any.
type ciHandler func(w http.ResponseWriter, r *http.Request, id sandbox.ID, cid string) error

// ciRoutes returns the handlers of path by method (nil: no such route) and
// the context id the path names.
func (s *Set) ciRoutes(path string) (map[string]ciHandler, string) {
	switch path {
	case "/health":
		return map[string]ciHandler{http.MethodGet: s.ciHealth}, ""
	case "/execute":
		return map[string]ciHandler{http.MethodPost: s.ciExecute}, ""
	case "/contexts":
		return map[string]ciHandler{http.MethodGet: s.ciListContexts, http.MethodPost: s.ciCreateContext}, ""
	}
	rest, ok := strings.CutPrefix(path, "/contexts/")
	cid, restart := strings.CutSuffix(rest, "/restart")
	switch {
	case !ok || cid == "" || strings.Contains(cid, "/"):
		return nil, ""
	case restart:
		return map[string]ciHandler{http.MethodPost: s.ciRestartContext}, cid
	}
	return map[string]ciHandler{http.MethodDelete: s.ciRemoveContext}, cid
}

// ciError is the only place a code interpreter error becomes a response.
// An error that is not the request's own is checked against the sandbox:
// when it is gone, 502 says so.
func (s *Set) ciError(w http.ResponseWriter, r *http.Request, id sandbox.ID, err error) {
	code, msg := http.StatusInternalServerError, Message(err)
	var st *ciStatus
	switch {
	case errors.As(err, &st):
		code = st.code
	case errors.Is(err, sandbox.ErrDenied):
		code = http.StatusForbidden
	case r.Context().Err() != nil:
		return // the client went away: nobody reads an answer
	default:
		if gone := s.ciGone(r.Context(), id); gone != nil {
			code, msg = http.StatusBadGateway, gone.Error()
		} else if errors.Is(err, sandbox.ErrInvalid) {
			code = http.StatusBadRequest
		} else if errors.Is(err, sandbox.ErrLimit) {
			code = http.StatusTooManyRequests
		} else if errors.Is(err, sandbox.ErrTimeout) {
			code = http.StatusGatewayTimeout
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg)
}

// ciGone returns why sandbox id cannot be reached, wrapped so that it reads
// as the sandbox being gone, or nil when it runs. A sandbox that no longer
// exists is forgotten.
func (s *Set) ciGone(ctx context.Context, id sandbox.ID) error {
	err := s.ci.host.Check(ctx, id)
	if err == nil || errors.Is(err, sandbox.ErrDenied) {
		return nil
	}
	if errors.Is(err, sandbox.ErrNotFound) {
		s.repl.Forget(string(id))
		s.ci.forget(id)
	}
	return fmt.Errorf("the sandbox is not running: %w", err)
}

// ciStart checks what every route but /health checks: the key's
// capability, then that the sandbox runs (502 if not).
func (s *Set) ciStart(ctx context.Context, id sandbox.ID) error {
	if err := allowed(ctx, CapPython); err != nil {
		return err
	}
	if err := s.ciGone(ctx, id); err != nil {
		return &ciStatus{http.StatusBadGateway, err.Error()}
	}
	return nil
}

func (s *Set) ciHealth(w http.ResponseWriter, r *http.Request, id sandbox.ID, _ string) error {
	if err := s.ciGone(r.Context(), id); err != nil {
		return &ciStatus{http.StatusBadGateway, err.Error()}
	}
	writeCIJSON(w, http.StatusOK, "OK")
	return nil
}

func writeCIJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		panic("tools: encoding a code interpreter answer: " + err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}

// decodeCI decodes a request body of at most limit bytes into dst; unknown
// fields are ignored, as upstream does.
func decodeCI(r *http.Request, limit int64, dst any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return badRequest("reading the request body: %v", err)
	}
	if int64(len(body)) > limit {
		return &ciStatus{http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than %d bytes", limit)}
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, dst); err != nil {
		return badRequest("the request body does not decode: %v", err)
	}
	return nil
}

// language normalises a request's language as upstream does: none is
// python, js and ts their long names. Only python is served.
func language(lang string) (string, error) {
	l := strings.ToLower(strings.TrimSpace(lang))
	if l == "" {
		return ciPython, nil
	}
	if long, ok := ciLanguageAliases[l]; ok {
		l = long
	}
	if l != ciPython {
		return "", badRequest("language %q is not supported; the supported languages are: %s", truncate(l, 40), ciPython)
	}
	return l, nil
}

type ciExecuteRequest struct {
	Code      *string           `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

func (s *Set) ciExecute(w http.ResponseWriter, r *http.Request, id sandbox.ID, _ string) error {
	ctx := r.Context()
	if err := s.ciStart(ctx, id); err != nil {
		return err
	}
	var req ciExecuteRequest
	if err := decodeCI(r, maxExecuteBody, &req); err != nil {
		return err
	}
	switch {
	case req.Code == nil:
		return badRequest("code is required")
	case req.ContextID != "" && req.Language != "":
		return badRequest("Only one of context_id or language can be provided")
	}
	for k, v := range req.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return badRequest("env_vars: %q is not a valid environment variable", truncate(k, 80))
		}
	}
	if _, err := language(req.Language); err != nil {
		return err
	}
	a := s.ci.host.Agent(id)
	cid := req.ContextID
	if cid == "" {
		cid = ciPython
	}
	c, err := s.ci.box(id).lookup(ctx, a, cid)
	if err != nil {
		return err
	}
	out := newNDJSON(w)
	stop := out.keepalive(s.ci.keepalive)
	res, err := s.repl.Execute(ctx, string(id), a, *req.Code, repl.Options{
		Session: c.session, Cwd: c.Cwd, Timeout: s.ci.host.MaxTimeout(), Env: req.EnvVars, Rich: true,
		OnOutput: func(stream, text string) {
			out.line(map[string]any{"type": stream, "text": text, "timestamp": time.Now().UTC().Format(time.RFC3339Nano)})
		},
	})
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return nil // the client went away; the cell was interrupted
		}
		if !out.begun() {
			return err
		}
		why := err.Error()
		if gone := s.ciGone(ctx, id); gone != nil {
			why = gone.Error()
		}
		out.line(ciErrorLine("UnexpectedEndOfExecution", why, ""))
		out.line(map[string]any{"type": "end_of_execution"})
		return nil
	}
	for _, l := range executionLines(res) {
		out.line(l)
	}
	return nil
}

// executionLines are the NDJSON lines of a finished cell, after its
// streamed output: a notice when its session had to be replaced first, its
// displays and figures, its value, its error, its count, and the end.
func executionLines(res repl.Result) []map[string]any {
	var lines []map[string]any
	if res.Restarted && res.Message != "" && res.Error == nil && !res.TimedOut {
		lines = append(lines, map[string]any{"type": "stderr", "text": "[sbx: " + res.Message + "]\n",
			"timestamp": time.Now().UTC().Format(time.RFC3339Nano)})
	}
	for _, d := range res.Displays {
		lines = append(lines, resultLine(d, false))
	}
	switch {
	case res.Data != nil:
		lines = append(lines, resultLine(res.Data, true))
	case res.Value != "":
		raw, _ := json.Marshal(res.Value)
		lines = append(lines, resultLine(repl.Bundle{"text/plain": raw}, true))
	}
	if e := executionError(res); e != nil {
		lines = append(lines, e)
	}
	return append(lines,
		map[string]any{"type": "number_of_executions", "execution_count": res.ExecutionCount},
		map[string]any{"type": "end_of_execution"})
}

// executionError is the error line of a cell, if it has one: its
// exception, or what ended it (its timeout, the loss of its session).
func executionError(res repl.Result) map[string]any {
	switch {
	case res.TimedOut:
		tb := ""
		if res.Error != nil {
			tb = res.Error.Traceback
		}
		return ciErrorLine("TimeoutError", res.Message, tb)
	case res.Error == nil:
		return nil
	case res.Error.Name == "SessionEnded" || res.Error.Name == "SessionExited":
		return ciErrorLine("UnexpectedEndOfExecution", res.Message, "")
	}
	return ciErrorLine(res.Error.Name, res.Error.Value, res.Error.Traceback)
}

func ciErrorLine(name, value, traceback string) map[string]any {
	return map[string]any{"type": "error", "name": name, "value": value, "traceback": traceback}
}

// ciFormats maps the MIME types of a Jupyter bundle to the result fields
// the E2B SDK reads; other types go under extra.
var ciFormats = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
}

// resultLine is a bundle as a result line. As upstream, a text that is a
// string's repr in single quotes loses them (a repr in double quotes, as of
// "it's", keeps its own).
func resultLine(b repl.Bundle, main bool) map[string]any {
	line := map[string]any{"type": "result", "is_main_result": main}
	extra := map[string]json.RawMessage{}
	for mime, v := range b {
		if field, ok := ciFormats[mime]; ok {
			line[field] = v
		} else {
			extra[mime] = v
		}
	}
	if raw, ok := b["text/plain"]; ok {
		var text string
		if json.Unmarshal(raw, &text) == nil && len(text) >= 2 &&
			text[0] == '\'' && text[len(text)-1] == '\'' {
			line["text"] = text[1 : len(text)-1]
		}
	}
	if len(extra) > 0 {
		line["extra"] = extra
	}
	return line
}

func (s *Set) ciListContexts(w http.ResponseWriter, r *http.Request, id sandbox.ID, _ string) error {
	ctx := r.Context()
	if err := s.ciStart(ctx, id); err != nil {
		return err
	}
	a := s.ci.host.Agent(id)
	b := s.ci.box(id)
	b.mu.Lock()
	def, err := b.defaultContext(ctx, a)
	if err == nil {
		err = b.load(ctx, a)
	}
	list := []ciContext{def}
	for _, c := range b.made {
		list = append(list, c)
	}
	b.mu.Unlock()
	if err != nil {
		return err
	}
	slices.SortFunc(list[1:], func(x, y ciContext) int { return strings.Compare(x.ID, y.ID) })
	writeCIJSON(w, http.StatusOK, list)
	return nil
}

type ciCreateRequest struct {
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (s *Set) ciCreateContext(w http.ResponseWriter, r *http.Request, id sandbox.ID, _ string) error {
	ctx := r.Context()
	if err := s.ciStart(ctx, id); err != nil {
		return err
	}
	var req ciCreateRequest
	if err := decodeCI(r, maxContextBody, &req); err != nil {
		return err
	}
	lang, err := language(req.Language)
	if err != nil {
		return err
	}
	if strings.ContainsRune(req.Cwd, 0) {
		return badRequest("cwd: contains a NUL byte")
	}
	a := s.ci.host.Agent(id)
	fi, err := a.Stat(ctx, req.Cwd)
	switch {
	case errors.Is(err, sandbox.ErrNotFound) && s.ciGone(ctx, id) == nil:
		return badRequest("cwd %q does not exist in the sandbox", truncate(req.Cwd, 200))
	case err != nil:
		return err
	case fi.Type != "dir" && fi.Type != "symlink":
		return badRequest("cwd %q is not a directory", truncate(req.Cwd, 200))
	}
	c := ciContext{ID: newContextID(), Language: lang, Cwd: fi.Path}
	c.session = c.ID
	if err := s.repl.Open(ctx, string(id), a, repl.Options{Session: c.session, Cwd: c.Cwd}); err != nil {
		return err
	}
	b := s.ci.box(id)
	b.mu.Lock()
	b.made[c.ID] = c
	b.mu.Unlock()
	writeCIJSON(w, http.StatusOK, c)
	return nil
}

func (s *Set) ciRemoveContext(w http.ResponseWriter, r *http.Request, id sandbox.ID, cid string) error {
	ctx := r.Context()
	if err := s.ciStart(ctx, id); err != nil {
		return err
	}
	a := s.ci.host.Agent(id)
	b := s.ci.box(id)
	c, err := b.lookup(ctx, a, cid)
	if err != nil {
		return err
	}
	// Forgotten first: a call that has not found it yet will not.
	b.mu.Lock()
	delete(b.made, c.ID)
	b.mu.Unlock()
	if err := s.repl.Close(ctx, string(id), a, c.session); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Set) ciRestartContext(w http.ResponseWriter, r *http.Request, id sandbox.ID, cid string) error {
	ctx := r.Context()
	if err := s.ciStart(ctx, id); err != nil {
		return err
	}
	a := s.ci.host.Agent(id)
	c, err := s.ci.box(id).lookup(ctx, a, cid)
	if err != nil {
		return err
	}
	if err := s.repl.Restart(ctx, string(id), a, repl.Options{Session: c.session, Cwd: c.Cwd}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ndjson writes an execution's stream: each line one JSON object, written
// and flushed in one Write, all of it ASCII (the E2B SDK decodes each
// network chunk on its own, so a character split across two would break).
// The status (200) goes out with the first line. Safe for concurrent use.
type ndjson struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	mu      sync.Mutex
	started bool      // guarded by mu
	last    time.Time // of the last line; guarded by mu
}

func newNDJSON(w http.ResponseWriter) *ndjson {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a cell may run for an hour
	return &ndjson{w: w, rc: rc, last: time.Now()}
}

func (n *ndjson) begun() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.started
}

func (n *ndjson) line(v any) {
	body, err := json.Marshal(v)
	if err != nil {
		body, _ = json.Marshal(ciErrorLine("EncodingError", "encoding an output line: "+err.Error(), ""))
	}
	body = append(asciiJSON(body), '\n')
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.started {
		h := n.w.Header()
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		n.w.WriteHeader(http.StatusOK)
		n.started = true
	}
	if _, err := n.w.Write(body); err == nil {
		_ = n.rc.Flush()
	}
	n.last = time.Now()
}

// keepalive writes a keepalive line after every every of silence until the
// returned stop is called; stop waits for it to be done.
func (n *ndjson) keepalive(every time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(every/5, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			n.mu.Lock()
			quiet := time.Since(n.last) >= every
			n.mu.Unlock()
			if quiet {
				n.line(map[string]any{"type": "keepalive"})
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// asciiJSON replaces every non-ASCII character of JSON text by its \u
// escape, which is the same JSON: outside strings there is none.
func asciiJSON(b []byte) []byte {
	i := 0
	for i < len(b) && b[i] < utf8.RuneSelf {
		i++
	}
	if i == len(b) {
		return b
	}
	out := make([]byte, i, len(b)+len(b)/4)
	copy(out, b[:i])
	for i < len(b) {
		c := b[i]
		if c < utf8.RuneSelf {
			out = append(out, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		i += size
		if r > 0xFFFF {
			r -= 0x10000
			out = appendU(appendU(out, 0xD800+(r>>10)), 0xDC00+(r&0x3FF))
			continue
		}
		out = appendU(out, r) // utf8.RuneError for a byte that is no UTF-8: U+FFFD
	}
	return out
}

func appendU(b []byte, r rune) []byte {
	b = append(b, '\\', 'u')
	s := strconv.FormatInt(int64(r), 16)
	for range 4 - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}
