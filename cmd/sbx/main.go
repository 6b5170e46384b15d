// Command sbx is the sandbox service: daemon, client, and the daemon's hidden stages.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"sbx/api/agent/boot"
	"sbx/internal/agent"
	"sbx/internal/backend/native/forker"
	"sbx/internal/cli"
	"sbx/internal/daemon"
	"sbx/internal/isolation/nsinit"
)

func main() {
	if len(os.Args) > 1 { // hidden stages first: before flags, signals, goroutines
		switch os.Args[1] {
		case boot.InitArg:
			cfg := nsinit.Main() // the jail's init; then this process is the agent
			agent.Main(cfg, nsinit.Layers())
		case boot.AgentArg:
			agent.Main(nil, nil) // never returns
		case boot.SpawnerArg:
			forker.Main() // never returns
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], daemon.Main, daemon.GC) // `sbx serve`, `sbx gc`
	stop()
	os.Exit(code)
}
