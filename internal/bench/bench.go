package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// API is what the benchmark needs of a daemon.
type API interface {
	Create(ctx context.Context) (id string, err error)
	// Exec runs argv in sandbox id and returns its exit code.
	Exec(ctx context.Context, id string, argv []string) (int, error)
	Delete(ctx context.Context, id string) error
}

// PoolAPI is an API that also reports the daemon's warm pool.
type PoolAPI interface {
	API
	// Pool returns the warm sandboxes ready now and the pool's size (0: off).
	Pool(ctx context.Context) (ready, size int, err error)
}

// CPUMeter is an API whose daemon's CPU use the bench can read, for the
// throughput figure's CPU per cycle.
type CPUMeter interface {
	// CPU returns the CPU time used so far by the daemon, its helper
	// processes (the native backend's spawner) and its sandboxes' processes.
	CPU() (CPUUse, error)
}

// CPUUse is CPU time used so far, by whom.
type CPUUse struct {
	Daemon, Helpers, Sandboxes time.Duration
}

// CycleCPU is the CPU time of one create+exec+destroy cycle of the throughput
// figure, by whom (kernel threads' deferred work, such as the btrfs cleaner's
// and namespace teardown, is not counted), beside bubblewrap's per one-shot
// run (bwrap and its `true`, as this process's children).
type CycleCPU struct {
	DaemonMS    float64 `json:"daemon_ms"`
	HelpersMS   float64 `json:"helpers_ms"`
	SandboxesMS float64 `json:"sandboxes_ms"`
	TotalMS     float64 `json:"total_ms"`
	BwrapMS     float64 `json:"bwrap_ms,omitempty"`
}

// Options size the run.
type Options struct {
	Runs        int // samples per latency figure (after warm-up)
	Warmup      int
	Concurrency int // workers for the throughput figure
	Cycles      int // create+exec+destroy cycles for the throughput figure
	Idle        int // idle sandboxes for the memory figures
	// ScaleIdle is a second, larger count of idle sandboxes for the scale
	// figure (0 skips it); Burst, a number of creates sent at once.
	ScaleIdle int
	Burst     int
	// StreamMB is the size in MiB of the file the stream figure sends
	// through `sbx exec` and `sbx cp` (0 skips it).
	StreamMB int
	// DaemonPID is the daemon's pid, for its RSS; 0 skips that figure.
	DaemonPID int
	// AgentBinary is the program a sandbox runs (the sealed sbx-agent), for
	// the floors' agent start; "" skips those parts.
	AgentBinary string
	// E2B, when set, is how the E2B figure (e2b.go) reaches the daemon;
	// nil skips it.
	E2B *E2BTarget
	// Progress receives one line per phase; nil for none.
	Progress io.Writer
}

