// This file holds seed 004's tools (an agent-infra sandbox's tool list) that
// run commands: shell_exec, python_exec, pip_install, process_list, and the
// persisted environment (env_get, env_set) every exec of the tools gets. The
// file, git and web tools of the seed are in agent004_*.go.
//
// Every command is an argv run by the sandbox's agent: an argument becomes
// one element of it, never text of a shell command. shell_exec's and
// python_exec's own input is a program, run as such.

package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"sbx.dev/sbx/internal/agentclient"
	"sbx.dev/sbx/internal/sandbox"
)

// seed004Tools returns seed 004's tools but shell_interactive (the PTY
// session engine's).
func seed004Tools() []*Tool {
	return slices.Concat(
		fileTools004(),
		[]*Tool{shellExecTool(), processListTool()},
		gitTools(),
		[]*Tool{pythonExecTool(), pipInstallTool()},
		webTools(),
		envTools(),
	)
}

// own returns err without the *sandbox.Error layer a manager call put on it
// for this sandbox, so that the tool's own name (Call.fail) heads it.
func (c *Call) own(err error) error {
	var se *sandbox.Error
	if errors.As(err, &se) && se.ID == c.Sandbox {
		return se.Err
	}
	return err
}

// command is one exec a tool makes.
type command struct {
	argv    []string
	cwd     string            // Workspace when empty
	stdin   []byte            // nil: none (/dev/null)
	env     map[string]string // the tool's defaults; the persisted variables (toolEnv) win
	fixed   map[string]string // what the tool needs whatever was persisted (e.g. git's LC_ALL)
	timeout time.Duration
	output  int64 // per-stream bound; toolOutputLimit when 0
}

// run runs x in the sandbox with the persisted environment over x.env. A
// program not found on PATH fails with notInstalled(x.argv[0]), so callers
// name what the template lacks.
func (c *Call) run(ctx context.Context, x command) (*sandbox.ExecResult, error) {
	env, err := c.toolEnv(ctx)
	if err != nil {
		return nil, err
	}
	merged := maps.Clone(x.env)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, env)
	maps.Copy(merged, x.fixed)
	if x.cwd == "" {
		x.cwd = Workspace
	}
	if x.output == 0 {
		x.output = toolOutputLimit
	}
	res, err := c.M().Exec(ctx, c.Sandbox, sandbox.ExecRequest{Argv: x.argv, Cwd: x.cwd, Env: merged, Stdin: x.stdin,
		Timeout: x.timeout, OutputLimitBytes: x.output}, false, nil)
	if err != nil {
		return nil, c.own(err)
	}
	if notRun(res) {
		return res, errNotInstalled
	}
	return res, nil
}

// errNotInstalled is run's error for a program that is not on the sandbox's
// PATH; callers turn it into their own message (notInstalled).
var errNotInstalled = errors.New("not installed")

// notRun reports whether res is of a program that was never started because
// it is not on PATH (the agent's exit code 127 without a process).
func notRun(res *sandbox.ExecResult) bool { return res.PID == 0 && res.ExitCode == 127 }

// notInstalled is the error of a tool whose program the sandbox's template
// lacks: what is missing and what to do, verbatim.
func notInstalled(msg string) error { return exact(sandbox.ErrNotFound, msg) }

// outputTail is the end of a command's output for an error message: stderr,
// then stdout, at most n bytes of each.
func outputTail(res *sandbox.ExecResult, n int) string {
	tail := func(b []byte) string {
		s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
		if len(s) > n {
			s = "…" + s[len(s)-n:]
		}
		return s
	}
	var parts []string
	if s := tail(res.Stderr); s != "" {
		parts = append(parts, s)
	}
	if s := tail(res.Stdout); s != "" {
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "(no output)"
	}
	return strings.Join(parts, "\n")
}

// seconds returns a timeout argument (def when nil) checked against [lo, hi].
func seconds(name string, v *int, def, lo, hi int) (time.Duration, error) {
	n, err := intInRange(name, v, def, lo, hi)
	if err != nil {
		return 0, sandbox.Invalid(name, "%d s is outside the range %d–%d s", *v, lo, hi)
	}
	return time.Duration(n) * time.Second, nil
}

// sandboxPath returns p as an absolute path in the sandbox (relative paths
// start at Workspace), refusing an empty one and NUL bytes.
func sandboxPath(field, p string) (string, error) {
	switch {
	case strings.TrimSpace(p) == "":
		return "", sandbox.Invalid(field, "is empty")
	case strings.IndexByte(p, 0) >= 0:
		return "", sandbox.Invalid(field, "contains a NUL byte")
	case len(p) > 4096:
		return "", sandbox.Invalid(field, "is longer than 4096 bytes")
	}
	if !strings.HasPrefix(p, "/") {
		p = Workspace + "/" + p
	}
	return path.Clean(p), nil
}

