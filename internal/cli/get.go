// This file implements `sbx get`.

package cli

import (
	"sbx.dev/sbx/api/openapi"

	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

func runGet(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("get", "[--json] ID")
	jsonOut := fs.Bool("json", false, "print the sandbox as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	switch {
	case len(pos) == 0:
		return e.misuse(fs, exitMisuse, "missing sandbox ID")
	case len(pos) > 1:
		return e.misuse(fs, exitMisuse, "unexpected argument %q", pos[1])
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("get", *jsonOut, exitError, err)
	}
	defer c.Close()
	sb, err := c.Get(ctx, pos[0])
	if err != nil {
		return e.fail("get", *jsonOut, exitError, err)
	}
	if *jsonOut {
		e.printJSON(sb)
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 1, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("id", sb.ID)
	row("state", sb.State)
	if sb.StateReason != "" {
		row("state reason", sb.StateReason)
	}
	row("backend", sb.Backend)
	row("template", sb.Template)
	row("created", sb.CreatedAt.Local().Format(time.RFC3339))
	row("expires", sb.ExpiresAt.Local().Format(time.RFC3339)+" ("+until(time.Until(sb.ExpiresAt))+")")
	row("limits", fmt.Sprintf("memory %d MiB, cpus %g, pids %d, disk %d MiB, timeout %d s",
		sb.Limits.MemoryMB, sb.Limits.CPUs, sb.Limits.Pids, sb.Limits.DiskMB, sb.Limits.Timeout))
	row("network", networkString(sb.Network))
	row("labels", labelString(sb.Labels))
	row("isolation", level(*sb))
	var applied, missing []string
	for l, st := range sb.Isolation.Layers {
		switch st {
		case "applied":
			applied = append(applied, l)
		case "missing":
			missing = append(missing, l)
		}
	}
	sort.Strings(applied)
	sort.Strings(missing)
	row("layers applied", orDash(strings.Join(applied, " ")))
	if len(missing) > 0 {
		row("layers missing", strings.Join(missing, " "))
	}
	if sb.Isolation.Warning != "" {
		row("warning", sb.Isolation.Warning)
	}
	tw.Flush()
	return exitOK
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// networkString is a tier and its lists on one line.
func networkString(n openapi.NetworkPolicy) string {
	s := n.Mode
	if len(n.Allow) > 0 {
		s += ", allow " + strings.Join(n.Allow, " ")
	}
	if len(n.Block) > 0 {
		s += ", block " + strings.Join(n.Block, " ")
	}
	return s
}
