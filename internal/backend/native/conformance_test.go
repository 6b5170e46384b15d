package native

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/api/agent/boot"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/backendtest"
	"sbx.dev/sbx/internal/testutil"
)

// fakeAgent stands in for the agent in the jail tests: it serves GET /health
// (204) on the inherited socket, reaps orphans as PID 1, and exits on SIGTERM.
func fakeAgent(cfgBytes []byte) {
	var cfg boot.AgentConfig
	if err := cfg.UnmarshalBinary(cfgBytes); err != nil {
		fmt.Fprintln(os.Stderr, "fake agent:", err)
		os.Exit(2)
	}
	ln, err := net.FileListener(os.NewFile(uintptr(cfg.ListenFD), "listen"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake agent:", err)
		os.Exit(2)
	}
	if cfg.ReadyFD > 0 {
		syscall.Close(cfg.ReadyFD)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGCHLD)
	go func() {
		for s := range sigs {
			if s == syscall.SIGTERM {
				os.Exit(0)
			}
			for {
				if pid, _ := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 {
					break
				}
			}
		}
	}()
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	os.Exit(1)
}

// conformance runs the suite against the driver opened on exe as the sbx binary.
func conformance(t *testing.T, exe string) {
	requireJail(t)
	opts := backend.Options{DataDir: t.TempDir(), Instance: fmt.Sprintf("c%d", time.Now().UnixNano()%1e9),
		Exe: exe, Log: testutil.Logger(t), OutputLimitBytes: 1 << 20, SpillLimitBytes: 64 << 20}
	t.Cleanup(func() {
		for _, h := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/memory",
			"/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup/freezer"} {
			os.Remove(filepath.Join(h, "sbx", opts.Instance)) // only if empty: the audit reports residue
		}
	})
	backendtest.Run(t, func(t *testing.T) backend.Driver {
		d, err := open(t.Context(), opts)
		if err != nil {
			t.Fatalf("Open = %v", err)
		}
		t.Cleanup(func() {
			d.layout.DropSpares() // as Close does
			d.pool.Close()        // busy while another driver of the test holds sandboxes: the last one unmounts
		})
		return d
	}, backendtest.HostAudit(func(t *testing.T) *testutil.LeakAudit {
		return &testutil.LeakAudit{CgroupPrefix: "sbx/" + opts.Instance, DataDir: opts.DataDir, Keep: []string{"bin", "layers"}}
	}))
}

// TestConformance runs the suite with the real sbx binary and agent.
func TestConformance(t *testing.T) {
	conformance(t, testutil.BuildSBX(t))
}

// BenchmarkStartDestroy measures one sandbox's Start (to a healthy agent) and
// Destroy, with the fake agent.
func BenchmarkStartDestroy(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.RequireOverlay(b)
	testutil.RequireNamespaces(b)
	opts := backend.Options{DataDir: b.TempDir(), Instance: fmt.Sprintf("b%d", time.Now().UnixNano()%1e9), Exe: os.Args[0]}
	d, err := open(b.Context(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer d.pool.Close()
	defer d.layout.DropSpares()
	var starts, destroys []time.Duration
	for b.Loop() {
		sp := backendtest.Spec()
		t0 := time.Now()
		if _, err := d.Start(b.Context(), sp); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := d.Destroy(b.Context(), sp.ID); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		starts, destroys = append(starts, t1.Sub(t0)), append(destroys, t2.Sub(t1))
	}
	b.ReportMetric(float64(median(starts).Microseconds())/1000, "start-p50-ms")
	b.ReportMetric(float64(median(destroys).Microseconds())/1000, "destroy-p50-ms")
	for _, h := range d.hierarchies() {
		os.Remove(filepath.Join(h, "sbx", opts.Instance))
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