// ---- the persisted environment ----

// The files env_set keeps: the variables as a JSON object (what toolEnv
// reads), and a script that exports them for login shells.
const (
	envFile     = "/etc/sbx/env.json"
	profileFile = "/etc/profile.d/sbx-env.sh"
)

// Bounds of the persisted environment.
const (
	maxEnvValue = 128 << 10
	maxEnvFile  = 1 << 20
)

// toolEnv returns the variables env_set persisted in the sandbox (none when
// it never ran). Every tool that runs a command in the sandbox gives them as
// the command's environment — over the tool's own defaults, under nothing:
//
//	env, err := c.toolEnv(ctx)
//	req.Env = env // or merged over the tool's defaults (maps.Copy(defaults, env))
func (c *Call) toolEnv(ctx context.Context) (map[string]string, error) {
	// Through the agent directly: a read the tool makes for itself, not one
	// to audit on every command.
	var r sandbox.ReadResult
	err := c.M().Call(ctx, "tool_env", c.Sandbox, func(a *agentclient.Client) (err error) {
		r, err = a.ReadFile(ctx, envFile, 0, maxEnvFile+1)
		return err
	})
	switch {
	case errors.Is(err, sandbox.ErrNotFound) && strings.Contains(err.Error(), "'"+envFile+"'"):
		return nil, nil // the agent names the missing file; a missing sandbox is another error
	case err != nil:
		return nil, c.own(err)
	case r.Size > maxEnvFile:
		return nil, fmt.Errorf("%w: %s is larger than %d bytes; remove variables with env_set", sandbox.ErrWrongState, envFile, maxEnvFile)
	}
	env := map[string]string{}
	if len(strings.TrimSpace(string(r.Content))) == 0 {
		return env, nil
	}
	if err := json.Unmarshal(r.Content, &env); err != nil {
		return nil, fmt.Errorf("%w: %s is not a JSON object of strings (%v); fix or remove it", sandbox.ErrWrongState, envFile, err)
	}
	for k := range env {
		if !envName.MatchString(k) {
			delete(env, k) // not a name a process can be given
		}
	}
	return env, nil
}

// envMu serializes env_set's read-modify-write of the file (per daemon).
var envMu sync.Mutex

type envGetIn struct {
	Name string `json:"name"`
}

type envGetOut struct {
	Name      string            `json:"name,omitempty"`
	Value     *string           `json:"value,omitempty"`
	Set       *bool             `json:"set,omitempty"`
	Variables map[string]string `json:"variables,omitempty"`
}

func (o envGetOut) Text() string {
	if o.Name != "" {
		if o.Value == nil {
			return o.Name + " is not set"
		}
		return o.Name + "=" + *o.Value
	}
	if len(o.Variables) == 0 {
		return "(no variables set with env_set)"
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(o.Variables)) {
		fmt.Fprintf(&b, "%s=%s\n", k, o.Variables[k])
	}
	return b.String()
}

type envSetIn struct {
	Name  string  `json:"name"`
	Value *string `json:"value"`
}

type envSetOut struct {
	Name  string  `json:"name"`
	Value *string `json:"value"`
	Set   bool    `json:"set"`
	Count int     `json:"count"`
}

func (o envSetOut) Text() string {
	if !o.Set {
		return fmt.Sprintf("unset %s (%d variables persisted)", o.Name, o.Count)
	}
	return fmt.Sprintf("set %s=%s (%d variables persisted)", o.Name, *o.Value, o.Count)
}

