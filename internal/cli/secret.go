// This file implements `sbx secret set|ls|rm`: the caller's secrets. A value
// is read from stdin, never from the command line, where every user of the
// host could read it in the process table.

package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"sbx.dev/sbx/api/openapi"
)

// maxSecretBytes is the daemon's bound of a secret's value (64 KiB).
const maxSecretBytes = 64 << 10

const secretSynopsis = "set NAME [--mode env|proxy] [--host H]… [--json] < value\n" +
	"       sbx secret ls [--json]\n" +
	"       sbx secret rm [--json] NAME…\n\n" +
	"A secret belongs to the API key that sets it. Use it by name: sbx create --secret ENV=NAME,\n" +
	"sbx exec --secret ENV=NAME, or {{secret:NAME}} in sandbox.exec's secrets. Its value is read from\n" +
	"stdin (one trailing newline dropped; typed without echo on a terminal) and never shown again.\n" +
	"Mode env (the default) puts the value in the environment, where everything in the sandbox can\n" +
	"read it; mode proxy puts a placeholder there, which the egress proxy swaps for the value in\n" +
	"requests to the --host names only."

func runSecret(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("secret", secretSynopsis)
	if len(args) == 0 {
		return e.misuse(fs, exitMisuse, "missing set, ls or rm")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fs.SetOutput(e.stdout)
		fs.Usage()
		return exitOK
	case "set":
		return secretSet(ctx, e, args[1:])
	case "ls", "list":
		return secretLs(ctx, e, args[1:])
	case "rm", "delete":
		return secretRm(ctx, e, args[1:])
	}
	return e.misuse(fs, exitMisuse, "unknown subcommand %q (want set, ls or rm)", args[0])
}

func secretSet(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("secret set", "NAME [--mode env|proxy] [--host H]… [--json] < value")
	mode := fs.String("mode", "env", "`env` (the value in the environment) or proxy (a placeholder; the proxy adds the value for --host); proxy when --host is given")
	var hosts multiFlag
	fs.Var(&hosts, "host", "proxy mode: a `name` or *.name the value may be sent to (repeatable)")
	jsonOut := fs.Bool("json", false, "print the secret (never its value) as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	switch {
	case len(pos) == 0:
		return e.misuse(fs, exitMisuse, "missing the secret's NAME")
	case len(pos) > 1:
		return e.misuse(fs, exitMisuse, "unexpected argument %q: the value is read from stdin, never from the command line", pos[1])
	}
	modeSet := false
	fs.Visit(func(f *flag.Flag) { modeSet = modeSet || f.Name == "mode" })
	if !modeSet && len(hosts) > 0 {
		*mode = "proxy" // --host says which mode it is for
	}
	value, err := e.readSecret(pos[0])
	if err != nil {
		return e.misuse(fs, exitMisuse, "%v", err)
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("secret set", *jsonOut, exitError, err)
	}
	defer c.Close()
	info, replaced, err := c.SetSecret(ctx, openapi.SecretCreate{Name: pos[0], Value: value, Mode: *mode, Hosts: hosts})
	if err != nil {
		return e.fail("secret set", *jsonOut, exitError, err)
	}
	if *jsonOut {
		e.printJSON(info)
		return exitOK
	}
	if replaced {
		fmt.Fprintf(e.stderr, "sbx: replaced secret %s\n", info.Name)
	}
	fmt.Fprintln(e.stdout, info.Name)
	return exitOK
}

// readSecret reads a secret's value from stdin: typed without echo when
// stdin is a terminal, else all of it, less one trailing newline.
func (e *env) readSecret(name string) (string, error) {
	var b []byte
	if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(e.stderr, "value of secret %s (not echoed): ", name)
		v, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(e.stderr)
		if err != nil {
			return "", fmt.Errorf("reading the value: %v", err)
		}
		b = v
	} else {
		v, err := io.ReadAll(io.LimitReader(e.stdin, maxSecretBytes+3))
		if err != nil {
			return "", fmt.Errorf("reading the value from stdin: %v", err)
		}
		b = v
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	switch {
	case len(b) == 0:
		return "", fmt.Errorf("no value on stdin (sbx secret set %s < file, or printf %%s \"$VALUE\" | sbx secret set %s)", name, name)
	case len(b) > maxSecretBytes:
		return "", fmt.Errorf("the value on stdin is over %d bytes", maxSecretBytes)
	case !utf8.Valid(b):
		return "", fmt.Errorf("the value on stdin is not UTF-8 text")
	}
	return string(b), nil
}

func secretLs(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("secret ls", "[--json]")
	jsonOut := fs.Bool("json", false, `print {"secrets":[…]} as JSON`)
	if err := fs.Parse(args); err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	if fs.NArg() > 0 {
		return e.misuse(fs, exitMisuse, "unexpected argument %q", fs.Arg(0))
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("secret ls", *jsonOut, exitError, err)
	}
	defer c.Close()
	list, err := c.Secrets(ctx)
	if err != nil {
		return e.fail("secret ls", *jsonOut, exitError, err)
	}
	if *jsonOut {
		if list == nil {
			list = []openapi.SecretInfo{}
		}
		e.printJSON(openapi.SecretList{Secrets: list})
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMODE\tHOSTS\tUPDATED")
	now := time.Now()
	for _, s := range list {
		hosts := strings.Join(s.Hosts, ",")
		if hosts == "" {
			hosts = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Mode, hosts, ago(now.Sub(s.UpdatedAt)))
	}
	tw.Flush()
	return exitOK
}

func secretRm(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("secret rm", "[--json] NAME…")
	jsonOut := fs.Bool("json", false, `print {"deleted":[…]} as JSON`)
	names, err := parseInterleaved(fs, args)
	if err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	if len(names) == 0 {
		return e.misuse(fs, exitMisuse, "missing the secret's NAME")
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("secret rm", *jsonOut, exitError, err)
	}
	defer c.Close()
	deleted := []string{}
	code := exitOK
	for _, n := range names {
		if err := c.DeleteSecret(ctx, n); err != nil {
			code = e.fail("secret rm", *jsonOut, exitError, err)
			continue
		}
		deleted = append(deleted, n)
		if !*jsonOut {
			fmt.Fprintln(e.stdout, n)
		}
	}
	if *jsonOut {
		e.printJSON(map[string][]string{"deleted": deleted})
	}
	return code
}
