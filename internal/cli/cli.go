// Package cli implements the sbx command line: the client subcommands, their --json
// output and exit codes. `sbx serve` is handed in by main, so cli stays client-side.
//
// stdout carries the result and nothing else; progress, warnings and errors go to
// stderr (with --json, errors are the API's {"error":{…}} object). Exit codes:
// 0 ok, 1 error, 2 misuse; exec and run return the command's own code, 124 on its
// timeout, 128+n when signal n ended it, and 125 when sbx itself failed.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"sbx.dev/sbx/client"
)

// ServeFunc runs the daemon with the arguments after "serve"; it returns an exit code.
type ServeFunc func(ctx context.Context, args []string) int

// Exit codes of sbx's own.
const (
	exitOK     = 0
	exitError  = 1
	exitMisuse = 2
	// exitSbx is exec's and run's code when sbx itself failed, as docker run's.
	exitSbx = 125
)

// env is what a command reads and writes; tests hand in their own.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	euid           int
	serve          ServeFunc
	gc             ServeFunc
	// cmd is the subcommand running, for messages.
	cmd string
	// newClient finds the daemon; tests may replace it.
	newClient func() (*client.Client, error)
}

// Run runs the command line args (without the program name) and returns the exit code.
func Run(ctx context.Context, args []string, serve ServeFunc, gc ServeFunc) int {
	e := &env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, euid: os.Geteuid(), serve: serve, gc: gc}
	return e.run(ctx, args)
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env, args []string) int
}

func commands() []command {
	return []command{
		{"serve", "start the daemon", runServe},
		{"create", "create a sandbox; print its id", runCreate},
		{"exec", "run a command in a sandbox", runExec},
		{"run", "create a sandbox, run a command in it, delete it", runRun},
		{"cp", "copy files into or out of a sandbox", runCp},
		{"ls", "list sandboxes", runLs},
		{"get", "show a sandbox", runGet},
		{"rm", "delete sandboxes", runRm},
		{"url", "print the preview URL of a port of a sandbox", runURL},
		{"network", "change a sandbox's network tier, or show its egress decisions: network set|events", runNetwork},
		{"secret", "set, list or delete secrets: secret set|ls|rm", runSecret},
		{"tools", "list the agent tools", runTools},
		{"tool", "call an agent tool in a sandbox", runTool},
		{"health", "show the daemon's backends", runHealth},
		{"mcp", "serve the daemon's tools over MCP on stdin and stdout", runMCP},
		{"bench", "run the benchmark", runBench},
		{"gc", "remove sandboxes whose daemon and data dir are gone", runGC},
		{"version", "print the version", runVersion},
	}
}

func (e *env) run(ctx context.Context, args []string) int {
	if e.newClient == nil {
		e.newClient = func() (*client.Client, error) {
			return client.DiscoverEnv(client.Env{Getenv: e.getenv, Euid: e.euid}, client.WithUserAgent("sbx-cli/"+version()))
		}
	}
	if len(args) == 0 {
		e.usage(e.stdout)
		return exitOK
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if i := slices.IndexFunc(commands(), func(c command) bool { return c.name == args[1] }); i >= 0 {
				e.cmd = args[1]
				return commands()[i].run(ctx, e, []string{"-h"})
			}
		}
		e.usage(e.stdout)
		return exitOK
	}
	for _, c := range commands() {
		if c.name == args[0] {
			e.cmd = c.name
			return c.run(ctx, e, args[1:])
		}
	}
	fmt.Fprintf(e.stderr, "sbx: unknown command %q\n", args[0])
	e.usage(e.stderr)
	return exitMisuse
}

func (e *env) usage(w io.Writer) {
	fmt.Fprintln(w, "usage: sbx <command> [flags] [args]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The daemon is found by SBX_URL and SBX_API_KEY, else by the local data dir's")
	fmt.Fprintln(w, "sbx.sock and admin.key. Every command takes --json. `sbx <command> -h` for its flags.")
}

// flagSet returns a flag set for command name whose usage line is synopsis.
func (e *env) flagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("sbx "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: sbx %s %s\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseErr reports a flag error: help to stdout (exit 0), misuse to stderr.
func (e *env) parseErr(fs *flag.FlagSet, err error, misuse int) int {
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(e.stdout)
		fs.Usage()
		return exitOK
	}
	return e.misuse(fs, misuse, "%v", err)
}

// misuse prints a usage error and the synopsis; it returns code.
func (e *env) misuse(fs *flag.FlagSet, code int, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "%s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fs.SetOutput(e.stderr)
	fs.Usage()
	return code
}

// parseInterleaved parses flags anywhere among the positional arguments, up to
// a "--", after which everything is positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > 0 && len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// fail prints err for command name and returns code: one line, or with
// jsonOut the API's error object, on stderr.
func (e *env) fail(name string, jsonOut bool, code int, err error) int {
	if jsonOut {
		b, _ := json.Marshal(client.WireError(err))
		fmt.Fprintf(e.stderr, "%s\n", b)
		return code
	}
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	fmt.Fprintf(e.stderr, "sbx %s: %s\n", name, msg)
	return code
}

// printJSON writes v as one line of JSON on stdout.
func (e *env) printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "%s\n", b)
	return err
}

// multiFlag is a repeatable flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// keyValues parses k=v pairs, naming flag in errors.
func keyValues(flagName string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pairs))
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want key=value", flagName, kv)
		}
		out[k] = v
	}
	return out, nil
}

func runGC(ctx context.Context, e *env, args []string) int {
	if e.gc == nil {
		fmt.Fprintln(e.stderr, "sbx gc: this build has no daemon")
		return exitError
	}
	return e.gc(ctx, args)
}

func runServe(ctx context.Context, e *env, args []string) int {
	if e.serve == nil {
		fmt.Fprintln(e.stderr, "sbx serve: this build has no daemon")
		return exitError
	}
	return e.serve(ctx, args)
}
