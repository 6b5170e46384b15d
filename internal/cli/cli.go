// Package cli implements the sbx command line: the client subcommands, their --json
// output and exit codes. `sbx serve` is handed in by main, so cli stays client-side.
package cli

import "context"

// ServeFunc runs the daemon with the arguments after "serve"; it returns an exit code.
type ServeFunc func(ctx context.Context, args []string) int

// Run runs the command line args (without the program name) and returns the exit code.
func Run(ctx context.Context, args []string, serve ServeFunc) int { panic("unimplemented") }
