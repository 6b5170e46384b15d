//go:build sbx_self_agent

package agentbin

// selfAgent: this sbx runs its own binary in every sandbox, whatever is
// embedded (a build that must not use the separate agent, such as a cgo one).
const selfAgent = true
