// This file implements `sbx bench`: it measures a daemon through the public API
// beside bubblewrap, in one run, and prints a table with ratios (package bench).
// Without --external it starts private daemons from this same binary on temporary
// data dirs: one with the defaults (warm pool on) and one with the pool off, so
// the table shows both the hand-out and the cold-start figures.

package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/client"
	"sbx.dev/sbx/internal/bench"
)

func runBench(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("bench", "[--runs N] [--warmup N] [--concurrency N] [--cycles N] [--idle N] [--scale N] [--burst N] [--stream-mb N] [--net=false] [--e2b=false] [--e2b-sdk DIR] [--backend B] [--external] [--json]")
	var opts bench.Options
	fs.IntVar(&opts.Runs, "runs", 200, "samples per latency figure, after warm-up")
	fs.IntVar(&opts.Warmup, "warmup", 20, "warm-up runs before each latency figure")
	fs.IntVar(&opts.Concurrency, "concurrency", 4, "workers for the throughput figures")
	fs.IntVar(&opts.Cycles, "cycles", 300, "create+exec+destroy cycles for the throughput figure")
	fs.IntVar(&opts.Idle, "idle", 100, "idle sandboxes for the memory figures (0 skips)")
	fs.IntVar(&opts.ScaleIdle, "scale", 1000, "idle sandboxes for the scale figure, beside --idle's (0 skips)")
	fs.IntVar(&opts.Burst, "burst", 500, "creates sent at once for the burst figure (0 skips)")
	fs.IntVar(&opts.StreamMB, "stream-mb", 1024, "`MiB` sent through sbx exec and sbx cp for the stream figure (0 skips)")
	backendName := fs.String("backend", "native", "SANDBOX_BACKEND of the private daemons")
	external := fs.Bool("external", false, "measure the daemon found by SBX_URL/SBX_API_KEY (or the local data dir) instead of private ones")
	withNet := fs.Bool("net", true, "measure the network tiers in a lab of two namespaces of the bench's own (root)")
	withE2B := fs.Bool("e2b", true, "measure Sandbox.create → commands.run through E2B's JS SDK (node and npm package e2b)")
	e2bSDK := fs.String("e2b-sdk", "", "directory whose node_modules holds E2B's JS SDK (default: test/node of the source tree)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := fs.Parse(args); err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	opts.Progress = e.stderr

	var rep bench.Report
	if *external {
		c, err := e.newClient()
		if err != nil {
			return e.fail("bench", *asJSON, exitError, err)
		}
		api := &benchAPI{c: c}
		if *withE2B {
			opts.E2B = &bench.E2BTarget{URL: e.getenv("SBX_URL"), Key: e.getenv("SBX_API_KEY"), SDKDir: *e2bSDK}
		}
		rep, err = bench.Run(ctx, api, opts)
		if err == nil {
			err = bench.RunScale(ctx, api, opts, &rep)
		}
		rep.Isolation, _ = api.level.Load().(string)
		if err != nil {
			return e.fail("bench", *asJSON, exitError, err)
		}
		rep.Backend = "external"
	} else {
		d, err := startPrivateDaemon(ctx, *backendName, "", "")
		if err != nil {
			return e.fail("bench", *asJSON, exitError, err)
		}
		opts.DaemonPID = d.cmd.Process.Pid
		if agents, _ := filepath.Glob(filepath.Join(d.dir, "backends", *backendName, "bin", "sbx-agent-*")); len(agents) > 0 {
			opts.AgentBinary = agents[0] // the program its sandboxes run, sealed at its start
		}
		api := &meteredAPI{benchAPI: &benchAPI{c: d.client, cliEnv: d.cliEnv}, pid: d.cmd.Process.Pid, dir: d.dir}
		if *withE2B {
			opts.E2B = &bench.E2BTarget{URL: d.url, Key: d.key, SDKDir: *e2bSDK}
		}
		rep, err = bench.Run(ctx, api, opts)
		opts.E2B = nil
		rep.Isolation, _ = api.level.Load().(string)
		d.stop()
		if err != nil {
			return e.fail("bench", *asJSON, exitError, err)
		}
		rep.Backend = *backendName
		fmt.Fprintln(e.stderr, "cold start with the warm pool off")
		cold, err := startPrivateDaemon(ctx, *backendName, "0", "")
		if err != nil {
			return e.fail("bench", *asJSON, exitError, err)
		}
		s, err := bench.ColdStart(ctx, &benchAPI{c: cold.client}, opts, false)
		cold.stop()
		if err != nil {
			return e.fail("bench", *asJSON, exitError, err)
		}
		rep.ColdStartNoPool = &s
		if rep.ColdStartPhases, err = coldStartPhases(ctx, *backendName, opts); err != nil {
			return e.fail("bench", *asJSON, exitError, err)
		}
		if *withNet {
			rep.Network, err = benchNetwork(ctx, *backendName, opts)
			if err != nil {
				rep.NetworkUnavailable = err.Error()
			}
		}
		// Last, on a daemon of their own: see bench.RunScale.
		if err := benchScale(ctx, *backendName, opts, &rep); err != nil {
			return e.fail("bench", *asJSON, exitError, err)
		}
	}
	rep.Judge()
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
		return exitOK
	}
	rep.WriteTable(e.stdout)
	return exitOK
}

