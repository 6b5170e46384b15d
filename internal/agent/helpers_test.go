package agent_test

import (
	"syscall"

	"sbx.dev/sbx/internal/agentclient"
)

func syscallMkfifo(p string) error { return syscall.Mkfifo(p, 0o644) }

func agentclientGrep(pattern, path, include string, ignoreCase bool) agentclient.GrepRequest {
	return agentclient.GrepRequest{Pattern: pattern, Path: path, Include: include, IgnoreCase: ignoreCase}
}
