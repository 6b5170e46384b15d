// Command sbx is the sandbox service: daemon, client, and the daemon's hidden stages.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"sbx.dev/sbx/internal/cli"
	"sbx.dev/sbx/internal/daemon"
	"sbx.dev/sbx/internal/stage"
)

func main() {
	stage.Run() // a hidden stage never returns; first, before flags, signals, goroutines
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], daemon.Main, daemon.GC) // `sbx serve`, `sbx gc`
	stop()
	os.Exit(code)
}