// benchScale measures the scale figures (bench.RunScale) on a private
// daemon of its own, with the default pool as the first had.
func benchScale(ctx context.Context, backend string, opts bench.Options, rep *bench.Report) error {
	if opts.Idle <= 0 && opts.ScaleIdle <= 0 && opts.Burst <= 0 {
		return nil
	}
	d, err := startPrivateDaemon(ctx, backend, "", "")
	if err != nil {
		return err
	}
	defer d.stop()
	opts.DaemonPID = d.cmd.Process.Pid
	return bench.RunScale(ctx, &benchAPI{c: d.client, cliEnv: d.cliEnv}, opts, rep)
}

// phaseRuns is how many pool-off creates the step-by-step breakdown times.
const phaseRuns = 60

// coldStartPhases times pool-off creates of a private daemon logging at
// debug, and returns the medians of the steps it logs for each: apart from
// the figures (its logging is work they do not do).
func coldStartPhases(ctx context.Context, backend string, opts bench.Options) ([]bench.Phase, error) {
	opts.Warmup, opts.Runs = 5, min(max(opts.Runs, 1), phaseRuns)
	fmt.Fprintf(opts.Progress, "pool-off create step by step: %d creates of a daemon logging at debug\n", opts.Runs)
	plog := &bench.PhaseLog{Skip: opts.Warmup}
	d, err := startPrivateDaemonLog(ctx, backend, "0", "", plog, "SBX_LOG_LEVEL=debug")
	if err != nil {
		return nil, err
	}
	defer d.stop()
	quiet := opts
	quiet.Progress = nil
	if _, err := bench.ColdStart(ctx, &benchAPI{c: d.client}, quiet, false); err != nil {
		return nil, err
	}
	return plog.Medians(), nil
}

// benchNetwork measures the network figures: a private daemon, pool off, in
// a lab of two namespaces whose second holds the upstream server.
func benchNetwork(ctx context.Context, backend string, opts bench.Options) (*bench.NetResult, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("needs root (it makes network namespaces)")
	}
	fmt.Fprintln(opts.Progress, "network tiers, in a lab of two namespaces")
	lab, err := bench.NewNetLab()
	if err != nil {
		return nil, err
	}
	defer lab.Close()
	d, err := startPrivateDaemon(ctx, backend, "0", lab.HostNS, "SBX_NETWORKS=none,allowlist,full",
		"SBX_NETWORK_HOSTS_FILE="+lab.HostsFile, "SBX_NETWORK_NAMESERVERS=127.0.0.1:53")
	if err != nil {
		return nil, err
	}
	defer d.stop()
	tier := func(mode string, allow ...string) *benchAPI {
		return &benchAPI{c: d.client, network: &openapi.NetworkPolicy{Mode: mode, Allow: allow}}
	}
	return bench.Network(ctx, tier("none"), tier("allowlist", bench.LabUpstreamName), tier("full"), lab, opts)
}

