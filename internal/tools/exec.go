// This file implements sandbox.exec (seed 001): code run by a named runtime,
// with the seed's exact errors.

package tools

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"sbx/internal/sandbox"
)

type execIn struct {
	Runtime   string            `json:"runtime"`
	Code      string            `json:"code"`
	Stdin     string            `json:"stdin"`
	TimeoutMS *int              `json:"timeout_ms"`
	Secrets   map[string]string `json:"secrets"`
}

type execOut struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exit_code"`
}

func (o execOut) Text() string { return commandText(o.Stdout, o.Stderr, o.ExitCode) }

// runtimes maps each runtime to the argv that runs code with it.
var runtimes = map[string]func(code string) []string{
	"sh":      func(code string) []string { return []string{"/bin/sh", "-c", code} },
	"python3": func(code string) []string { return []string{"python3", "-c", code} },
	"node":    func(code string) []string { return []string{"node", "-e", code} },
}

var execInput = []byte(`{
  "type": "object",
  "required": ["runtime", "code"],
  "properties": {
    "runtime": {"type": "string", "enum": ["sh", "python3", "node"], "description": "The runtime to execute the code in."},
    "code": {"type": "string", "description": "The code or script to execute."},
    "stdin": {"type": "string", "description": "Optional data to pipe to stdin."},
    "timeout_ms": {"type": "integer", "minimum": 1, "default": 5000, "description": "Execution timeout in milliseconds. Default: 5000."},
    "secrets": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Map of env var name to secret value or handle. Injected into the sandboxed process environment."}
  },
  "additionalProperties": false
}`)

var execOutput = []byte(`{
  "type": "object",
  "properties": {
    "stdout": {"type": "string", "description": "Standard output."},
    "stderr": {"type": "string", "description": "Standard error."},
    "exit_code": {"type": "integer", "description": "Process exit code."}
  },
  "required": ["stdout", "stderr", "exit_code"]
}`)

func execTools() []*Tool {
	return []*Tool{define(Tool{
		Name:  "sandbox.exec",
		Title: "Execute code",
		Description: "Execute code in the sandbox with the sh, python3 or node runtime and return stdout, stderr and " +
			"exit_code. The process has no network access by default and is killed after timeout_ms milliseconds " +
			"(default 5000), which fails the call with the error \"timeout\". A non-zero exit is a success: check " +
			"exit_code and stderr. Errors: \"access denied: sandbox.exec\" (the API key lacks the capability), " +
			"\"runtime not found: <runtime>\" (not installed in the sandbox), \"timeout\".",
		Capability: CapExec,
		Input:      execInput,
		Output:     execOutput,
	}, runExec)}
}

func runExec(ctx context.Context, c *Call, in execIn) (execOut, error) {
	argv, ok := runtimes[in.Runtime]
	if !ok {
		return execOut{}, sandbox.Invalid("runtime", "%q is not one of sh, python3, node", truncate(in.Runtime, 40))
	}
	ms := 5000
	if in.TimeoutMS != nil {
		if ms = *in.TimeoutMS; ms < 1 {
			return execOut{}, sandbox.Invalid("timeout_ms", "%d is below 1", ms)
		}
	}
	secrets, err := secretEnv(in.Secrets)
	if err != nil {
		return execOut{}, err
	}
	env, err := c.toolEnv(ctx) // env_set's variables, under the call's secrets
	if err != nil {
		return execOut{}, err
	}
	env = merged(env, secrets)
	res, err := c.M().Exec(ctx, c.Sandbox, sandbox.ExecRequest{Argv: argv(in.Code), Stdin: []byte(in.Stdin),
		Env: env, Timeout: time.Duration(ms) * time.Millisecond, OutputLimitBytes: toolOutputLimit}, false, nil)
	switch {
	case err != nil:
		return execOut{}, err
	case res.Reason == sandbox.ReasonTimeout:
		return execOut{}, exact(sandbox.ErrTimeout, "timeout")
	case notRun(res):
		return execOut{}, exact(sandbox.ErrNotFound, "runtime not found: "+in.Runtime)
	}
	return execOut{Stdout: string(res.Stdout), Stderr: string(res.Stderr) + endNotice(res), ExitCode: res.ExitCode}, nil
}

var (
	envName      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	secretHandle = regexp.MustCompile(`^\{\{\s*secret:([^}]*)\}\}$`)
)

// secretEnv turns secrets into environment variables. Values are injected as
// given; a {{secret:name}} handle needs the daemon's secret store, which this
// daemon does not hold, so it is refused by name rather than injected as text.
func secretEnv(secrets map[string]string) (map[string]string, error) {
	if len(secrets) == 0 {
		return nil, nil
	}
	env := make(map[string]string, len(secrets))
	for k, v := range secrets {
		if !envName.MatchString(k) {
			return nil, sandbox.Invalid("secrets", "%q is not an environment variable name", truncate(k, 80))
		}
		if m := secretHandle.FindStringSubmatch(v); m != nil {
			return nil, fmt.Errorf("secrets: %s: secret %w: %q (this daemon has no secret store)", k, sandbox.ErrNotFound, truncate(m[1], 80))
		}
		env[k] = v
	}
	return env, nil
}

// merged returns the maps' union, later ones winning; nil when all are empty.
func merged(ms ...map[string]string) map[string]string {
	var out map[string]string
	for _, m := range ms {
		for k, v := range m {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}
