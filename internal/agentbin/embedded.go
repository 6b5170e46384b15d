//go:build !sbx_self_agent

package agentbin

const selfAgent = false