// Report is the whole result, stable as JSON.
type Report struct {
	Backend string `json:"backend"`
	// Isolation is the level of the sandboxes measured ("native": every
	// layer applied), as their create answered.
	Isolation string `json:"isolation,omitempty"`
	// Targets are the run's targets, judged by Judge.
	Targets []Target `json:"targets,omitempty"`
	// Floors are the least each latency and throughput target's figure can
	// be in sbx's design on this machine (floors.go), from FloorParts and
	// the peers, filled by Judge.
	Floors     []Floor     `json:"floors,omitempty"`
	FloorParts *FloorParts `json:"floor_parts,omitempty"`
	// ColdStart is create → first exec (`true`) done, as the daemon is configured
	// (with its warm pool, by default), each sample taken once the pool is full:
	// the latency of one create.
	ColdStart Summary `json:"cold_start"`
	// ColdStartBackToBack is the same with each sample right after the last:
	// creates outrun the pool's refills. Absent without a pool.
	ColdStartBackToBack *Summary `json:"cold_start_back_to_back,omitempty"`
	// ColdStartNoPool is the same with the warm pool off: a sandbox built from
	// nothing for each create.
	ColdStartNoPool *Summary `json:"cold_start_no_pool,omitempty"`
	// ColdStartPhases is where a pool-off create's time goes, step by step:
	// medians of the daemon's own timings (phases.go), from creates of a
	// private daemon logging at debug, apart from the figures above.
	ColdStartPhases []Phase `json:"cold_start_phases,omitempty"`
	// E2B is Sandbox.create → the first commands.run('true') through E2B's
	// official JS SDK, beside the same through /v1 (e2b.go); absent when
	// skipped, E2BUnavailable then says why.
	E2B            *E2BResult `json:"e2b,omitempty"`
	E2BUnavailable string     `json:"e2b_unavailable,omitempty"`
	// Exec is one exec of `true` in a live sandbox.
	Exec Summary `json:"exec"`
	// Echo is one write_stdin to a terminal session running cat, answered
	// with the terminal's echo of it: an agent driving an interactive
	// program. Its peer is Exec, from the same run.
	Echo            *Summary `json:"terminal_echo,omitempty"`
	EchoUnavailable string   `json:"terminal_echo_unavailable,omitempty"`
	// StreamMBps is StreamMB MiB of random bytes cat'ed through `sbx exec`
	// into a pipe, in MB/s; CopyMBps, the same file through `sbx cp ID:file
	// -`, its peer. Absent when skipped or the API cannot run the CLI.
	StreamMB          int     `json:"stream_mb,omitempty"`
	StreamMBps        float64 `json:"stream_mb_per_s,omitempty"`
	CopyMBps          float64 `json:"copy_mb_per_s,omitempty"`
	StreamUnavailable string  `json:"stream_unavailable,omitempty"`
	// Network is the network tiers' figures (netbench.go), measured in a lab
	// of two namespaces of the bench's own; absent when it could not be built.
	Network            *NetResult `json:"network,omitempty"`
	NetworkUnavailable string     `json:"network_unavailable,omitempty"`
	// Throughput is create+exec+destroy cycles per second with Concurrency workers.
	Throughput float64 `json:"cycles_per_second"`
	// CycleCPU is the CPU one of those cycles costs. Absent when the API
	// cannot tell its daemon's CPU (an external daemon).
	CycleCPU *CycleCPU `json:"cpu_per_cycle,omitempty"`
	// HostSpawn is `true` started by this process on the host, its output
	// captured, and waited for: no sandbox, no daemon. It is the peer of Exec,
	// the floor of every exec on this machine.
	HostSpawn Summary `json:"host_spawn"`
	// BwrapOneShot is `true` in a fresh bubblewrap sandbox, the peer of ColdStart.
	BwrapOneShot *Summary `json:"bwrap_one_shot,omitempty"`
	// BwrapThroughput is one-shot bubblewrap runs per second with Concurrency workers.
	BwrapThroughput float64 `json:"bwrap_runs_per_second,omitempty"`
	// RoundTrip is one API call that does no sandbox work (GET /v1/health): the
	// transport part of every exec. Absent when the API cannot make one.
	RoundTrip *Summary `json:"round_trip,omitempty"`
	// NamespacesThroughput is `true` run in fresh namespaces by util-linux
	// unshare (mount, UTS, IPC, network, PID, cgroup), per second with
	// Concurrency workers: no mounts, no cgroups, no agent, no daemon. What
	// the machine's kernel allows any namespace sandbox at most.
	NamespacesThroughput  float64 `json:"namespaces_runs_per_second,omitempty"`
	NamespacesUnavailable string  `json:"namespaces_unavailable,omitempty"`
	// Memory with Idle idle sandboxes.
	IdleSandboxes int     `json:"idle_sandboxes"`
	DaemonRSSMB   float64 `json:"daemon_rss_mb,omitempty"`
	AgentRSSMB    float64 `json:"agent_rss_mb,omitempty"`
	AgentPSSMB    float64 `json:"agent_pss_mb,omitempty"`
	AgentUSSMB    float64 `json:"agent_uss_mb,omitempty"`
	Concurrency   int     `json:"concurrency"`
	// Scale is the memory at each count of idle sandboxes measured.
	Scale []ScalePoint `json:"scale,omitempty"`
	// Burst is Options.Burst creates sent at once.
	Burst             *BurstResult `json:"burst,omitempty"`
	BwrapUnavailable  string       `json:"bwrap_unavailable,omitempty"`
	MemoryUnavailable string       `json:"memory_unavailable,omitempty"`
}

// ScalePoint is the memory with Idle idle sandboxes: the daemon's RSS, its
// spawner's, the mean PSS of a sandbox's processes, and how many such
// sandboxes a GiB holds (counting the daemon's and spawner's growth per
// sandbox too).
type ScalePoint struct {
	Idle         int     `json:"idle"`
	DaemonRSSMB  float64 `json:"daemon_rss_mb"`
	SpawnerRSSMB float64 `json:"spawner_rss_mb"`
	PSSMB        float64 `json:"sandbox_pss_mb"`
	PerGiB       float64 `json:"sandboxes_per_gib"`
}

// BurstResult is many creates sent at once: each succeeds (after queueing)
// or is refused with a typed 429 or 503 carrying Retry-After.
type BurstResult struct {
	Creates  int     `json:"creates"`
	Created  int     `json:"created"`
	Refused  int     `json:"refused_429"`
	Busy     int     `json:"refused_503"`
	Untyped  int     `json:"other_errors"`
	NoRetry  int     `json:"refusals_without_retry_after"`
	Latency  Summary `json:"created_latency"`
	FirstErr string  `json:"first_other_error,omitempty"`
}