// benchAPI adapts the Go client to what package bench drives.
type benchAPI struct {
	c *client.Client
	// cliEnv is added to the environment of the CLI the stream figure
	// runs (this binary): how it reaches the daemon.
	cliEnv []string
	level  atomic.Value // string: the isolation level the last create answered
	// network, when set, is the tier of the sandboxes Create makes.
	network *openapi.NetworkPolicy
}

// CreateDisk implements bench.Streamer.
func (a *benchAPI) CreateDisk(ctx context.Context, diskMB int) (string, error) {
	mb := int64(diskMB)
	sb, err := a.c.Create(ctx, openapi.CreateSandboxRequest{DiskMB: &mb})
	if err != nil {
		return "", err
	}
	return sb.ID, nil
}

// CLI implements bench.Streamer: this binary, as a script would run it.
func (a *benchAPI) CLI(ctx context.Context, w io.Writer, args ...string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), a.cliEnv...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &limitedWriter{w: &stderr, n: 4096}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("sbx %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func (a *benchAPI) Create(ctx context.Context) (string, error) {
	sb, err := a.c.Create(ctx, openapi.CreateSandboxRequest{Network: a.network})
	if err != nil {
		return "", err
	}
	a.level.Store(sb.Isolation.Level)
	return sb.ID, nil
}

func (a *benchAPI) Exec(ctx context.Context, id string, argv []string) (int, error) {
	res, err := a.c.Exec(ctx, id, openapi.ExecRequest{Argv: argv})
	if err != nil {
		return 0, err
	}
	return client.ExitCode(res), nil
}

// Output implements bench.OutputAPI.
func (a *benchAPI) Output(ctx context.Context, id string, argv []string) (string, int, error) {
	res, err := a.c.Exec(ctx, id, openapi.ExecRequest{Argv: argv})
	if err != nil {
		return "", 0, err
	}
	return res.Stdout, client.ExitCode(res), nil
}

// Refusal implements bench.Refuser.
func (a *benchAPI) Refusal(err error) (int, bool) {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Status, ae.RetryAfter > 0
	}
	return 0, false
}

func (a *benchAPI) Delete(ctx context.Context, id string) error { return a.c.Delete(ctx, id) }

// AgentCall implements bench.AgentCaller: a stat of the sandbox's root.
func (a *benchAPI) AgentCall(ctx context.Context, id string) error {
	_, err := a.c.Stat(ctx, id, "/")
	return err
}

func (a *benchAPI) Pool(ctx context.Context) (ready, size int, err error) {
	h, err := a.c.Health(ctx)
	if err != nil || h.Pool == nil {
		return 0, 0, err
	}
	return h.Pool.Ready, h.Pool.Size, nil
}

// meteredAPI is a private daemon's benchAPI, whose CPU use the bench reads
// (bench.CPUMeter).
type meteredAPI struct {
	*benchAPI
	pid int
	dir string // the daemon's data dir
}

func (a *meteredAPI) CPU() (bench.CPUUse, error) {
	inst, err := os.ReadFile(filepath.Join(a.dir, "backends", "native", "instance"))
	if err != nil {
		return bench.CPUUse{}, fmt.Errorf("the private daemon's native instance: %w", err)
	}
	return bench.DaemonCPU(a.pid, strings.TrimSpace(string(inst)))
}

// privateDaemon is an `sbx serve` the bench started and owns.
type privateDaemon struct {
	cmd    *exec.Cmd
	dir    string
	url    string // its HTTP listener (in its network namespace, with one)
	key    string // its admin key
	client *client.Client
	cliEnv []string // how the CLI reaches it
	done   chan struct{}
}

const benchChildEnv = "SBX_BENCH_CHILD"

var benchListenLine = regexp.MustCompile(`listening on (http://\S+)`)

// startPrivateDaemon runs this binary's `sbx serve` on a temporary data dir and a
// free loopback port; poolSize, when set, is its SBX_POOL_SIZE.
// netns, when set, is the network namespace it runs in (reached over its
// unix socket); env is added to its environment.
func startPrivateDaemon(ctx context.Context, backend, poolSize, netns string, env ...string) (*privateDaemon, error) {
	return startPrivateDaemonLog(ctx, backend, poolSize, netns, nil, env...)
}

