// This file implements `sbx run`: create, exec, delete, the delete surviving
// errors and interrupts.

package cli

import (
	"context"
	"fmt"
	"time"
)

const runSynopsis = createSynopsis + " [--cwd D] [--env K=V]… [-i] -- CMD [ARGS…]"

// deleteTimeout bounds the delete that ends a run, after any interrupt.
const deleteTimeout = 60 * time.Second

func runRun(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("run", runSynopsis+"\n\n--timeout is the sandbox's time to live and, up to 3600, the command's timeout.")
	var cf createFlags
	cf.register(fs)
	var xf execFlags
	xf.register(fs, false)
	jsonOut := fs.Bool("json", false, "print the stream's events as JSON lines")
	if err := fs.Parse(args); err != nil {
		return e.parseErr(fs, err, exitSbx)
	}
	argv := fs.Args()
	if len(argv) == 0 {
		return e.misuse(fs, exitSbx, "missing command after --")
	}
	creq, err := cf.request(fs)
	if err != nil {
		return e.misuse(fs, exitSbx, "%v", err)
	}
	xreq, err := xf.request(fs, argv, e.stdin)
	if err != nil {
		return e.misuse(fs, exitSbx, "%v", err)
	}
	if creq.Timeout != nil && *creq.Timeout > 0 {
		t := min(*creq.Timeout, 3600)
		xreq.Timeout = &t
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("run", *jsonOut, exitSbx, err)
	}
	defer c.Close()
	sb, err := c.Create(ctx, creq)
	if err != nil {
		return e.fail("run", *jsonOut, exitSbx, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
		defer cancel()
		if err := c.Delete(dctx, sb.ID); err != nil {
			e.fail("run", *jsonOut, exitSbx, fmt.Errorf("deleting sandbox %s: %w", sb.ID, err))
		}
	}()
	if !*jsonOut {
		warnIsolation(e, sb)
	}
	return execStream(ctx, e, c, "run", sb.ID, xreq, *jsonOut)
}
