// Command sbx-agent is the part of sbx that runs inside a sandbox: the jail's
// init stage, which goes on as the agent. It is built first and embedded in
// the sbx binary (internal/agentbin), which the native backend seals and
// runs in every sandbox: a sandbox's one Go start then pays for the agent's
// packages only, not the daemon's (the store, the CLI, the seccomp compiler).
// The native backend's spawner, which forks those sandboxes, runs from it
// too, for the same smallness. It is not a command to run by hand.
package main

import (
	"fmt"
	"os"

	"sbx.dev/sbx/internal/stage"
)

func main() {
	stage.Run() // a stage never returns
	fmt.Fprintln(os.Stderr, "sbx-agent runs inside a sandbox, started by sbx serve; it is not a command to run by hand")
	os.Exit(2)
}