// startPrivateDaemonLog is startPrivateDaemon whose log also goes to log
// (when not nil).
func startPrivateDaemonLog(ctx context.Context, backend, poolSize, netns string, log io.Writer, env ...string) (*privateDaemon, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the sbx binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "sbx-bench-")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "sbx.sock")
	cmd := exec.Command(exe, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--socket", sock)
	if netns != "" {
		cmd = exec.Command("nsenter", append([]string{"--net=" + netns, exe}, cmd.Args[1:]...)...)
	}
	// The marker stops a binary that is not sbx (a test binary) from recursing:
	// its "serve" would run `bench` again.
	if os.Getenv(benchChildEnv) != "" {
		return nil, fmt.Errorf("sbx bench: refusing to start a private daemon from inside one (%s is set)", benchChildEnv)
	}
	// The per-key limits are policy, not cost: lifted, so the figures show
	// what a sandbox costs (the burst still meets the create queue's bound).
	cmd.Env = append(os.Environ(), "SANDBOX_BACKEND="+backend, "SBX_LOG_LEVEL=warn", benchChildEnv+"=1",
		"SBX_CREATE_RATE_PER_KEY=100000", "SBX_CREATE_BURST_PER_KEY=100000", "SBX_EXEC_RATE_PER_KEY=100000",
		"SBX_EXEC_BURST_PER_KEY=100000", "SBX_MAX_SANDBOXES=5000", "SBX_MAX_SANDBOXES_PER_KEY=5000")
	if poolSize != "" {
		cmd.Env = append(cmd.Env, "SBX_POOL_SIZE="+poolSize)
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var logBuf strings.Builder
	cmd.Stderr = &limitedWriter{w: &logBuf, n: 64 << 10}
	if log != nil {
		cmd.Stderr = io.MultiWriter(cmd.Stderr, log)
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting a private sbx serve: %w", err)
	}
	d := &privateDaemon{cmd: cmd, dir: dir, done: make(chan struct{})}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := benchListenLine.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, out)
	}()
	go func() {
		cmd.Wait()
		close(d.done)
	}()
	var url string
	select {
	case url = <-urls:
	case <-d.done:
		os.RemoveAll(dir)
		return nil, fmt.Errorf("private sbx serve exited: %s", strings.TrimSpace(logBuf.String()))
	case <-time.After(60 * time.Second):
		d.stop()
		return nil, fmt.Errorf("private sbx serve printed no address within 60 s")
	case <-ctx.Done():
		d.stop()
		return nil, ctx.Err()
	}
	key, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil {
		d.stop()
		return nil, err
	}
	d.url, d.key = url, strings.TrimSpace(string(key))
	if netns != "" {
		url = "unix:" + sock // its TCP listener is in the other namespace
	}
	d.client, err = client.New(url, strings.TrimSpace(string(key)))
	if err != nil {
		d.stop()
		return nil, err
	}
	d.cliEnv = []string{"SBX_URL=" + url, "SBX_API_KEY=" + strings.TrimSpace(string(key))}
	return d, nil
}

// stop ends the daemon, deletes what it still holds, and removes its data dir.
func (d *privateDaemon) stop() {
	if d.client != nil {
		// Sandboxes outlive their daemon: delete every one first, again while a
		// create still in flight when the figures ended adds another.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for range 5 {
			l, err := d.client.List(ctx, nil)
			if err != nil || len(l) == 0 {
				break
			}
			for _, sb := range l {
				d.client.Delete(ctx, sb.ID)
			}
		}
		cancel()
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
	}
	os.RemoveAll(d.dir)
}

type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n <= 0 {
		return len(p), nil
	}
	q := p
	if len(q) > l.n {
		q = q[:l.n]
	}
	l.n -= len(q)
	l.w.Write(q)
	return len(p), nil
}

func (a *benchAPI) Tool(ctx context.Context, id, name string, args, out any) error {
	return a.c.CallTool(ctx, id, name, args, out)
}
