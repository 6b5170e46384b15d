package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

type fakeAPI struct {
	mu      sync.Mutex
	n       int
	live    map[string]bool
	failAt  int
	execErr error
}

func (f *fakeAPI) Create(ctx context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.failAt > 0 && f.n == f.failAt {
		return "", fmt.Errorf("create %d failed", f.n)
	}
	id := fmt.Sprint("s", f.n)
	f.live[id] = true
	return id, nil
}

func (f *fakeAPI) Exec(ctx context.Context, id string, argv []string) (int, error) {
	return 0, f.execErr
}

func (f *fakeAPI) Delete(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.live, id)
	return nil
}

func TestRunDeletesEverythingAndReports(t *testing.T) {
	api := &fakeAPI{live: map[string]bool{}}
	opts := Options{Runs: 5, Warmup: 1, Concurrency: 2, Cycles: 10, Idle: 3, ScaleIdle: 5, Burst: 4}
	rep, err := Run(t.Context(), api, opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(api.live) != 0 {
		t.Errorf("Run left %d sandboxes", len(api.live))
	}
	if err := RunScale(t.Context(), api, opts, &rep); err != nil {
		t.Fatalf("RunScale: %v", err)
	}
	if len(api.live) != 0 {
		t.Errorf("RunScale left %d sandboxes", len(api.live))
	}
	if len(rep.Scale) != 2 || rep.Scale[1].Idle != 5 || rep.Burst == nil || rep.Burst.Created != 4 {
		t.Errorf("scale %+v, burst %+v: want points at 3 and 5 idle, 4 created", rep.Scale, rep.Burst)
	}
	if rep.ColdStart.N != 5 || rep.Exec.N != 5 || rep.HostSpawn.N != 5 || rep.HostSpawn.P50MS <= 0 || rep.Throughput <= 0 {
		t.Errorf("report = %+v", rep)
	}
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	if !strings.Contains(buf.String(), "create → first exec") || !strings.Contains(buf.String(), "host spawn of true") {
		t.Errorf("table:\n%s", buf.String())
	}
}

func TestRunStopsOnError(t *testing.T) {
	api := &fakeAPI{live: map[string]bool{}, failAt: 3}
	if _, err := Run(t.Context(), api, Options{Runs: 5, Warmup: 1}); err == nil || !strings.Contains(err.Error(), "create 3 failed") {
		t.Errorf("Run = %v, want the create failure", err)
	}
	if len(api.live) != 0 {
		t.Errorf("Run left %d sandboxes after an error", len(api.live))
	}
}

// pooledAPI is a fakeAPI whose pool empties at each create and reports ready
// again only after refillPolls polls.
type pooledAPI struct {
	*fakeAPI
	refillPolls int
	left        int // polls until the pool is full again
	polls       int
	emptyAtTake int // creates that found the pool not full
}

func (p *pooledAPI) Create(ctx context.Context) (string, error) {
	if p.left > 0 {
		p.emptyAtTake++
	}
	p.left = p.refillPolls
	return p.fakeAPI.Create(ctx)
}

func (p *pooledAPI) Pool(ctx context.Context) (ready, size int, err error) {
	p.polls++
	if p.left > 0 {
		p.left--
		return 0, 1, nil
	}
	return 1, 1, nil
}

func TestColdStartWaitsForAFullPool(t *testing.T) {
	api := &pooledAPI{fakeAPI: &fakeAPI{live: map[string]bool{}}, refillPolls: 2}
	if _, err := ColdStart(t.Context(), api, Options{Runs: 4, Warmup: 1}, true); err != nil {
		t.Fatal(err)
	}
	if api.emptyAtTake != 0 || api.polls < 5*3-2 {
		t.Errorf("pool full: %d creates found it refilling, %d polls; want 0 and about 3 per sample", api.emptyAtTake, api.polls)
	}
	api = &pooledAPI{fakeAPI: &fakeAPI{live: map[string]bool{}}, refillPolls: 2}
	if _, err := ColdStart(t.Context(), api, Options{Runs: 4, Warmup: 1}, false); err != nil {
		t.Fatal(err)
	}
	if api.emptyAtTake != 4 || api.polls != 0 {
		t.Errorf("back to back: %d creates found the pool refilling, %d polls; want 4 and 0", api.emptyAtTake, api.polls)
	}
	rep, err := Run(t.Context(), &pooledAPI{fakeAPI: &fakeAPI{live: map[string]bool{}}, refillPolls: 1}, Options{Runs: 3, Warmup: 1, Concurrency: 1, Cycles: 2})
	if err != nil || rep.ColdStartBackToBack == nil || rep.ColdStartBackToBack.N != 3 {
		t.Errorf("Run with a pool: back to back = %+v, %v", rep.ColdStartBackToBack, err)
	}
	if rep.RoundTrip == nil || rep.RoundTrip.N != 3 {
		t.Errorf("Run with a pool: round trip = %+v, want 3 samples of the health call", rep.RoundTrip)
	}
}

// TestNamespacesPeer: the bare-namespaces ceiling runs (as root: unshare of
// a network namespace needs it) and shows in the table beside sbx's figure.
func TestNamespacesPeer(t *testing.T) {
	rep, err := Run(t.Context(), &fakeAPI{live: map[string]bool{}}, Options{Runs: 2, Warmup: 1, Concurrency: 2, Cycles: 4})
	if err != nil {
		t.Fatal(err)
	}
	if rep.RoundTrip != nil {
		t.Errorf("round trip = %+v from an API without health", rep.RoundTrip)
	}
	if os.Geteuid() != 0 {
		if rep.NamespacesUnavailable == "" {
			t.Errorf("not root, yet no reason for a missing namespaces figure: %+v", rep)
		}
		t.Skip("unshare of a network namespace needs root")
	}
	if rep.NamespacesThroughput <= 0 || rep.NamespacesUnavailable != "" {
		t.Fatalf("namespaces = %v/s, %q", rep.NamespacesThroughput, rep.NamespacesUnavailable)
	}
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	if !strings.Contains(buf.String(), "bare unshare + true") {
		t.Errorf("table lacks the namespaces row:\n%s", buf.String())
	}
}

// processCPU reads a process's own CPU time from /proc, and it grows with
// work done; DaemonCPU names what it cannot find.
func TestProcessCPU(t *testing.T) {
	before, err := processCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	after := before
	for deadline := time.Now().Add(10 * time.Second); after <= before && time.Now().Before(deadline); {
		for x := 0; x < 1e7; x++ { // work for a few clock ticks
			_ = x * x
		}
		if after, err = processCPU(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if after <= before {
		t.Errorf("CPU time %v after 10 s of work, %v before: want it to grow", after, before)
	}
	if _, err := DaemonCPU(os.Getpid(), "no-such-instance"); err == nil || !strings.Contains(err.Error(), "no-such-instance") {
		t.Errorf("DaemonCPU of an unknown instance: %v, want an error naming it", err)
	}
}
