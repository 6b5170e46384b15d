// Package agent is the in-sandbox agent: it serves the process, filesystem and sbx
// services of api/agent over the socket its backend hands it. It runs inside the
// sandbox, under every isolation layer, and imports no daemon-side code.
package agent

// Main runs the agent from os.Args[2] (boot.AgentConfig as JSON). It never returns.
func Main() { panic("unimplemented") }
