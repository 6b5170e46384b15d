package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// RL-05: a sandbox whose teardown fails is quarantined: DELETE answers 503
// with Retry-After, the sandbox shows state quarantined with the reason and
// is listed by health, its uid range is not handed to the next sandbox, and
// the teardown is retried until it succeeds. The teardown's failures come from
// the sbxfault build (SBX_FAULT_FAIL=teardown:N, or always).
func TestQuarantine(t *testing.T) {
	bin := faultBinary(t)
	dir := t.TempDir()
	d := startDaemonBin(t, bin, dir, "SBX_POOL_SIZE=0", "SBX_FAULT_FAIL=teardown")
	id := d.create(nil)
	uid := dirOwner(t, dir, id)
	st, hdr, b := d.apiHeaders("DELETE", "/v1/sandboxes/"+id, nil)
	if st != 503 || hdr.Get("Retry-After") == "" || !strings.Contains(string(b), "quarantined") {
		t.Fatalf("DELETE with a failing teardown = %d %s (Retry-After %q), want 503 naming the quarantine", st, b, hdr.Get("Retry-After"))
	}
	_, b = d.api("GET", "/v1/sandboxes/"+id, nil)
	if !strings.Contains(string(b), `"state":"quarantined"`) || !strings.Contains(string(b), "teardown failed") {
		t.Errorf("the sandbox after a failed teardown: %s", b)
	}
	_, b = d.api("GET", "/v1/health", nil)
	var h struct{ Quarantined []string }
	json.Unmarshal(b, &h)
	if len(h.Quarantined) != 1 || h.Quarantined[0] != id {
		t.Errorf("health lists quarantined %v, want [%s]", h.Quarantined, id)
	}
	// Its uid range stays its own.
	other := d.create(nil)
	if dirOwner(t, dir, other) == uid {
		t.Errorf("a new sandbox got the quarantined one's uid range")
	}
	if st, _ := d.api("DELETE", "/v1/sandboxes/"+other, nil); st != 503 {
		t.Errorf("DELETE of a second sandbox with the teardown failing = %d", st)
	}
	// The audit names it.
	_, b = d.api("GET", "/v1/audit?sandbox_id="+id, nil)
	if !strings.Contains(string(b), `"action":"quarantine"`) {
		t.Errorf("no quarantine record in the audit: %.400s", b)
	}
	d.stop()

	// Once the teardown can succeed, the retry finishes the job.
	d = startDaemonBin(t, bin, dir, "SBX_POOL_SIZE=0", "SBX_FAULT_FAIL=teardown:2")
	defer d.cleanup()
	if !waitUntil(60*time.Second, func() bool {
		st1, _ := d.api("GET", "/v1/sandboxes/"+id, nil)
		st2, _ := d.api("GET", "/v1/sandboxes/"+other, nil)
		return st1 == 404 && st2 == 404
	}) {
		_, b := d.api("GET", "/v1/sandboxes", nil)
		t.Fatalf("quarantined sandboxes not gone after the retries: %s", b)
	}
}
