// This file implements `sbx create`.

package cli

import (
	"context"
	"flag"
	"fmt"
	"math"

	"sbx.dev/sbx/api/openapi"
)

// createFlags are the flags of create, shared by run.
type createFlags struct {
	template string
	timeout  int64
	memoryMB int64
	cpus     float64
	pids     int64
	diskMB   int64
	network  string
	allow    multiFlag
	block    multiFlag
	labels   multiFlag
	secrets  multiFlag
}

func (c *createFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.template, "template", "", "template `name` (default: the daemon's first)")
	fs.Int64Var(&c.timeout, "timeout", 0, "time to live in `seconds` (default: the daemon's, 300)")
	fs.Int64Var(&c.memoryMB, "memory-mb", 0, "memory limit in `MiB`")
	fs.Float64Var(&c.cpus, "cpus", 0, "CPU `cores`, fractional")
	fs.Int64Var(&c.pids, "pids", 0, "most processes at `once`")
	fs.Int64Var(&c.diskMB, "disk-mb", 0, "writable disk in `MiB`")
	fs.StringVar(&c.network, "network", "", "network `tier`: none, allowlist or full")
	fs.Var(&c.allow, "allow", "with --network allowlist: a `domain`, *.domain, IP or CIDR it may reach (repeatable)")
	fs.Var(&c.block, "block", "a `domain`, *.domain, IP or CIDR it may never reach (repeatable; wins over --allow)")
	fs.Var(&c.labels, "label", "label `k=v` (repeatable)")
	fs.Var(&c.secrets, "secret", "`ENV=NAME`: environment variable ENV gets secret NAME (sbx secret set) (repeatable)")
}

// request builds the API request; only flags given on the command line are
// sent, so an explicit --timeout 0 reaches the daemon and is refused there.
func (c *createFlags) request(fs *flag.FlagSet) (openapi.CreateSandboxRequest, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	req := openapi.CreateSandboxRequest{Template: c.template}
	if c.network != "" || len(c.allow) > 0 || len(c.block) > 0 {
		mode := c.network
		if mode == "" && len(c.allow) > 0 {
			mode = "allowlist" // --allow says which tier it is for
		}
		req.Network = &openapi.NetworkPolicy{Mode: mode, Allow: c.allow, Block: c.block}
	}
	if set["timeout"] {
		req.Timeout = &c.timeout
	}
	if set["memory-mb"] {
		req.MemoryMB = &c.memoryMB
	}
	if set["cpus"] {
		if math.IsNaN(c.cpus) || math.IsInf(c.cpus, 0) {
			return req, fmt.Errorf("--cpus %v: not a number of cores", c.cpus)
		}
		req.CPUs = &c.cpus
	}
	if set["pids"] {
		req.Pids = &c.pids
	}
	if set["disk-mb"] {
		req.DiskMB = &c.diskMB
	}
	switch c.network {
	case "", "none", "allowlist", "full":
	default:
		return req, fmt.Errorf("--network %q: want none, allowlist or full", c.network)
	}
	labels, err := keyValues("label", c.labels)
	if err != nil {
		return req, err
	}
	req.Labels = labels
	if req.Secrets, err = keyValues("secret", c.secrets); err != nil {
		return req, err
	}
	return req, nil
}

const createSynopsis = "[--template T] [--timeout S] [--memory-mb N] [--cpus N] [--pids N] [--disk-mb N] [--network none|allowlist|full] [--allow D]… [--block D]… [--label k=v]… [--secret ENV=NAME]… [--json]"

func runCreate(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("create", createSynopsis)
	var cf createFlags
	cf.register(fs)
	jsonOut := fs.Bool("json", false, "print the sandbox as JSON")
	if err := fs.Parse(args); err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	if fs.NArg() > 0 {
		return e.misuse(fs, exitMisuse, "unexpected argument %q", fs.Arg(0))
	}
	req, err := cf.request(fs)
	if err != nil {
		return e.misuse(fs, exitMisuse, "%v", err)
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("create", *jsonOut, exitError, err)
	}
	defer c.Close()
	sb, err := c.Create(ctx, req)
	if err != nil {
		return e.fail("create", *jsonOut, exitError, err)
	}
	if *jsonOut {
		e.printJSON(sb)
		return exitOK
	}
	warnIsolation(e, sb)
	fmt.Fprintln(e.stdout, sb.ID) // the last line of stdout: id=$(sbx create)
	return exitOK
}

// warnIsolation tells stderr when a sandbox is weaker than a full sandbox.
func warnIsolation(e *env, sb *openapi.Sandbox) {
	switch {
	case !sb.Isolation.Sandbox:
		msg := sb.Isolation.Warning
		if msg == "" {
			msg = "backend " + sb.Backend + " is not a sandbox"
		}
		fmt.Fprintf(e.stderr, "sbx: warning: %s: NOT A SANDBOX: %s\n", sb.ID, msg)
	case sb.Isolation.Warning != "":
		fmt.Fprintf(e.stderr, "sbx: warning: %s: %s\n", sb.ID, sb.Isolation.Warning)
	}
}
