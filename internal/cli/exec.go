// This file implements `sbx exec`: the command's output streams to stdout and
// stderr as it comes, and its exit status becomes sbx's.

package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/client"
	"sbx.dev/sbx/internal/sandbox"
)

// execFlags are the flags of exec, shared by run.
type execFlags struct {
	timeout int64
	cwd     string
	env     multiFlag
	secrets multiFlag // exec's own: run takes --secret at create
	stdin   bool
}

func (x *execFlags) register(fs *flag.FlagSet, withTimeout bool) {
	if withTimeout {
		fs.Int64Var(&x.timeout, "timeout", 0, "command timeout in `seconds`, 1–3600 (default 60)")
	}
	fs.StringVar(&x.cwd, "cwd", "", "working `directory` (default the sandbox's home)")
	fs.Var(&x.env, "env", "environment variable `K=V` (repeatable)")
	fs.BoolVar(&x.stdin, "i", false, "send stdin to the command")
}

const execSynopsis = "[--timeout S] [--cwd D] [--env K=V]… [--secret ENV=NAME]… [-i] [-t] [--json] ID -- CMD [ARGS…]\n\n" +
	"-t (--tty) runs CMD in a terminal in the sandbox, driven from this one: keys (^C included) go\n" +
	"to CMD, the window's size follows. Its timeout defaults to the daemon's longest. With stdin not\n" +
	"a terminal (a pipe), stdin is sent as typed and its end as ^D."

func runExec(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("exec", execSynopsis)
	var xf execFlags
	xf.register(fs, true)
	fs.Var(&xf.secrets, "secret", "`ENV=NAME`: environment variable ENV gets secret NAME (sbx secret set) (repeatable)")
	jsonOut := fs.Bool("json", false, "print the stream's events as JSON lines")
	var tty bool
	fs.BoolVar(&tty, "t", false, "run the command in a terminal (interactive: a shell, an editor, a REPL)")
	fs.BoolVar(&tty, "tty", false, "the same as -t")
	if err := fs.Parse(args); err != nil {
		return e.parseErr(fs, err, exitSbx)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return e.misuse(fs, exitSbx, "missing sandbox ID")
	}
	id, rest := rest[0], rest[1:]
	// Flags may also come between the ID and "--".
	if i := indexOf(rest, "--"); i >= 0 {
		if err := fs.Parse(rest[:i]); err != nil {
			return e.parseErr(fs, err, exitSbx)
		}
		if fs.NArg() > 0 {
			return e.misuse(fs, exitSbx, "unexpected argument %q before --", fs.Arg(0))
		}
		rest = rest[i+1:]
	}
	if len(rest) == 0 {
		return e.misuse(fs, exitSbx, "missing command after --")
	}
	if tty && *jsonOut {
		return e.misuse(fs, exitSbx, "-t and --json do not go together: a terminal's output is its raw bytes")
	}
	if tty && len(xf.secrets) > 0 {
		return e.misuse(fs, exitSbx, "-t does not take --secret: give the secret at create (sbx create --secret)")
	}
	if tty {
		xf.stdin = false // a terminal streams stdin as it comes, never reads it ahead
	}
	req, err := xf.request(fs, rest, e.stdin)
	if err != nil {
		return e.misuse(fs, exitSbx, "%v", err)
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("exec", *jsonOut, exitSbx, err)
	}
	defer c.Close()
	if tty {
		return execTTY(ctx, e, c, id, ptyRequest(req))
	}
	return execStream(ctx, e, c, "exec", id, req, *jsonOut)
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// request builds the exec request: argv verbatim, never through a host shell.
func (x *execFlags) request(fs *flag.FlagSet, argv []string, stdin io.Reader) (openapi.ExecRequest, error) {
	req := openapi.ExecRequest{Argv: argv, Cwd: x.cwd}
	if fs.Lookup("timeout") != nil && fs.Name() == "sbx exec" {
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "timeout" { // sent as given: an explicit 0 is refused by the daemon
				t := x.timeout
				req.Timeout = &t
			}
		})
	}
	env, err := keyValues("env", x.env)
	if err != nil {
		return req, err
	}
	req.Env = env
	if req.Secrets, err = keyValues("secret", x.secrets); err != nil {
		return req, err
	}
	if x.stdin {
		// The whole of stdin is read first and sent with the request.
		b, err := io.ReadAll(stdin)
		if err != nil {
			return req, fmt.Errorf("reading stdin: %v", err)
		}
		s := base64.StdEncoding.EncodeToString(b)
		req.StdinBase64 = &s
	}
	return req, nil
}

// killGrace bounds stopping a command after sbx was interrupted.
const killGrace = 10 * time.Second

// execStream runs req in sandbox id, streaming its output, and returns the exit
// code for it. When ctx ends first (Ctrl-C), the command is killed: it would
// otherwise outlive the request. So it is when what reads sbx's output goes
// away (`sbx exec ID -- yes | head`): as in a local pipeline, the command
// ends and sbx exits 141 (128 + SIGPIPE), quietly.
func execStream(ctx context.Context, e *env, c *client.Client, name, id string, req openapi.ExecRequest, jsonOut bool) int {
	// A write to a closed stdout then fails with EPIPE instead of ending sbx
	// at once, before it could stop the command.
	signal.Ignore(syscall.SIGPIPE)
	var processID string
	dropped := map[string]int64{}
	res, err := c.ExecStream(ctx, id, req, func(ev openapi.Event) error {
		switch ev.Type {
		case openapi.EventStarted:
			processID = ev.ProcessID
		case openapi.EventDropped:
			dropped[ev.Stream] += ev.Bytes
		}
		if jsonOut {
			if ev.Raw != nil { // a frame's bytes: as the NDJSON stream has them
				ev.Data, ev.DataBase64 = openapi.Text(ev.Raw)
			}
			return e.printJSON(ev)
		}
		switch ev.Type {
		case openapi.EventStdout:
			_, err := e.stdout.Write(client.EventData(ev))
			return err
		case openapi.EventStderr:
			_, err := e.stderr.Write(client.EventData(ev))
			return err
		}
		return nil
	})
	if err != nil {
		kill := func() {
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killGrace)
			c.Signal(kctx, id, processID, "SIGKILL")
			cancel()
		}
		switch {
		case ctx.Err() != nil && processID != "":
			kill()
			fmt.Fprintf(e.stderr, "sbx %s: interrupted; the command was killed\n", name)
			return 130
		case errors.Is(err, syscall.EPIPE) && processID != "":
			kill()
			return 128 + int(syscall.SIGPIPE)
		}
		return e.fail(name, jsonOut, execErrorCode(err), err)
	}
	for _, stream := range []string{"stdout", "stderr"} {
		if n := dropped[stream]; n > 0 && !jsonOut {
			fmt.Fprintf(e.stderr, "sbx %s: %d bytes of the command's %s were not delivered (dropped by the live stream)\n", name, n, stream)
		}
	}
	return client.ExitCode(res)
}

// execErrorCode is the exit code of an exec that failed before a result: 127
// when the command was not found (as sh's), else 125, sbx's own failure.
func execErrorCode(err error) int {
	if errors.Is(err, sandbox.ErrNotFound) && !strings.Contains(err.Error(), "sandbox not found") {
		return 127
	}
	return exitSbx
}
