package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestJudge(t *testing.T) {
	r := Report{
		Concurrency:         4,
		ColdStart:           Summary{P50MS: 2.5},
		ColdStartNoPool:     &Summary{P50MS: 13.5},
		ColdStartBackToBack: &Summary{P50MS: 5, P90MS: 9},
		Exec:                Summary{P50MS: 1.44},
		HostSpawn:           Summary{P50MS: 0.6},
		BwrapOneShot:        &Summary{P50MS: 4.73, P90MS: 5},
		Throughput:          73.4,
		BwrapThroughput:     344.2,
		IdleSandboxes:       20,
		DaemonRSSMB:         25,
		AgentPSSMB:          2.6,
	}
	r.Judge()
	want := map[string]struct {
		met   bool
		ratio float64
	}{
		"create → first exec p50, pool full":    {true, 2.5 / 4.73},
		"create → first exec p50, pool off":     {false, 13.5 / 4.73},
		"create → first exec p90, back to back": {true, 9.0 / 5},
		"exec in a live sandbox p50":            {false, 1.44 / 0.6},
		"create+exec+destroy, 4 workers":        {false, 73.4 / 344.2},
		"daemon RSS, 20 idle sandboxes":         {true, 0},
		"agent PSS per idle sandbox":            {true, 0},
	}
	if len(r.Targets) != len(want) {
		t.Fatalf("%d targets, want %d: %+v", len(r.Targets), len(want), r.Targets)
	}
	for _, tg := range r.Targets {
		w, ok := want[tg.Figure]
		if !ok {
			t.Errorf("unexpected target %q", tg.Figure)
			continue
		}
		if tg.Met != w.met || (w.ratio != 0 && (tg.Ratio < w.ratio-1e-9 || tg.Ratio > w.ratio+1e-9)) {
			t.Errorf("%s: met %v ratio %.4f, want met %v ratio %.4f", tg.Figure, tg.Met, tg.Ratio, w.met, w.ratio)
		}
	}
	if m, n := r.TargetsMet(); m != 4 || n != 7 {
		t.Errorf("TargetsMet = %d of %d, want 4 of 7", m, n)
	}
	// A peer not measured: the target is not met, and says why.
	r.BwrapOneShot, r.BwrapThroughput = nil, 0
	r.Judge()
	if tg := r.Targets[0]; tg.Met || !strings.Contains(tg.Unmeasured, "bwrap") {
		t.Errorf("without bwrap: %+v; want unmet, naming bwrap", tg)
	}
	var buf bytes.Buffer
	r.WriteTable(&buf)
	if !strings.Contains(buf.String(), "targets met") || !strings.Contains(buf.String(), "≥ 0.5x") {
		t.Errorf("table lacks the targets:\n%s", buf.String())
	}
}
