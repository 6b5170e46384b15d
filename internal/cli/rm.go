// This file implements `sbx rm`.

package cli

import (
	"context"
	"fmt"
)

func runRm(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("rm", "[--json] ID…")
	jsonOut := fs.Bool("json", false, `print {"deleted":[…]} as JSON`)
	ids, err := parseInterleaved(fs, args)
	if err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	if len(ids) == 0 {
		return e.misuse(fs, exitMisuse, "missing sandbox ID")
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("rm", *jsonOut, exitError, err)
	}
	defer c.Close()
	deleted := []string{}
	code := exitOK
	for _, id := range ids {
		if err := c.Delete(ctx, id); err != nil {
			code = e.fail("rm", *jsonOut, exitError, err)
			continue
		}
		deleted = append(deleted, id)
		if !*jsonOut {
			fmt.Fprintln(e.stdout, id)
		}
	}
	if *jsonOut {
		e.printJSON(map[string][]string{"deleted": deleted})
	}
	return code
}
