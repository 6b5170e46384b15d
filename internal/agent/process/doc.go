// Package process is the agent's process table: it starts commands (pipes or a
// PTY), captures their output with a head and tail cap and a spill file, reaps
// every child (the agent is PID 1 or a subreaper), and kills whole trees through
// a per-process cgroup. It knows nothing of the wire.
package process