func envTools() []*Tool {
	return []*Tool{
		define(Tool{
			Name:  "env_get",
			Title: "Get persisted environment variables",
			Description: "Read the environment variables persisted in this sandbox with env_set. With name, returns " +
				"{name, value, set} (value absent and set false when the variable was never set or was unset); " +
				"without name, returns {variables: {NAME: value, …}} with every persisted variable. Only variables " +
				"set with env_set are listed, not the sandbox's built-in environment (PATH, HOME, …): run " +
				"shell_exec with `env` for that.",
			Capability: CapEnv,
			ReadOnly:   true,
			Input: json.RawMessage(`{
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "The variable to read; omit to list every persisted variable."}
  },
  "additionalProperties": false
}`),
			Output: json.RawMessage(`{
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "The variable asked for (when name was given)."},
    "value": {"type": "string", "description": "Its value; absent when it is not set."},
    "set": {"type": "boolean", "description": "Whether the variable asked for is set."},
    "variables": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Every persisted variable (when no name was given)."}
  }
}`),
		}, runEnvGet),
		define(Tool{
			Name:  "env_set",
			Title: "Persist an environment variable",
			Description: "Set (or, with value null or omitted, unset) an environment variable for every later tool call " +
				"in this sandbox: shell_exec, python_exec, pip_install, git_*, http_request, browser_open and the other " +
				"command tools run with it, and login shells (bash -l) see it too. It is kept in the sandbox's files (" +
				envFile + " and " + profileFile + "), so it lasts as long as the sandbox and is visible to code running " +
				"in it: do not store secrets the sandbox's code must not read. name must be a valid variable name " +
				"([A-Za-z_][A-Za-z0-9_]*); value at most 128 KiB, no NUL byte. Setting PATH replaces the PATH commands " +
				"are looked up in. Returns {name, value, set, count} where count is the number of persisted variables.",
			Capability: CapEnv,
			Input: json.RawMessage(`{
  "type": "object",
  "required": ["name"],
  "properties": {
    "name": {"type": "string", "description": "The variable's name, e.g. API_BASE_URL."},
    "value": {"type": ["string", "null"], "description": "The value; null or omitted unsets the variable."}
  },
  "additionalProperties": false
}`),
			Output: json.RawMessage(`{
  "type": "object",
  "required": ["name", "set", "count"],
  "properties": {
    "name": {"type": "string"},
    "value": {"type": ["string", "null"], "description": "The value now persisted; null when unset."},
    "set": {"type": "boolean", "description": "true when the variable is now set, false when it was unset."},
    "count": {"type": "integer", "description": "How many variables are persisted now."}
  }
}`),
		}, runEnvSet),
	}
}

func runEnvGet(ctx context.Context, c *Call, in envGetIn) (envGetOut, error) {
	if in.Name != "" && !envName.MatchString(in.Name) {
		return envGetOut{}, sandbox.Invalid("name", "%q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", truncate(in.Name, 80))
	}
	env, err := c.toolEnv(ctx)
	if err != nil {
		return envGetOut{}, err
	}
	if in.Name == "" {
		if env == nil {
			env = map[string]string{}
		}
		return envGetOut{Variables: env}, nil
	}
	out := envGetOut{Name: in.Name, Set: new(bool)}
	if v, ok := env[in.Name]; ok {
		out.Value, *out.Set = &v, true
	}
	return out, nil
}

func runEnvSet(ctx context.Context, c *Call, in envSetIn) (envSetOut, error) {
	if !envName.MatchString(in.Name) || len(in.Name) > 255 {
		return envSetOut{}, sandbox.Invalid("name", "%q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*, at most 255 bytes)", truncate(in.Name, 80))
	}
	if in.Value != nil {
		switch {
		case strings.IndexByte(*in.Value, 0) >= 0:
			return envSetOut{}, sandbox.Invalid("value", "contains a NUL byte")
		case len(*in.Value) > maxEnvValue:
			return envSetOut{}, sandbox.Invalid("value", "is %d bytes, more than %d", len(*in.Value), maxEnvValue)
		}
	}
	envMu.Lock()
	defer envMu.Unlock()
	env, err := c.toolEnv(ctx)
	if err != nil {
		return envSetOut{}, err
	}
	if env == nil {
		env = map[string]string{}
	}
	if in.Value == nil {
		delete(env, in.Name)
	} else {
		env[in.Name] = *in.Value
	}
	js, err := json.MarshalIndent(env, "", "  ")
	if err != nil {
		return envSetOut{}, err
	}
	if len(js) > maxEnvFile {
		return envSetOut{}, fmt.Errorf("%w: the persisted variables would take %d bytes, more than %d; unset some", sandbox.ErrLimit, len(js), maxEnvFile)
	}
	if _, err := c.M().WriteFile(ctx, c.Sandbox, envFile, append(js, '\n'), 0o600, false); err != nil {
		return envSetOut{}, c.own(err)
	}
	if _, err := c.M().WriteFile(ctx, c.Sandbox, profileFile, []byte(profileScript(env)), 0o644, false); err != nil {
		return envSetOut{}, c.own(err)
	}
	return envSetOut{Name: in.Name, Value: in.Value, Set: in.Value != nil, Count: len(env)}, nil
}

// profileScript is the script of profileFile: one export per variable, each
// value single-quoted.
func profileScript(env map[string]string) string {
	var b strings.Builder
	b.WriteString("# Written by sbx's env_set: the variables persisted for this sandbox (" + envFile + ").\n")
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(env[k]))
	}
	return b.String()
}

// shellQuote quotes s for a POSIX shell: within single quotes, each ' ends
// the quote, is escaped, and starts another.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// ---- shell_exec ----

type shellExecIn struct {
	Command string `json:"command"`
	ExecDir string `json:"exec_dir"`
	Timeout *int   `json:"timeout"`
}

