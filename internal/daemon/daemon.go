// Package daemon is sbx's composition root: configuration, store, drivers, manager
// and servers, wired together for `sbx serve`.
package daemon

import "context"

// Main runs `sbx serve` with args (after "serve") until ctx ends; it returns an exit code.
func Main(ctx context.Context, args []string) int { panic("unimplemented") }
