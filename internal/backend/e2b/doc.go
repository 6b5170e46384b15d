// Package e2b is the backend that runs sbx's sandboxes on any server speaking
// E2B's API: real E2B, or another sbx (docs/E2B-CONTRACT.md is the wire it
// relies on, nothing sbx-specific). A sandbox is a remote sandbox created
// through E2B's control plane (api.go); its agent is an adapter in the
// daemon's own process (server.go) that serves sbx's agent protocol over the
// remote's envd: envd's own routes are forwarded (remote.go), sbxagent.Agent
// is implemented over them (agent.go, procs.go, files.go).
//
// An E2B server reports nothing about how it isolates a sandbox, so the
// driver claims no isolation layer: the daemon's policy refuses it until the
// operator accepts every gap by name (policy.allow_missing). Package e2b
// knows nothing of the manager, the store or the servers.
package e2b