// Tooler is an API that calls the agent tools.
type Tooler interface {
	// Tool calls tool name on sandbox id and decodes its result into out.
	Tool(ctx context.Context, id, name string, args, out any) error
}

// Refuser is an API that tells a typed refusal from another error.
type Refuser interface {
	// Refusal returns the HTTP status of err (0 if none) and whether it
	// carried Retry-After.
	Refusal(err error) (status int, retryAfter bool)
}

func (o *Options) defaults() {
	if o.Runs <= 0 {
		o.Runs = 200
	}
	if o.Warmup <= 0 {
		o.Warmup = 20
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Cycles <= 0 {
		o.Cycles = 300
	}
	if o.Idle < 0 {
		o.Idle = 0
	}
}

func (o *Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

var trueArgv = []string{"true"}

// Run measures every figure but the scale figures (RunScale). Sandboxes it
// makes are deleted before it returns.
func Run(ctx context.Context, api API, opts Options) (Report, error) {
	opts.defaults()
	rep := Report{Concurrency: opts.Concurrency}

	cold, err := ColdStart(ctx, api, opts, true)
	if err != nil {
		return rep, err
	}
	rep.ColdStart = cold
	if pa, ok := api.(PoolAPI); ok {
		if _, size, err := pa.Pool(ctx); err == nil && size > 0 {
			b2b, err := ColdStart(ctx, api, opts, false)
			if err != nil {
				return rep, err
			}
			rep.ColdStartBackToBack = &b2b
		}
	}
	if opts.E2B != nil {
		if rep.E2B, rep.E2BUnavailable, err = E2B(ctx, api, *opts.E2B, opts); err != nil {
			return rep, err
		}
	}

	opts.progress("exec in a live sandbox: %d warm-up + %d runs of true", opts.Warmup, opts.Runs)
	id, err := api.Create(ctx)
	if err != nil {
		return rep, err
	}
	rep.Exec, err = sample(opts, timed(func() error { return mustExec(ctx, api, id) }))
	if err != nil {
		api.Delete(context.WithoutCancel(ctx), id)
		return rep, err
	}
	if t, ok := api.(Tooler); ok {
		opts.progress("terminal echo: %d warm-up + %d write_stdin calls to a cat session", opts.Warmup, opts.Runs)
		echo, err := terminalEcho(ctx, t, id, opts)
		if err != nil {
			api.Delete(context.WithoutCancel(ctx), id)
			return rep, err
		}
		rep.Echo = &echo
	} else {
		rep.EchoUnavailable = "this API has no tool calls"
	}
	if err := measureFloors(ctx, api, id, opts, &rep); err != nil {
		api.Delete(context.WithoutCancel(ctx), id)
		return rep, err
	}
	api.Delete(ctx, id)

	opts.progress("host spawn: %d warm-up + %d runs of true, no sandbox", opts.Warmup, opts.Runs)
	if rep.HostSpawn, err = sample(opts, func() (time.Duration, error) { return hostSpawn(ctx, trueArgv...) }); err != nil {
		return rep, err
	}

	if opts.StreamMB > 0 {
		if s, ok := api.(Streamer); ok {
			opts.progress("stream: %d MiB through sbx exec and sbx cp, 3 runs each", opts.StreamMB)
			if err := stream(ctx, s, opts, &rep); err != nil {
				return rep, err
			}
		} else {
			rep.StreamUnavailable = "this API cannot run the sbx CLI"
		}
	}

	if pa, ok := api.(PoolAPI); ok {
		opts.progress("API round trip: %d warm-up + %d health calls", opts.Warmup, opts.Runs)
		rt, err := sample(opts, timed(func() error { _, _, err := pa.Pool(ctx); return err }))
		if err != nil {
			return rep, err
		}
		rep.RoundTrip = &rt
	}

	opts.progress("throughput: %d create+exec+destroy cycles, %d workers", opts.Cycles, opts.Concurrency)
	meter, _ := api.(CPUMeter)
	var cpu0 CPUUse
	if meter != nil {
		if cpu0, err = meter.CPU(); err != nil {
			meter = nil
		}
	}
	rate, err := parallel(ctx, opts.Concurrency, opts.Cycles, func() error {
		_, err := coldStartAndDelete(ctx, api)
		return err
	})
	if err != nil {
		return rep, err
	}
	rep.Throughput = rate
	if meter != nil {
		if cpu1, err := meter.CPU(); err == nil {
			per := func(a, b time.Duration) float64 {
				return float64(b-a) / float64(time.Millisecond) / float64(opts.Cycles)
			}
			c := &CycleCPU{DaemonMS: per(cpu0.Daemon, cpu1.Daemon), HelpersMS: per(cpu0.Helpers, cpu1.Helpers),
				SandboxesMS: per(cpu0.Sandboxes, cpu1.Sandboxes)}
			c.TotalMS = c.DaemonMS + c.HelpersMS + c.SandboxesMS
			rep.CycleCPU = c
		}
	}

	if bwrap, err := exec.LookPath("bwrap"); err != nil {
		rep.BwrapUnavailable = "bwrap not installed (Debian package bubblewrap)"
	} else {
		opts.progress("bwrap: %d warm-up + %d one-shot runs of true, then %d runs with %d workers", opts.Warmup, opts.Runs, opts.Cycles, opts.Concurrency)
		bw, err := sample(opts, func() (time.Duration, error) { return runBwrap(ctx, bwrap, trueArgv...) })
		if err != nil {
			rep.BwrapUnavailable = err.Error()
		} else {
			rep.BwrapOneShot = &bw
			before := childrenCPU()
			rep.BwrapThroughput, _ = parallel(ctx, opts.Concurrency, opts.Cycles, func() error {
				_, err := runBwrap(ctx, bwrap, trueArgv...)
				return err
			})
			if rep.CycleCPU != nil && rep.BwrapThroughput > 0 {
				rep.CycleCPU.BwrapMS = float64(childrenCPU()-before) / float64(time.Millisecond) / float64(opts.Cycles)
			}
		}
	}

	if unshare, err := exec.LookPath("unshare"); err != nil {
		rep.NamespacesUnavailable = "unshare not installed (Debian package util-linux)"
	} else {
		opts.progress("bare namespaces: %d runs of unshare … true with %d workers", opts.Cycles, opts.Concurrency)
		rep.NamespacesThroughput, err = parallel(ctx, opts.Concurrency, opts.Cycles, func() error {
			_, err := runUnshare(ctx, unshare, trueArgv...)
			return err
		})
		if err != nil {
			rep.NamespacesThroughput, rep.NamespacesUnavailable = 0, err.Error()
		}
	}
	measureHostFloors(ctx, opts, &rep)
	return rep, nil
}

// RunScale measures the memory and scale figures and the burst, into rep
// (IdleSandboxes says how many idle sandboxes the memory figures hold).
// Run them after every other figure: deleting a thousand sandboxes and more
// leaves the kernel seconds of deferred teardown (network namespaces
// unregistered under the lock every new one takes, btrfs subvolumes
// dropped), which a create measured after it pays (a pool-off create
// measured just after took 25 ms instead of 14).
func RunScale(ctx context.Context, api API, opts Options, rep *Report) error {
	opts.defaults()
	rep.IdleSandboxes = opts.Idle
	if opts.Idle > 0 {
		opts.progress("memory: %d idle sandboxes", opts.Idle)
		if err := idleMemory(ctx, api, &opts, rep); err != nil {
			return err
		}
	}
	if opts.ScaleIdle > 0 {
		opts.progress("scale: %d idle sandboxes", opts.ScaleIdle)
		if err := scale(ctx, api, &opts, rep); err != nil {
			return err
		}
	}
	if opts.Burst > 0 {
		opts.progress("burst: %d creates at once", opts.Burst)
		b, err := burst(ctx, api, opts)
		if err != nil {
			return err
		}
		rep.Burst = &b
	}
	return nil
}

// scale measures memory at Idle (as idleMemory did) and at ScaleIdle idle
// sandboxes: a point each, with the daemon's growth per sandbox counted.
func scale(ctx context.Context, api API, opts *Options, rep *Report) error {
	base := daemonRSS(opts) + spawnerRSS(opts)
	var ids []string
	defer func() { deleteAll(ctx, api, ids, opts.Concurrency) }()
	point := func() ScalePoint {
		p := ScalePoint{Idle: len(ids), DaemonRSSMB: daemonRSS(opts), SpawnerRSSMB: spawnerRSS(opts)}
		var sum int64
		n := 0
		for _, id := range ids {
			for _, pid := range sandboxPIDs(id) {
				if m, err := readMemory(pid); err == nil {
					sum += m.PSS
				}
			}
			n++
		}
		if n > 0 {
			p.PSSMB = mb(sum / int64(n))
			per := p.PSSMB + max(p.DaemonRSSMB+p.SpawnerRSSMB-base, 0)/float64(n)
			if per > 0 {
				p.PerGiB = 1024 / per
			}
		}
		return p
	}
	counts := []int{opts.ScaleIdle}
	if opts.Idle > 0 && opts.Idle < opts.ScaleIdle {
		counts = []int{opts.Idle, opts.ScaleIdle}
	}
	for _, want := range counts {
		for len(ids) < want {
			id, err := api.Create(ctx)
			if err != nil {
				return fmt.Errorf("scale: sandbox %d of %d: %w", len(ids)+1, want, err)
			}
			ids = append(ids, id)
			if err := mustExec(ctx, api, id); err != nil {
				return err
			}
		}
		time.Sleep(2 * time.Second)
		rep.Scale = append(rep.Scale, point())
	}
	return nil
}

// burst sends n creates at once and sorts the answers.
func burst(ctx context.Context, api API, opts Options) (BurstResult, error) {
	res := BurstResult{Creates: opts.Burst}
	var mu sync.Mutex
	var ids []string
	var lat []time.Duration
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range opts.Burst {
		wg.Go(func() {
			<-start
			began := time.Now()
			id, err := api.Create(ctx)
			took := time.Since(began)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ids = append(ids, id)
				lat = append(lat, took)
				return
			}
			status, retry := 0, false
			if r, ok := api.(Refuser); ok {
				status, retry = r.Refusal(err)
			}
			switch status {
			case 429:
				res.Refused++
			case 503:
				res.Busy++
			default:
				res.Untyped++
				if res.FirstErr == "" {
					res.FirstErr = err.Error()
				}
				return
			}
			if !retry {
				res.NoRetry++
			}
		})
	}
	close(start)
	wg.Wait()
	res.Created = len(ids)
	res.Latency = summarize(lat)
	deleteAll(ctx, api, ids, opts.Concurrency)
	return res, ctx.Err()
}

// deleteAll deletes ids with workers at a time.
func deleteAll(ctx context.Context, api API, ids []string, workers int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(workers, 1))
	for _, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			api.Delete(context.WithoutCancel(ctx), id)
		})
	}
	wg.Wait()
}

