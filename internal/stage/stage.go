// Package stage runs the hidden stages of the sbx binaries: what a backend
// starts them as (boot.InitArg, boot.AgentArg, boot.SpawnerArg), chosen by
// the first argument before any flag parsing, signal handling or goroutine.
package stage

import (
	"os"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/agent"
	"sbx.dev/sbx/internal/backend/native/forker"
	"sbx.dev/sbx/internal/isolation/nsinit"
)

// Run runs the stage named by os.Args[1], if it names one, and then never
// returns; otherwise it returns at once.
func Run() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case boot.InitArg:
		cfg := nsinit.Main() // the jail's init; then this process is the agent
		agent.Main(cfg, nsinit.Layers())
	case boot.AgentArg:
		agent.Main(nil, nil)
	case boot.SpawnerArg:
		forker.Main() // the native backend's spawner
	}
}
