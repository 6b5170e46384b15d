package agent_test

import (
	"testing"
	"time"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/sandbox"
)

// BenchmarkExecTrue measures one exec of `true` through agentclient, the
// agent's Connect handler, fork/exec and the reaper.
func BenchmarkExecTrue(b *testing.B) {
	a := startAgentTB(b, boot.AgentConfig{})
	req := sandbox.ExecRequest{Argv: []string{"true"}, Timeout: time.Minute}
	for b.Loop() {
		if res, err := a.cl.Exec(b.Context(), req, false, nil); err != nil || res.ExitCode != 0 {
			b.Fatalf("Exec = %+v, %v", res, err)
		}
	}
}