type shellExecOut struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exit_code"`
	TimedOut   bool   `json:"timed_out"`
	DurationMS int64  `json:"duration_ms"`
	Truncated  bool   `json:"truncated"`
	StdoutFile string `json:"stdout_file,omitempty"`
	StderrFile string `json:"stderr_file,omitempty"`
}

func (o shellExecOut) Text() string {
	s := commandText(o.Stdout, o.Stderr, o.ExitCode)
	if o.Truncated {
		s += fmt.Sprintf("\n[output truncated; the whole of it: %s %s]", o.StdoutFile, o.StderrFile)
	}
	return s
}

// commandResult fills the common fields of a command's result.
func commandResult(res *sandbox.ExecResult) shellExecOut {
	o := shellExecOut{Stdout: string(res.Stdout), Stderr: string(res.Stderr) + endNotice(res), ExitCode: res.ExitCode,
		TimedOut: res.Reason == sandbox.ReasonTimeout, DurationMS: res.Duration.Milliseconds(), Truncated: res.Truncated}
	if res.Truncated {
		o.StdoutFile, o.StderrFile = res.StdoutPath, res.StderrPath
	}
	return o
}

const commandOutputSchema = `{
  "type": "object",
  "required": ["stdout", "stderr", "exit_code", "timed_out", "duration_ms", "truncated"],
  "properties": {
    "stdout": {"type": "string", "description": "Standard output (head and tail kept when longer than 64 KiB)."},
    "stderr": {"type": "string", "description": "Standard error, with a note from sbx when the command was killed."},
    "exit_code": {"type": "integer", "description": "The exit code; 124 when it timed out, 128+n when killed by signal n."},
    "timed_out": {"type": "boolean", "description": "The command ran past its timeout and was killed with its children."},
    "duration_ms": {"type": "integer"},
    "truncated": {"type": "boolean", "description": "Output was cut; stdout_file and stderr_file hold all of it."},
    "stdout_file": {"type": "string", "description": "Path in the sandbox of the whole stdout, when truncated (read it with file_read)."},
    "stderr_file": {"type": "string", "description": "Path in the sandbox of the whole stderr, when truncated."}
  }
}`

func shellExecTool() *Tool {
	return define(Tool{
		Name:  "shell_exec",
		Title: "Run a shell command",
		Description: "Run a shell command in the sandbox with bash -c (sh when the template has no bash) and wait for it: " +
			"pipes, redirections, && and globs work. Returns stdout, stderr, exit_code, timed_out and duration_ms; a " +
			"non-zero exit is a result, not an error. exec_dir is the working directory (default /workspace, where " +
			"relative paths of the file tools start too). timeout is in seconds, 1–3600, default 120: past it the " +
			"command and its children are killed and timed_out is true. Each call is a new shell: cd and exported " +
			"variables do not carry over (use exec_dir, and env_set for variables that must persist). Variables " +
			"persisted with env_set are in the environment. Stdin is empty: interactive programs get end-of-file. " +
			"Each stream keeps its first and last 32 KiB when longer; the whole output is then saved in the " +
			"sandbox (stdout_file, stderr_file). The sandbox may have no network access.",
		Capability:  CapShell,
		Destructive: true,
		Input: json.RawMessage(`{
  "type": "object",
  "required": ["command"],
  "properties": {
    "command": {"type": "string", "description": "The command line, e.g. \"python app.py\" or \"ls -la | head\"."},
    "exec_dir": {"type": "string", "description": "Working directory; relative paths start at /workspace. Default /workspace."},
    "timeout": {"type": "integer", "minimum": 1, "maximum": 3600, "default": 120, "description": "Seconds before the command is killed (1–3600, default 120)."}
  },
  "additionalProperties": false
}`),
		Output: json.RawMessage(commandOutputSchema),
	}, runShellExec)
}

func runShellExec(ctx context.Context, c *Call, in shellExecIn) (shellExecOut, error) {
	if strings.TrimSpace(in.Command) == "" {
		return shellExecOut{}, sandbox.Invalid("command", "is empty")
	}
	if strings.IndexByte(in.Command, 0) >= 0 {
		return shellExecOut{}, sandbox.Invalid("command", "contains a NUL byte")
	}
	timeout, err := seconds("timeout", in.Timeout, 120, 1, 3600)
	if err != nil {
		return shellExecOut{}, err
	}
	dir := Workspace
	if in.ExecDir != "" {
		if dir, err = c.existingDir(ctx, "exec_dir", in.ExecDir); err != nil {
			return shellExecOut{}, err
		}
	}
	x := command{argv: []string{"bash", "-c", in.Command}, cwd: dir, timeout: timeout}
	res, err := c.run(ctx, x)
	if errors.Is(err, errNotInstalled) { // no bash: the POSIX shell
		x.argv[0] = "/bin/sh"
		res, err = c.run(ctx, x)
	}
	if errors.Is(err, errNotInstalled) {
		return shellExecOut{}, notInstalled("the sandbox's template has no shell (neither bash nor /bin/sh)")
	}
	if err != nil {
		return shellExecOut{}, err
	}
	return commandResult(res), nil
}

