package agentclient

import (
	"testing"

	"sbx.dev/sbx/internal/sandbox"
)

func BenchmarkHealth(b *testing.B) {
	t := &testing.T{}
	_ = t
	c, _, _ := serveB(b, sandbox.NewID())
	for b.Loop() {
		if err := c.Health(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}
