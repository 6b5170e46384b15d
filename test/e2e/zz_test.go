package e2e

import "testing"

// TestZZLeakAudit runs last (files and tests run in order): it deletes what the
// shared daemon still holds, stops it, and audits the host.
func TestZZLeakAudit(t *testing.T) {
	if shared == nil {
		t.Skip("no shared daemon was started")
	}
	d := sharedDaemon(t)
	d.cleanup()
}
