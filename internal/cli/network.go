// This file implements `sbx network`.

package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"sbx.dev/sbx/api/openapi"
)

const networkSynopsis = "set [--json] ID --network none|allowlist|full [--allow D]… [--block D]…  |  events [--json] ID"

func runNetwork(ctx context.Context, e *env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintf(e.stderr, "usage: sbx network %s\n", networkSynopsis)
		return exitMisuse
	}
	switch args[0] {
	case "set":
		return runNetworkSet(ctx, e, args[1:])
	case "events":
		return runNetworkEvents(ctx, e, args[1:])
	}
	fmt.Fprintf(e.stderr, "sbx network: unknown command %q (want set or events)\n", args[0])
	return exitMisuse
}

func runNetworkSet(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("network set", "[--json] ID --network none|allowlist|full [--allow D]… [--block D]…")
	jsonOut := fs.Bool("json", false, "print the sandbox as JSON")
	mode := fs.String("network", "", "network `tier`: none, allowlist or full (--allow alone means allowlist)")
	var allow, block multiFlag
	fs.Var(&allow, "allow", "with allowlist: a `domain`, *.domain, IP or CIDR it may reach (repeatable)")
	fs.Var(&block, "block", "a `domain`, *.domain, IP or CIDR it may never reach (repeatable)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	if len(pos) != 1 {
		return e.misuse(fs, exitMisuse, "want one sandbox ID")
	}
	if *mode == "" && len(allow) > 0 {
		*mode = "allowlist"
	}
	if *mode == "" {
		return e.misuse(fs, exitMisuse, "--network is required (none, allowlist or full)")
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("network", *jsonOut, exitError, err)
	}
	defer c.Close()
	sb, err := c.SetNetwork(ctx, pos[0], openapi.NetworkPolicy{Mode: *mode, Allow: allow, Block: block})
	if err != nil {
		return e.fail("network", *jsonOut, exitError, err)
	}
	if *jsonOut {
		e.printJSON(sb)
		return exitOK
	}
	fmt.Fprintln(e.stdout, networkString(sb.Network))
	return exitOK
}

func runNetworkEvents(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("network events", "[--json] ID")
	jsonOut := fs.Bool("json", false, "print the events as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	if len(pos) != 1 {
		return e.misuse(fs, exitMisuse, "want one sandbox ID")
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("network", *jsonOut, exitError, err)
	}
	defer c.Close()
	ev, err := c.NetworkEvents(ctx, pos[0])
	if err != nil {
		return e.fail("network", *jsonOut, exitError, err)
	}
	if *jsonOut {
		e.printJSON(ev)
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tVERDICT\tPROTOCOL\tDESTINATION\tRULE")
	for _, x := range ev.Events {
		verdict := "refused"
		if x.Allowed {
			verdict = "allowed"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", x.Time.Local().Format(time.TimeOnly), verdict, x.Protocol, x.Destination, x.Rule)
	}
	tw.Flush()
	fmt.Fprintf(e.stdout, "%d allowed, %d refused in all\n", ev.Allowed, ev.Refused)
	return exitOK
}
