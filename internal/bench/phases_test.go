package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// The daemon's phases lines are read from its log as it comes, in pieces
// that split lines anywhere; the warm-ups are skipped, other lines and
// fields that are not durations are ignored.
func TestPhaseLog(t *testing.T) {
	lines := []string{
		`time=2026-11-28T06:56:23.764Z level=DEBUG msg="start phases" instance=3506130e sandbox_id=a prepare=9ms cgroup=9ms jail.runtime=9ms`,
		`time=2026-11-28T06:56:23.765Z level=DEBUG msg="create phases" sandbox_id=a before_start=9ms start=9ms commit=9ms`,
		`time=2026-11-28T06:56:23.766Z level=INFO msg="sandbox created" sandbox_id=a duration=12ms`,
		`time=2026-11-28T06:56:24.764Z level=DEBUG msg="start phases" instance=3506130e sandbox_id=b prepare=822.414µs cgroup=1ms jail.runtime=2ms`,
		`time=2026-11-28T06:56:24.765Z level=DEBUG msg="create phases" sandbox_id=b before_start=100µs start=10ms commit=400µs`,
		`time=2026-11-28T06:56:25.764Z level=DEBUG msg="start phases" instance=3506130e sandbox_id=c prepare=1.177586ms cgroup=3ms jail.runtime=4ms`,
		`time=2026-11-28T06:56:25.765Z level=DEBUG msg="create phases" sandbox_id=c before_start=300µs start=12ms commit=600µs`,
		`time=2026-11-28T06:56:26.764Z level=DEBUG msg="start phases" instance=3506130e sandbox_id=d prepare=1ms cgroup=2ms jail.runtime=3ms`,
		`time=2026-11-28T06:56:26.765Z level=DEBUG msg="create phases" sandbox_id=d before_start=200µs start=11ms commit=500µs`,
	}
	log := []byte(strings.Join(lines, "\n") + "\n")
	l := &PhaseLog{Skip: 1}
	for len(log) > 0 { // 7 bytes at a time
		n := min(7, len(log))
		if k, err := l.Write(log[:n]); k != n || err != nil {
			t.Fatalf("Write = %d, %v", k, err)
		}
		log = log[n:]
	}
	want := []Phase{
		{"start.prepare", 1, 3}, {"start.cgroup", 2, 3}, {"start.jail.runtime", 3, 3},
		{"create.before_start", 0.2, 3}, {"create.start", 11, 3}, {"create.commit", 0.5, 3},
	}
	got := l.Medians()
	if len(got) != len(want) {
		t.Fatalf("Medians = %+v, want %+v", got, want)
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.Name || g.N != w.N || math.Abs(g.P50MS-w.P50MS) > 1e-6 {
			t.Errorf("step %d = %+v, want %+v", i, g, w)
		}
	}
	var buf bytes.Buffer
	Report{ColdStartPhases: got}.writePhases(&buf)
	if !strings.Contains(buf.String(), "start.jail.runtime") || !strings.Contains(buf.String(), "medians of 3 creates") {
		t.Errorf("table:\n%s", buf.String())
	}
}
