package agentbin

import (
	"bytes"
	"debug/buildinfo"
	"testing"
)

// The embedded sbx-agent (make builds it before any test) is a Go binary of
// this module's agent; after Release, this program's read-only data reads
// back whole from its file.
func TestBinary(t *testing.T) {
	b, err := Binary()
	if err != nil {
		t.Skipf("no sbx-agent to check: %v (make builds it)", err)
	}
	bi, err := buildinfo.Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if bi.Path != "sbx.dev/sbx/cmd/sbx-agent" {
		t.Errorf("embedded binary is %q, want sbx.dev/sbx/cmd/sbx-agent", bi.Path)
	}
	if err := Release(); err != nil {
		t.Fatal(err)
	}
	again, err := Binary()
	if err != nil || !bytes.Equal(again, b) {
		t.Errorf("after Release the embedded binary reads back different (%v)", err)
	}
}
