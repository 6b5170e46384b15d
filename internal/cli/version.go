// This file implements `sbx version`.

package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is sbx's version; the build may set it with
// -ldflags "-X sbx.dev/sbx/internal/cli.Version=v1.2.3".
var Version = ""

// version returns Version, else what the build recorded.
func version() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel-" + rev
}

func runVersion(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("version", "[--json]")
	jsonOut := fs.Bool("json", false, `print {"version","go"} as JSON`)
	if err := fs.Parse(args); err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	if *jsonOut {
		e.printJSON(map[string]string{"version": version(), "go": runtime.Version()})
		return exitOK
	}
	fmt.Fprintf(e.stdout, "sbx %s (%s)\n", version(), runtime.Version())
	return exitOK
}