// existingDir checks that p names a directory in the sandbox and returns its
// absolute path.
func (c *Call) existingDir(ctx context.Context, field, p string) (string, error) {
	abs, err := sandboxPath(field, p)
	if err != nil {
		return "", err
	}
	fi, err := c.M().Stat(ctx, c.Sandbox, abs)
	if err != nil {
		return "", c.own(err)
	}
	if fi.Type != "dir" {
		return "", sandbox.Invalid(field, "'%s' is not a directory", abs)
	}
	return abs, nil
}

// ---- python_exec ----

type pythonExecIn struct {
	Code    string `json:"code"`
	Timeout *int   `json:"timeout"`
}

func pythonExecTool() *Tool {
	return define(Tool{
		Name:  "python_exec",
		Title: "Run Python code",
		Description: "Run a Python 3 program in the sandbox (python3, reading the program from stdin, in /workspace) " +
			"and return its stdout, stderr and exit_code; an uncaught exception is a result with its traceback " +
			"on stderr and exit_code 1, not an error. Print what you want back: the value of the last expression " +
			"is not shown. Each call is a fresh interpreter (no state carries over; save to files to keep data). " +
			"Modules installed with pip_install and files in /workspace can be imported; variables persisted " +
			"with env_set are in os.environ. timeout is in seconds, 1–3600, default 60: past it the program is " +
			"killed and timed_out is true. input() gets end-of-file. The sandbox may have no network access.",
		Capability:  CapPython,
		Destructive: true,
		Input: json.RawMessage(`{
  "type": "object",
  "required": ["code"],
  "properties": {
    "code": {"type": "string", "description": "The Python 3 program, e.g. \"import sys\\nprint(sys.version)\"."},
    "timeout": {"type": "integer", "minimum": 1, "maximum": 3600, "default": 60, "description": "Seconds before the program is killed (1–3600, default 60)."}
  },
  "additionalProperties": false
}`),
		Output: json.RawMessage(commandOutputSchema),
	}, runPythonExec)
}

func runPythonExec(ctx context.Context, c *Call, in pythonExecIn) (shellExecOut, error) {
	if strings.TrimSpace(in.Code) == "" {
		return shellExecOut{}, sandbox.Invalid("code", "is empty")
	}
	timeout, err := seconds("timeout", in.Timeout, 60, 1, 3600)
	if err != nil {
		return shellExecOut{}, err
	}
	res, err := c.run(ctx, command{argv: []string{"python3", "-"}, stdin: []byte(in.Code), timeout: timeout,
		env: map[string]string{"PYTHONUNBUFFERED": "1"}})
	if errors.Is(err, errNotInstalled) {
		return shellExecOut{}, notInstalled("python3 is not installed in this sandbox's template")
	}
	if err != nil {
		return shellExecOut{}, err
	}
	return commandResult(res), nil
}

// ---- pip_install ----

type pipInstallIn struct {
	Packages  []string `json:"packages"`
	IndexURL  string   `json:"index_url"`
	FindLinks string   `json:"find_links"`
	NoIndex   bool     `json:"no_index"`
	Upgrade   bool     `json:"upgrade"`
	Timeout   *int     `json:"timeout"`
}

type pipPackage struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

type pipInstallOut struct {
	Installed        []pipPackage `json:"installed"`
	AlreadySatisfied []string     `json:"already_satisfied"`
	Output           string       `json:"output"`
}

func (o pipInstallOut) Text() string {
	var b strings.Builder
	if len(o.Installed) > 0 {
		b.WriteString("installed:")
		for _, p := range o.Installed {
			fmt.Fprintf(&b, " %s==%s", p.Name, p.Version)
		}
		b.WriteString("\n")
	}
	if len(o.AlreadySatisfied) > 0 {
		b.WriteString("already satisfied: " + strings.Join(o.AlreadySatisfied, ", ") + "\n")
	}
	if b.Len() == 0 {
		return o.Output
	}
	return b.String()
}

// pip's network bounds: one retry and 20 s per network operation, against
// its defaults of 5 and 15 s, so that an index the sandbox cannot reach
// fails within seconds with pip's own message rather than after minutes of
// retries; the call's timeout bounds the whole install.
const (
	pipRetries       = "1"
	pipSocketTimeout = "20"
)