// ColdStart measures create → first exec done, opts.Runs times after warm-up.
// With poolFull, and an API that reports the pool, each sample waits until the
// pool is full again (at most poolWait); else samples follow each other.
func ColdStart(ctx context.Context, api API, opts Options, poolFull bool) (Summary, error) {
	opts.defaults()
	pa, _ := api.(PoolAPI)
	if pa == nil {
		poolFull = false
	}
	how := "back to back"
	if poolFull {
		how = "each once the warm pool is full"
	}
	opts.progress("cold start: %d warm-up + %d runs of create → exec true, %s", opts.Warmup, opts.Runs, how)
	return sample(opts, func() (time.Duration, error) {
		if poolFull {
			if err := waitPoolFull(ctx, pa); err != nil {
				return 0, err
			}
		}
		return coldStart(ctx, api)
	})
}

// sample calls f opts.Warmup + opts.Runs times and summarizes the durations it
// returns after the warm-up; f's first error ends it.
func sample(opts Options, f func() (time.Duration, error)) (Summary, error) {
	ds := make([]time.Duration, 0, opts.Runs)
	for i := range opts.Warmup + opts.Runs {
		d, err := f()
		if err != nil {
			return Summary{}, err
		}
		if i >= opts.Warmup {
			ds = append(ds, d)
		}
	}
	return summarize(ds), nil
}

