package daemon

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"sbx.dev/sbx/internal/backend/native"
)

// GC is `sbx gc [--dry-run] [--json]`: it removes the sandboxes of sbx
// instances whose daemon and data dir are gone (their agents, processes and
// cgroups), which no daemon re-adopts. It needs root and no daemon.
func GC(ctx context.Context, args []string) int {
	return gc(ctx, args, os.Stdout, os.Stderr)
}

func gc(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sbx gc [--dry-run] [--json]\n\nRemoves the sandboxes of sbx instances whose daemon and data dir are gone.")
		fs.PrintDefaults()
	}
	dry := fs.Bool("dry-run", false, "list what would be removed; remove nothing")
	jsonOut := fs.Bool("json", false, "print the orphans as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sbx gc: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	orphans, err := native.GC(ctx, *dry)
	if *jsonOut {
		type row struct {
			Instance string `json:"instance"`
			ID       string `json:"id"`
			Procs    int    `json:"processes"`
		}
		rows := []row{}
		for _, o := range orphans {
			rows = append(rows, row{o.Instance, o.ID, o.Procs})
		}
		json.NewEncoder(stdout).Encode(map[string]any{"dry_run": *dry, "orphans": rows})
	} else {
		verb := "removed"
		if *dry {
			verb = "would remove"
		}
		for _, o := range orphans {
			fmt.Fprintf(stdout, "%s sandbox %s of instance %s (processes: %d)\n", verb, o.ID, o.Instance, o.Procs)
		}
		if len(orphans) == 0 {
			fmt.Fprintln(stdout, "no orphaned sandboxes")
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "sbx gc:", err)
		return 1
	}
	return 0
}