var pipRequirement = func(s string) error {
	switch {
	case strings.TrimSpace(s) == "":
		return errors.New("is empty")
	case strings.HasPrefix(s, "-"):
		return errors.New("starts with '-': options are not packages (use upgrade, index_url, find_links, no_index)")
	case strings.ContainsAny(s, "\x00\n\r"):
		return errors.New("contains a NUL byte or a line break")
	case len(s) > 1024:
		return errors.New("is longer than 1024 bytes")
	}
	return nil
}

func pipInstallTool() *Tool {
	return define(Tool{
		Name:  "pip_install",
		Title: "Install Python packages",
		Description: "Install Python packages into the sandbox's python3 with `python3 -m pip install` (run inside the " +
			"sandbox, so its network policy applies). packages are requirement specifiers as pip takes them: " +
			"names with optional versions (\"requests\", \"numpy==2.1.0\", \"flask>=3\"), paths of wheels or " +
			"project directories in the sandbox, or URLs. upgrade adds --upgrade; index_url replaces the package " +
			"index (--index-url); find_links adds a directory or page of packages to look in (--find-links); " +
			"no_index (--no-index) installs only from find_links, with no index at all. pip runs with " +
			"--retries " + pipRetries + " and --timeout " + pipSocketTimeout + " so that an unreachable index " +
			"fails within seconds with pip's own message (a sandbox without network cannot reach PyPI: give " +
			"find_links with no_index there); PIP_BREAK_SYSTEM_PACKAGES is set, since the sandbox's Python is its " +
			"own to change. timeout bounds the whole install, in seconds, 1–3600, default 300. Returns installed " +
			"({name, version} of each package pip installed), already_satisfied and pip's output; a failed install " +
			"is an error quoting pip's messages.",
		Capability:  CapPython,
		Destructive: true,
		Input: json.RawMessage(`{
  "type": "object",
  "required": ["packages"],
  "properties": {
    "packages": {"type": "array", "minItems": 1, "maxItems": 200, "items": {"type": "string"}, "description": "Requirement specifiers, e.g. [\"requests==2.32.3\", \"/workspace/dist/mypkg-1.0-py3-none-any.whl\"]."},
    "index_url": {"type": "string", "description": "Base URL of the package index (pip --index-url), e.g. a local mirror."},
    "find_links": {"type": "string", "description": "A directory in the sandbox or a URL of a page with links to packages (pip --find-links)."},
    "no_index": {"type": "boolean", "default": false, "description": "Use no index: only find_links and local paths (pip --no-index)."},
    "upgrade": {"type": "boolean", "default": false, "description": "Upgrade packages that are already installed (pip --upgrade)."},
    "timeout": {"type": "integer", "minimum": 1, "maximum": 3600, "default": 300, "description": "Seconds before the install is killed (1–3600, default 300)."}
  },
  "additionalProperties": false
}`),
		Output: json.RawMessage(`{
  "type": "object",
  "required": ["installed", "already_satisfied", "output"],
  "properties": {
    "installed": {"type": "array", "items": {"type": "object", "required": ["name", "version"], "properties": {"name": {"type": "string"}, "version": {"type": "string"}}}, "description": "What pip installed (its \"Successfully installed\" line)."},
    "already_satisfied": {"type": "array", "items": {"type": "string"}, "description": "Requirements pip found already installed."},
    "output": {"type": "string", "description": "pip's output (stdout, then stderr)."}
  }
}`),
	}, runPipInstall)
}

