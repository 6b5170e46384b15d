package bench

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
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
	rep, err := Run(t.Context(), api, Options{Runs: 5, Warmup: 1, Concurrency: 2, Cycles: 10, Idle: 3})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(api.live) != 0 {
		t.Errorf("Run left %d sandboxes", len(api.live))
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
