package bench

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

func TestFloors(t *testing.T) {
	r := Report{
		Concurrency:     4,
		ColdStart:       Summary{P50MS: 2.5},
		ColdStartNoPool: &Summary{P50MS: 9},
		Exec:            Summary{P50MS: 1.2},
		HostSpawn:       Summary{P50MS: 0.6},
		BwrapOneShot:    &Summary{P50MS: 3.6},
		RoundTrip:       &Summary{P50MS: 0.16},
		Throughput:      140,
		BwrapThroughput: 350,
		FloorParts: &FloorParts{
			AgentCall:                 &Summary{P50MS: 0.3},
			NamespacesOneShot:         &Summary{P50MS: 1.8},
			AgentStart:                &Summary{P50MS: 1.2},
			NamespacesAgentThroughput: 250,
		},
	}
	r.Judge()
	want := map[string]struct {
		value, ratio, left float64
		reachable          bool
	}{
		"exec in a live sandbox p50":         {0.9, 0.9 / 0.6, 0.3, true},
		"create → first exec p50, pool full": {1.06, 1.06 / 3.6, 1.44, true},
		"create → first exec p50, pool off":  {3.46, 3.46 / 3.6, 5.54, true},
		"create+exec+destroy, 4 workers":     {250, 250.0 / 350, 110, true},
	}
	if len(r.Floors) != len(want) {
		t.Fatalf("%d floors, want %d: %+v", len(r.Floors), len(want), r.Floors)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, f := range r.Floors {
		w, ok := want[f.Target]
		if !ok {
			t.Errorf("a floor for %q", f.Target)
			continue
		}
		if !near(f.Value, w.value) || !near(f.Ratio, w.ratio) || !near(f.Left, w.left) || f.Reachable != w.reachable {
			t.Errorf("%s: floor %+v, want value %g ratio %g left %g reachable %v", f.Target, f, w.value, w.ratio, w.left, w.reachable)
		}
	}
	var buf bytes.Buffer
	r.WriteTable(&buf)
	if !strings.Contains(buf.String(), "floor of sbx's design") || !strings.Contains(buf.String(), "start of the sandbox's program") {
		t.Errorf("table lacks the floors:\n%s", buf.String())
	}

	// A floor above its target says so; a part not measured leaves its
	// target without a floor.
	r.FloorParts.AgentCall.P50MS = 0.5
	r.FloorParts.AgentStart = nil
	r.Judge()
	got := map[string]Floor{}
	for _, f := range r.Floors {
		got[f.Target] = f
	}
	if f := got["exec in a live sandbox p50"]; f.Reachable || !near(f.Ratio, 1.1/0.6) {
		t.Errorf("exec floor %+v, want ratio %g and not reachable", f, 1.1/0.6)
	}
	if f, ok := got["create → first exec p50, pool off"]; ok {
		t.Errorf("a pool-off floor without the agent's start: %+v", f)
	}
}

type callingAPI struct {
	fakeAPI
	calls atomic.Int64
}

func (c *callingAPI) AgentCall(ctx context.Context, id string) error {
	c.calls.Add(1)
	return nil
}

func TestRunMeasuresFloors(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	api := &callingAPI{fakeAPI: fakeAPI{live: map[string]bool{}}}
	opts := Options{Runs: 3, Warmup: 1, Concurrency: 2, Cycles: 4, AgentBinary: script("agent", "exit 2")}
	rep, err := Run(t.Context(), api, opts)
	if err != nil {
		t.Fatal(err)
	}
	fp := rep.FloorParts
	if fp == nil || fp.AgentCall == nil || fp.AgentCall.N != 3 || api.calls.Load() != 4 {
		t.Fatalf("agent call: %+v after %d calls, want 3 samples of 4 calls", fp, api.calls.Load())
	}
	if fp.AgentStart == nil || fp.AgentStart.N != 3 || fp.AgentStart.P50MS <= 0 {
		t.Errorf("agent start = %+v (unavailable: %q)", fp.AgentStart, fp.Unavailable)
	}
	if os.Geteuid() == 0 && (fp.NamespacesOneShot == nil || fp.NamespacesAgentThroughput <= 0) {
		t.Errorf("namespaces: one shot %+v, with the agent %v/s (unavailable: %q)", fp.NamespacesOneShot, fp.NamespacesAgentThroughput, fp.Unavailable)
	}

	// A program that does not end as the sandbox's does is not timed.
	opts.AgentBinary = script("other", "exit 0")
	rep, err = Run(t.Context(), &fakeAPI{live: map[string]bool{}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	if rep.FloorParts.AgentStart != nil || !strings.Contains(strings.Join(rep.FloorParts.Unavailable, "\n"), "want exit status 2") {
		t.Errorf("a program exiting 0: start %+v, unavailable %q", rep.FloorParts.AgentStart, rep.FloorParts.Unavailable)
	}
	if !strings.Contains(strings.Join(rep.FloorParts.Unavailable, "\n"), "agent call: this API cannot make one") {
		t.Errorf("an API without agent calls: unavailable %q", rep.FloorParts.Unavailable)
	}
}