func runPipInstall(ctx context.Context, c *Call, in pipInstallIn) (pipInstallOut, error) {
	if len(in.Packages) == 0 {
		return pipInstallOut{}, sandbox.Invalid("packages", "is empty: give at least one package")
	}
	if len(in.Packages) > 200 {
		return pipInstallOut{}, sandbox.Invalid("packages", "has %d items, more than 200", len(in.Packages))
	}
	for i, p := range in.Packages {
		if err := pipRequirement(p); err != nil {
			return pipInstallOut{}, sandbox.Invalid(fmt.Sprintf("packages[%d]", i), "%q %v", truncate(p, 80), err)
		}
	}
	for _, f := range []struct{ name, v string }{{"index_url", in.IndexURL}, {"find_links", in.FindLinks}} {
		if f.v == "" {
			continue
		}
		if strings.HasPrefix(f.v, "-") || strings.ContainsAny(f.v, "\x00\n\r") {
			return pipInstallOut{}, sandbox.Invalid(f.name, "%q is not a URL or path", truncate(f.v, 80))
		}
	}
	if in.NoIndex && in.IndexURL != "" {
		return pipInstallOut{}, sandbox.Invalid("no_index", "and index_url exclude each other")
	}
	timeout, err := seconds("timeout", in.Timeout, 300, 1, 3600)
	if err != nil {
		return pipInstallOut{}, err
	}
	argv := []string{"python3", "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
		"--retries", pipRetries, "--timeout", pipSocketTimeout}
	if in.Upgrade {
		argv = append(argv, "--upgrade")
	}
	if in.IndexURL != "" {
		argv = append(argv, "--index-url", in.IndexURL)
	}
	if in.FindLinks != "" {
		argv = append(argv, "--find-links", in.FindLinks)
	}
	if in.NoIndex {
		argv = append(argv, "--no-index")
	}
	argv = append(argv, "--")
	argv = append(argv, in.Packages...)
	res, err := c.run(ctx, command{argv: argv, timeout: timeout, env: map[string]string{
		"PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_ROOT_USER_ACTION": "ignore", "PIP_NO_INPUT": "1"}})
	if errors.Is(err, errNotInstalled) {
		return pipInstallOut{}, notInstalled("python3 is not installed in this sandbox's template")
	}
	if err != nil {
		return pipInstallOut{}, err
	}
	output := strings.TrimSpace(string(res.Stdout) + "\n" + string(res.Stderr))
	switch {
	case res.Reason == sandbox.ReasonTimeout:
		return pipInstallOut{}, fmt.Errorf("%w: pip install ran past its timeout (%s) and was killed; its output:\n%s", sandbox.ErrTimeout, timeout, outputTail(res, 4000))
	case res.ExitCode != 0:
		if strings.Contains(output, "No module named pip") {
			return pipInstallOut{}, notInstalled("pip is not installed for this sandbox's python3 (No module named pip)")
		}
		return pipInstallOut{}, fmt.Errorf("%w: pip install failed (exit code %d):\n%s", pipClass(output), res.ExitCode, pipErrors(output))
	}
	installed, satisfied := parsePipOutput(output)
	return pipInstallOut{Installed: installed, AlreadySatisfied: satisfied, Output: output}, nil
}

// pipClass is the error class of a failed pip install's output.
func pipClass(output string) error {
	switch {
	case strings.Contains(output, "No matching distribution found"):
		return sandbox.ErrNotFound
	case strings.Contains(output, "Invalid requirement"):
		return sandbox.ErrInvalid
	}
	return sandbox.ErrWrongState
}

