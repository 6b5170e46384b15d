// This file implements `sbx health`.

package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

func runHealth(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("health", "[--json]\n\nExits 0 when a backend can create sandboxes, 1 otherwise.")
	jsonOut := fs.Bool("json", false, "print the health object as JSON")
	if err := fs.Parse(args); err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	if fs.NArg() > 0 {
		return e.misuse(fs, exitMisuse, "unexpected argument %q", fs.Arg(0))
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("health", *jsonOut, exitError, err)
	}
	defer c.Close()
	h, err := c.Health(ctx)
	if err != nil {
		return e.fail("health", *jsonOut, exitError, err)
	}
	if *jsonOut {
		e.printJSON(h)
	} else {
		fmt.Fprintf(e.stdout, "status: %s\n", h.Status)
		if h.Pool != nil {
			fmt.Fprintf(e.stdout, "warm pool: %d of %d ready\n", h.Pool.Ready, h.Pool.Size)
		}
		if len(h.Quarantined) > 0 {
			fmt.Fprintf(e.stdout, "quarantined (teardown failed, retried): %s\n", strings.Join(h.Quarantined, " "))
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "BACKEND\tAVAILABLE\tPRIMARY\tLEVEL\tSANDBOX\tREASONS")
		for _, b := range h.Backends {
			sb := "yes"
			if !b.Sandbox {
				sb = "NOT A SANDBOX"
			}
			fmt.Fprintf(tw, "%s\t%v\t%v\t%s\t%s\t%s\n", b.Name, b.Available, b.Primary, orDash(b.Level), sb, orDash(strings.Join(b.Reasons, "; ")))
		}
		tw.Flush()
		for _, b := range h.Backends {
			if len(b.Templates) > 0 {
				fmt.Fprintf(e.stdout, "%s: templates: %s\n", b.Name, strings.Join(b.Templates, " "))
			}
			for _, l := range slices.Sorted(maps.Keys(b.LayerReasons)) {
				fmt.Fprintf(e.stdout, "%s: layer %s missing: %s\n", b.Name, l, b.LayerReasons[l])
			}
		}
	}
	if h.Status != "ok" {
		return exitError
	}
	return exitOK
}
