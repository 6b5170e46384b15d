// This file implements `sbx ls`.

package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"sbx.dev/sbx/api/openapi"
)

func runLs(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("ls", "[--label k=v]… [--json]")
	var labels multiFlag
	fs.Var(&labels, "label", "only sandboxes with label `k=v` (repeatable)")
	jsonOut := fs.Bool("json", false, `print {"sandboxes":[…]} as JSON`)
	if err := fs.Parse(args); err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	if fs.NArg() > 0 {
		return e.misuse(fs, exitMisuse, "unexpected argument %q", fs.Arg(0))
	}
	want, err := keyValues("label", labels)
	if err != nil {
		return e.misuse(fs, exitMisuse, "%v", err)
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("ls", *jsonOut, exitError, err)
	}
	defer c.Close()
	sbs, err := c.List(ctx, want)
	if err != nil {
		return e.fail("ls", *jsonOut, exitError, err)
	}
	sort.Slice(sbs, func(i, j int) bool { return sbs[i].CreatedAt.Before(sbs[j].CreatedAt) })
	if *jsonOut {
		if sbs == nil {
			sbs = []openapi.Sandbox{}
		}
		e.printJSON(openapi.SandboxList{Sandboxes: sbs})
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tBACKEND\tLEVEL\tCREATED\tEXPIRES\tLABELS")
	now := time.Now()
	for _, sb := range sbs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.State, sb.Backend, level(sb),
			ago(now.Sub(sb.CreatedAt)), until(sb.ExpiresAt.Sub(now)), labelString(sb.Labels))
	}
	tw.Flush()
	return exitOK
}

// level is the isolation level, loudly marked when the backend is no sandbox.
func level(sb openapi.Sandbox) string {
	l := sb.Isolation.Level
	if l == "" {
		l = "-"
	}
	if !sb.Isolation.Sandbox && sb.State != "creating" {
		return l + " (NOT A SANDBOX)"
	}
	return l
}

func labelString(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	var kv []string
	for k, v := range m {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

func ago(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	return short(d) + " ago"
}

func until(d time.Duration) string {
	if d <= 0 {
		return "expired"
	}
	return "in " + short(d)
}

// short renders d to its largest unit or two: 45s, 4m10s, 2h5m, 3d4h.
func short(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}
