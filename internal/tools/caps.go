// This file names the capabilities a key needs for each family of tools
// (seed 001: a key without sandbox.exec gets "access denied: sandbox.exec").

package tools

import (
	"context"

	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
)

// The capabilities: sandbox.exec as seed 001 spells it, and one per family.
const (
	CapExec   = "sandbox.exec" // sandbox.exec
	CapShell  = "tools.shell"  // commands and terminals: sandbox_bash, exec_command, write_stdin, shell_*, process_list
	CapPython = "tools.python" // repl_execute, python_exec, pip_install
	CapFiles  = "tools.files"  // the file tools of seeds 002 and 004, edit_file
	CapGit    = "tools.git"    // git_*
	CapWeb    = "tools.web"    // http_request, browser_open
	CapEnv    = "tools.env"    // env_get, env_set
	CapLint   = "tools.lint"   // bsl_check
)

// Capabilities lists every capability a key can be given.
var Capabilities = []string{CapExec, CapShell, CapPython, CapFiles, CapGit, CapWeb, CapEnv, CapLint}

// allowed checks that ctx's key holds capability c. Calls without a key are
// the daemon's own.
func allowed(ctx context.Context, c string) error {
	k, ok := manager.KeyFrom(ctx)
	if !ok || k.Can(c) {
		return nil
	}
	return exact(sandbox.ErrDenied, "access denied: "+c)
}
