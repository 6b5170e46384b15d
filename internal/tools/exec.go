// This file implements sandbox.exec (seed 001): code run by a named runtime,
// with the seed's exact errors.

package tools

import (
	"context"
	"regexp"
	"strings"
	"time"

	"sbx.dev/sbx/internal/sandbox"
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
    "secrets": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Map of env var name to secret value or handle. Injected into the sandboxed process environment. A handle {{secret:name}} names a secret of the caller's API key (POST /v1/secrets): an env-mode secret's value, or a proxy-mode secret's placeholder that the egress proxy swaps for the value in requests to the secret's hosts. An unknown name fails the call, naming it, and runs nothing."}
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
	values, handles, err := secretEnv(in.Secrets)
	if err != nil {
		return execOut{}, err
	}
	env, err := c.toolEnv(ctx) // env_set's variables, under the call's secrets
	if err != nil {
		return execOut{}, err
	}
	env = merged(env, values)
	for k := range handles {
		delete(env, k) // the secret's, which the manager puts there
	}
	res, err := c.M().Exec(ctx, c.Sandbox, sandbox.ExecRequest{Argv: argv(in.Code), Stdin: []byte(in.Stdin),
		Env: env, Secrets: handles, Timeout: time.Duration(ms) * time.Millisecond, OutputLimitBytes: toolOutputLimit}, false, nil)
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

// secretEnv splits sandbox.exec's secrets into variables given as values,
// injected as they are, and handles {{secret:name}}, which name secrets of
// the caller's API key for the manager to resolve (variable → secret name):
// an unknown name fails the call, naming it, before anything runs.
func secretEnv(secrets map[string]string) (values, handles map[string]string, err error) {
	for k, v := range secrets {
		if !envName.MatchString(k) {
			return nil, nil, sandbox.Invalid("secrets", "%q is not an environment variable name", truncate(k, 80))
		}
		if m := secretHandle.FindStringSubmatch(v); m != nil {
			name := strings.TrimSpace(m[1])
			if name == "" {
				return nil, nil, sandbox.Invalid("secrets", "%s: the handle names no secret ({{secret:name}})", k)
			}
			if handles == nil {
				handles = map[string]string{}
			}
			handles[k] = name
			continue
		}
		if values == nil {
			values = map[string]string{}
		}
		values[k] = v
	}
	return values, handles, nil
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