// timed makes f a sample: how long one call took.
func timed(f func() error) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		start := time.Now()
		err := f()
		return time.Since(start), err
	}
}

// poolWait bounds the wait for a full pool: a pool that cannot fill (a failing
// backend) leaves the samples back to back rather than stopping the run.
const poolWait = 5 * time.Second

func waitPoolFull(ctx context.Context, pa PoolAPI) error {
	for deadline := time.Now().Add(poolWait); time.Now().Before(deadline); {
		ready, size, err := pa.Pool(ctx)
		if err != nil {
			return err
		}
		if ready >= size {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

func mustExec(ctx context.Context, api API, id string) error {
	code, err := api.Exec(ctx, id, trueArgv)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("exec true in %s exited %d", id, code)
	}
	return nil
}

// coldStart times create → first exec done; the delete is not timed.
func coldStart(ctx context.Context, api API) (time.Duration, error) {
	d, id, err := timedCreateExec(ctx, api)
	if id != "" {
		if derr := api.Delete(context.WithoutCancel(ctx), id); err == nil {
			err = derr
		}
	}
	return d, err
}

func coldStartAndDelete(ctx context.Context, api API) (time.Duration, error) {
	return coldStart(ctx, api)
}

func timedCreateExec(ctx context.Context, api API) (time.Duration, string, error) {
	start := time.Now()
	id, err := api.Create(ctx)
	if err != nil {
		return 0, "", err
	}
	if err := mustExec(ctx, api, id); err != nil {
		return 0, id, err
	}
	return time.Since(start), id, nil
}

// parallel runs n calls of f over workers goroutines and returns calls per second.
func parallel(ctx context.Context, workers, n int, f func() error) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if ctx.Err() != nil {
					errs[w] = ctx.Err()
					return
				}
				if err := f(); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func idleMemory(ctx context.Context, api API, opts *Options, rep *Report) error {
	ids := make([]string, 0, opts.Idle)
	defer func() { deleteAll(ctx, api, ids, opts.Concurrency) }()
	for range opts.Idle {
		id, err := api.Create(ctx)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	// Let every agent settle into idle (its first GC, its first exec done).
	for _, id := range ids {
		if err := mustExec(ctx, api, id); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second)
	rep.DaemonRSSMB = daemonRSS(opts)
	var sum memory
	n := 0
	for _, id := range ids {
		pid := agentPID(id)
		if pid == 0 {
			continue
		}
		m, err := readMemory(pid)
		if err != nil {
			continue
		}
		sum.RSS += m.RSS
		sum.PSS += m.PSS
		sum.USS += m.USS
		n++
	}
	if n == 0 {
		rep.MemoryUnavailable = "no agent process visible from here (is the daemon on this host, with a cgroup backend?)"
		return nil
	}
	rep.AgentRSSMB = mb(sum.RSS / int64(n))
	rep.AgentPSSMB = mb(sum.PSS / int64(n))
	rep.AgentUSSMB = mb(sum.USS / int64(n))
	return nil
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// daemonRSS is the daemon's RSS in MB; 0 when its pid is not known.
func daemonRSS(opts *Options) float64 {
	if opts.DaemonPID > 0 {
		if m, err := readMemory(opts.DaemonPID); err == nil {
			return mb(m.RSS)
		}
	}
	return 0
}

// spawnerRSS is the RSS of the daemon's spawner in MB; 0 when the daemon's
// pid is not known or it has none.
func spawnerRSS(opts *Options) float64 {
	var sum int64
	if opts.DaemonPID > 0 {
		for _, pid := range spawners(opts.DaemonPID) {
			if m, err := readMemory(pid); err == nil {
				sum += m.RSS
			}
		}
	}
	return mb(sum)
}

// WriteTable prints the report as a table, each figure beside its peer: bwrap
// for whole sandboxes, a plain host spawn for exec.
func (r Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	if r.Isolation != "" {
		fmt.Fprintf(w, "isolation measured: %s\n", r.Isolation)
	}
	fmt.Fprintf(tw, "figure\tsbx (%s)\tp90\tp99\tpeer\tpeer p50\tsbx/peer\n", r.Backend)
	row := func(name string, s Summary, peer string, peerMS float64, _ string) {
		pv, ratio := "n/a", "n/a"
		if peerMS > 0 {
			pv, ratio = fmt.Sprintf("%.2f ms", peerMS), fmt.Sprintf("%.2fx", s.P50MS/peerMS)
		}
		fmt.Fprintf(tw, "%s\t%.2f ms\t%.2f ms\t%.2f ms\t%s\t%s\t%s\n", name, s.P50MS, s.P90MS, s.P99MS, peer, pv, ratio)
	}
	const bname = "bwrap one-shot true"
	var bms float64
	if r.BwrapOneShot != nil {
		bms = r.BwrapOneShot.P50MS
	}
	row("create → first exec, p50", r.ColdStart, bname, bms, "")
	if c := r.ColdStartBackToBack; c != nil {
		row("create → first exec, back to back, p50", *c, bname, bms, "")
	}
	if c := r.ColdStartNoPool; c != nil {
		row("create → first exec, pool off, p50", *c, bname, bms, "")
	}
	if e := r.E2B; e != nil {
		row("E2B SDK: Sandbox.create → commands.run('true'), p50", e.SDK, "the same via /v1 (Go client)", e.Peer.P50MS, "")
	}
	row("exec in live sandbox, p50", r.Exec, "host spawn of true", r.HostSpawn.P50MS, "")
	if r.Echo != nil {
		row("terminal echo (write_stdin), p50", *r.Echo, "exec in live sandbox", r.Exec.P50MS, "")
	}
	tratio, bt := "n/a", "n/a"
	if r.BwrapThroughput > 0 {
		bt = fmt.Sprintf("%.1f /s", r.BwrapThroughput)
		tratio = fmt.Sprintf("%.2fx", r.Throughput/r.BwrapThroughput)
	}
	fmt.Fprintf(tw, "create+exec+destroy (%d workers)\t%.1f /s\t\t\t%s\t%s\t%s\n", r.Concurrency, r.Throughput, bname, bt, tratio)
	if r.NamespacesThroughput > 0 {
		fmt.Fprintf(tw, "create+exec+destroy (%d workers)\t%.1f /s\t\t\t%s\t%.1f /s\t%.2fx\n", r.Concurrency, r.Throughput, "bare unshare + true", r.NamespacesThroughput, r.Throughput/r.NamespacesThroughput)
	}
	if c := r.CycleCPU; c != nil {
		peer, ratio := "n/a", "n/a"
		if c.BwrapMS > 0 {
			peer, ratio = fmt.Sprintf("%.2f ms", c.BwrapMS), fmt.Sprintf("%.2fx", c.TotalMS/c.BwrapMS)
		}
		fmt.Fprintf(tw, "CPU per cycle (sandbox %.2f + daemon %.2f + spawner %.2f)	%.2f ms			%s CPU per run	%s	%s\n",
			c.SandboxesMS, c.DaemonMS, c.HelpersMS, c.TotalMS, bname, peer, ratio)
	}
	if rt := r.RoundTrip; rt != nil {
		fmt.Fprintf(tw, "API round trip (health), p50\t%.2f ms\t%.2f ms\t%.2f ms\t\t\t\n", rt.P50MS, rt.P90MS, rt.P99MS)
	}
	if r.StreamMBps > 0 {
		fmt.Fprintf(tw, "%d MiB through sbx exec into a pipe\t%.0f MB/s\t\t\tsbx cp ID:file -\t%.0f MB/s\t%.2fx\n",
			r.StreamMB, r.StreamMBps, r.CopyMBps, r.StreamMBps/r.CopyMBps)
	}
	if n := r.Network; n != nil {
		row("create → first exec, pool off, tier allowlist, p50", n.CreateAllowlist, "the same, tier none", n.CreateNone.P50MS, "")
		fmt.Fprintf(tw, "%d MiB over HTTP through the egress proxy\t%.0f MB/s\t\t\tthe same, direct\t%.0f MB/s\t%.2fx\n",
			n.StreamMB, n.ProxyMBps, n.DirectMBps, n.ProxyMBps/n.DirectMBps)
		if n.RelayMBps > 0 {
			fmt.Fprintf(tw, "%d MiB over HTTP through the egress proxy\t%.0f MB/s\t\t\ta bare relay, same links\t%.0f MB/s\t%.2fx\n",
				n.StreamMB, n.ProxyMBps, n.RelayMBps, n.ProxyMBps/n.RelayMBps)
		}
		row("HTTP request on a new connection via the proxy, p50", n.ProxyConn, "the same, direct", n.DirectConn.P50MS, "")
	}
	if r.IdleSandboxes > 0 {
		fmt.Fprintf(tw, "daemon RSS, %d idle sandboxes\t%.1f MB\t\t\t\t\t\n", r.IdleSandboxes, r.DaemonRSSMB)
		fmt.Fprintf(tw, "agent per idle sandbox (PSS / USS / RSS)\t%.2f / %.2f / %.2f MB\t\t\t\t\t\n", r.AgentPSSMB, r.AgentUSSMB, r.AgentRSSMB)
	}
	for _, p := range r.Scale {
		fmt.Fprintf(tw, "%d idle sandboxes: daemon RSS, spawner RSS, sandbox PSS\t%.1f MB, %.1f MB, %.2f MB\t\t\t%.0f sandboxes per GiB\t\t\n", p.Idle, p.DaemonRSSMB, p.SpawnerRSSMB, p.PSSMB, p.PerGiB)
	}
	if b := r.Burst; b != nil {
		fmt.Fprintf(tw, "%d creates at once: created, p50\t%d, %.1f ms\t%.1f ms\t%.1f ms\t429: %d, 503: %d, other: %d\t\t\n",
			b.Creates, b.Created, b.Latency.P50MS, b.Latency.P90MS, b.Latency.P99MS, b.Refused, b.Busy, b.Untyped)
	}
	tw.Flush()
	if len(r.Targets) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "target\tsbx\tpeer\tratio\twant\tmet\n")
		for _, t := range r.Targets {
			peer, ratio, met := "", "", "no"
			if t.Peer != "" {
				peer = fmt.Sprintf("%s %.2f %s", t.Peer, t.PeerValue, t.Unit)
				ratio = fmt.Sprintf("%.2fx", t.Ratio)
			}
			if t.Met {
				met = "yes"
			}
			if t.Unmeasured != "" {
				met = "n/a: " + t.Unmeasured
			}
			fmt.Fprintf(tw, "%s\t%.2f %s\t%s\t%s\t%s\t%s\n", t.Figure, t.Value, t.Unit, peer, ratio, t.Want, met)
		}
		tw.Flush()
		m, n := r.TargetsMet()
		fmt.Fprintf(w, "%d of %d targets met\n", m, n)
	}
	r.writeFloors(w)
	r.writePhases(w)
	if r.BwrapUnavailable != "" {
		fmt.Fprintf(w, "bwrap: %s\n", r.BwrapUnavailable)
	}
	if r.NetworkUnavailable != "" {
		fmt.Fprintf(w, "network: %s\n", r.NetworkUnavailable)
	}
	if r.NamespacesUnavailable != "" {
		fmt.Fprintf(w, "bare namespaces: %s\n", r.NamespacesUnavailable)
	}
	if r.MemoryUnavailable != "" {
		fmt.Fprintf(w, "memory: %s\n", r.MemoryUnavailable)
	}
	if r.StreamUnavailable != "" {
		fmt.Fprintf(w, "stream: %s\n", r.StreamUnavailable)
	}
	if r.E2BUnavailable != "" {
		fmt.Fprintf(w, "E2B SDK: %s\n", r.E2BUnavailable)
	}
}

// Streamer is an API that can also run the sbx CLI against its daemon, for
// the stream figure.
type Streamer interface {
	API
	// CreateDisk makes a sandbox with diskMB MiB of disk.
	CreateDisk(ctx context.Context, diskMB int) (string, error)
	// CLI runs the sbx CLI with args against the daemon, its stdout into w.
	CLI(ctx context.Context, w io.Writer, args ...string) error
}

// streamFile is where the stream figure's file is made, in its sandbox.
const streamFile = "/workspace/stream.bin"

// stream measures opts.StreamMB MiB of random bytes cat'ed through `sbx exec`
// into a pipe, and the same file through `sbx cp ID:file -`: three runs of
// each, interleaved, after one of each to warm the page cache; the medians.
func stream(ctx context.Context, s Streamer, opts Options, rep *Report) error {
	id, err := s.CreateDisk(ctx, opts.StreamMB+256)
	if err != nil {
		return err
	}
	defer s.Delete(context.WithoutCancel(ctx), id)
	size := int64(opts.StreamMB) << 20
	if code, err := s.Exec(ctx, id, []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/urandom > %s", size, streamFile)}); err != nil || code != 0 {
		return fmt.Errorf("making the stream figure's file: exit %d, %v", code, err)
	}
	run := func(args ...string) (float64, error) {
		n := &countingDiscard{}
		start := time.Now()
		if err := s.CLI(ctx, n, args...); err != nil {
			return 0, err
		}
		if n.n != size {
			return 0, fmt.Errorf("sbx %s delivered %d bytes of %d", args[0], n.n, size)
		}
		return float64(size) / 1e6 / time.Since(start).Seconds(), nil
	}
	execArgs := []string{"exec", "--timeout", "3600", id, "--", "cat", streamFile}
	cpArgs := []string{"cp", id + ":" + streamFile, "-"}
	var ex, cp []float64
	for i := range 4 {
		e, err := run(execArgs...)
		if err != nil {
			return err
		}
		c, err := run(cpArgs...)
		if err != nil {
			return err
		}
		if i > 0 { // the first of each warms the page cache
			ex, cp = append(ex, e), append(cp, c)
		}
	}
	rep.StreamMB, rep.StreamMBps, rep.CopyMBps = opts.StreamMB, median(ex), median(cp)
	return nil
}

// countingDiscard counts and drops what is written to it.
type countingDiscard struct{ n int64 }

func (c *countingDiscard) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// median of v (nearest-rank, as every figure of the report).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return quantile(s, 0.5)
}

// terminalEcho starts cat in a terminal session (exec_command) and times
// write_stdin calls, each until its answer carries the terminal's echo.
func terminalEcho(ctx context.Context, t Tooler, id string, opts Options) (Summary, error) {
	var started struct {
		SessionID string `json:"session_id"`
		Alive     bool   `json:"alive"`
	}
	if err := t.Tool(ctx, id, "exec_command", map[string]any{"command": "cat", "grace_seconds": 0}, &started); err != nil {
		return Summary{}, fmt.Errorf("terminal echo: exec_command: %w", err)
	}
	if !started.Alive {
		return Summary{}, fmt.Errorf("terminal echo: cat exited at once")
	}
	defer t.Tool(context.WithoutCancel(ctx), id, "close_session", map[string]any{"session_id": started.SessionID}, nil)
	n := 0
	return sample(opts, timed(func() error {
		n++
		line := fmt.Sprintf("e%d", n)
		var out struct {
			Stdout string `json:"stdout"`
		}
		got := ""
		for !strings.Contains(got, line) {
			input := ""
			if got == "" {
				input = line + "\n"
			}
			if err := t.Tool(ctx, id, "write_stdin", map[string]any{"session_id": started.SessionID, "input": input, "wait_seconds": 5}, &out); err != nil {
				return fmt.Errorf("terminal echo: write_stdin: %w", err)
			}
			if out.Stdout == "" && input == "" {
				return fmt.Errorf("terminal echo: no echo of %q within 5 s", line)
			}
			got += out.Stdout
		}
		return nil
	}))
}