// pipErrors keeps the lines of pip's output that say what went wrong (its
// ERROR and WARNING lines), or its tail when it has none.
func pipErrors(output string) string {
	var keep []string
	for _, l := range strings.Split(output, "\n") {
		if strings.HasPrefix(l, "ERROR:") || strings.HasPrefix(l, "WARNING:") || strings.HasPrefix(l, "error:") {
			keep = append(keep, l)
		}
	}
	s := strings.Join(keep, "\n")
	if s == "" {
		s = output
	}
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

// parsePipOutput reads what pip install did: its "Successfully installed
// name-version …" line and its "Requirement already satisfied: req in …"
// lines.
func parsePipOutput(output string) (installed []pipPackage, satisfied []string) {
	installed, satisfied = []pipPackage{}, []string{}
	for _, l := range strings.Split(output, "\n") {
		l = strings.TrimSpace(l)
		if rest, ok := strings.CutPrefix(l, "Successfully installed "); ok {
			for _, f := range strings.Fields(rest) {
				i := strings.LastIndexByte(f, '-')
				if i <= 0 {
					installed = append(installed, pipPackage{Name: f})
					continue
				}
				installed = append(installed, pipPackage{Name: f[:i], Version: f[i+1:]})
			}
		}
		if rest, ok := strings.CutPrefix(l, "Requirement already satisfied: "); ok {
			req, _, _ := strings.Cut(rest, " in ")
			satisfied = append(satisfied, strings.TrimSpace(req))
		}
	}
	return installed, satisfied
}

// ---- process_list ----

type processListIn struct{}

type processEntry struct {
	PID            int    `json:"pid"`
	PPID           int    `json:"ppid"`
	User           string `json:"user"`
	State          string `json:"state"`
	Elapsed        string `json:"elapsed"`
	ElapsedSeconds int64  `json:"elapsed_seconds"`
	RSSKB          int64  `json:"rss_kb"`
	Command        string `json:"command"`
}

type processListOut struct {
	Processes []processEntry `json:"processes"`
}

func (o processListOut) Text() string {
	var b strings.Builder
	b.WriteString("PID\tPPID\tUSER\tSTAT\tELAPSED\tRSS_KB\tCOMMAND\n")
	for _, p := range o.Processes {
		fmt.Fprintf(&b, "%d\t%d\t%s\t%s\t%s\t%d\t%s\n", p.PID, p.PPID, p.User, p.State, p.Elapsed, p.RSSKB, p.Command)
	}
	return b.String()
}

// psFormat is ps's output format: every field but the last has no spaces.
const psFormat = "pid=,ppid=,user:64=,stat=,etimes=,rss=,args="

func processListTool() *Tool {
	return define(Tool{
		Name:  "process_list",
		Title: "List processes",
		Description: "List every process running in the sandbox (ps inside it): pid, ppid, user, state (ps STAT " +
			"letters: R running, S sleeping, D disk wait, Z zombie, T stopped; + foreground, s session leader, " +
			"l threaded), elapsed (time since it started, [[dd-]hh:]mm:ss) and elapsed_seconds, rss_kb (resident " +
			"memory) and command (its full command line). Takes no arguments. Stop a process with shell_exec " +
			"(kill PID).",
		Capability: CapShell,
		ReadOnly:   true,
		Input:      json.RawMessage(`{"type": "object", "properties": {}, "additionalProperties": false}`),
		Output: json.RawMessage(`{
  "type": "object",
  "required": ["processes"],
  "properties": {
    "processes": {"type": "array", "items": {
      "type": "object",
      "required": ["pid", "ppid", "user", "state", "elapsed", "elapsed_seconds", "rss_kb", "command"],
      "properties": {
        "pid": {"type": "integer"},
        "ppid": {"type": "integer"},
        "user": {"type": "string"},
        "state": {"type": "string", "description": "ps STAT, e.g. S, R+, Ss, Z."},
        "elapsed": {"type": "string", "description": "Time since start, [[dd-]hh:]mm:ss."},
        "elapsed_seconds": {"type": "integer"},
        "rss_kb": {"type": "integer", "description": "Resident memory in KiB."},
        "command": {"type": "string", "description": "The full command line."}
      }
    }}
  }
}`),
	}, runProcessList)
}

func runProcessList(ctx context.Context, c *Call, _ processListIn) (processListOut, error) {
	res, err := c.run(ctx, command{argv: []string{"ps", "-e", "-ww", "-o", psFormat}, timeout: 30 * time.Second, output: 4 << 20})
	if errors.Is(err, errNotInstalled) {
		return processListOut{}, notInstalled("ps is not installed in this sandbox's template (Debian's procps package has it)")
	}
	if err != nil {
		return processListOut{}, err
	}
	if res.ExitCode != 0 {
		return processListOut{}, fmt.Errorf("%w: ps failed (exit code %d): %s", sandbox.ErrWrongState, res.ExitCode, outputTail(res, 2000))
	}
	procs := parsePS(string(res.Stdout))
	// ps itself is no process of the sandbox's.
	procs = slices.DeleteFunc(procs, func(p processEntry) bool { return p.PID == res.PID })
	return processListOut{Processes: procs}, nil
}

// parsePS reads ps's psFormat lines; a line that does not parse is skipped.
func parsePS(out string) []processEntry {
	procs := []processEntry{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 6 {
			continue
		}
		var p processEntry
		var err1, err2, err3, err4 error
		p.PID, err1 = strconv.Atoi(f[0])
		p.PPID, err2 = strconv.Atoi(f[1])
		p.User, p.State = f[2], f[3]
		p.ElapsedSeconds, err3 = strconv.ParseInt(f[4], 10, 64)
		p.RSSKB, err4 = strconv.ParseInt(f[5], 10, 64)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			continue
		}
		if p.ElapsedSeconds > maxElapsed {
			// procps 4.0 underflows the elapsed time of a process that
			// started within its clock's last tick (4123168608 for a
			// process started a millisecond before): it has just begun.
			p.ElapsedSeconds = 0
		}
		p.Elapsed = formatElapsed(p.ElapsedSeconds)
		// The command is the rest of the line after the sixth field, as ps wrote it.
		rest := l
		for range 6 {
			rest = strings.TrimLeft(rest, " \t")
			if i := strings.IndexAny(rest, " \t"); i >= 0 {
				rest = rest[i:]
			} else {
				rest = ""
			}
		}
		p.Command = strings.TrimSpace(rest)
		procs = append(procs, p)
	}
	return procs
}

// maxElapsed is more than any process has run (68 years): a larger elapsed
// time from ps is an underflow.
const maxElapsed = 1<<31 - 1

// formatElapsed renders seconds as ps's etime does: [[dd-]hh:]mm:ss.
func formatElapsed(s int64) string {
	d, h, m := s/86400, s/3600%24, s/60%60
	s %= 60
	switch {
	case d > 0:
		return fmt.Sprintf("%d-%02d:%02d:%02d", d, h, m, s)
	case h > 0:
		return fmt.Sprintf("%02d:%02d:%02d", h, m, s)
	}
	return fmt.Sprintf("%02d:%02d", m, s)
}
