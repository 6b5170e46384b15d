// This file measures the E2B figure: Sandbox.create() → the first
// commands.run('true') done through E2B's official JS SDK against the
// daemon, timed inside one node process (e2b.mjs: the SDK's own time, not
// node's start), beside the same create → first exec through sbx's own /v1
// with the Go client. The two are sampled in turn, each sample once the warm
// pool is full, so both see the same daemon at the same moments.

package bench

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

//go:embed e2b.mjs
var e2bSampler string

// E2BTargetMS is the E2B figure's target: its p50 at most this, in ms.
const E2BTargetMS = 50

// E2BTarget is how the E2B figure reaches the daemon.
type E2BTarget struct {
	// URL is the daemon's HTTP listener (E2B_API_URL and E2B_SANDBOX_URL);
	// Key an sbx key (E2B_API_KEY).
	URL, Key string
	// SDKDir is the directory whose node_modules holds E2B's JS SDK (npm
	// package e2b); empty searches the places FindE2BSDK names.
	SDKDir string
}

// E2BResult is the E2B figure.
type E2BResult struct {
	// SDKVersion is the version of the npm package e2b measured.
	SDKVersion string `json:"sdk_version"`
	// SDK is Sandbox.create() → commands.run('true') done, timed in node.
	SDK Summary `json:"sdk"`
	// Peer is create → exec true done through /v1 with the Go client,
	// sampled in turn with SDK.
	Peer Summary `json:"peer"`
}

// FindE2BSDK returns the directory whose node_modules holds E2B's JS SDK and
// the SDK's version: dir when it is set, else the first of test/node beside
// the directory of the running binary (bin/sbx of a source tree), test/node
// under the working directory, and the working directory itself. reason
// says why none would do.
func FindE2BSDK(dir string) (found, version, reason string) {
	var candidates []string
	if dir != "" {
		candidates = []string{dir}
	} else {
		if exe, err := os.Executable(); err == nil {
			candidates = append(candidates, filepath.Join(filepath.Dir(filepath.Dir(exe)), "test", "node"))
		}
		if wd, err := os.Getwd(); err == nil {
			candidates = append(candidates, filepath.Join(wd, "test", "node"), wd)
		}
	}
	for _, c := range candidates {
		b, err := os.ReadFile(filepath.Join(c, "node_modules", "e2b", "package.json"))
		if err != nil {
			continue
		}
		var pkg struct {
			Version string `json:"version"`
		}
		if json.Unmarshal(b, &pkg) == nil && pkg.Version != "" {
			return c, pkg.Version, ""
		}
	}
	return "", "", fmt.Sprintf("E2B's JS SDK (npm package e2b) is not installed in %s: make deps (or npm ci in test/node) installs it, --e2b-sdk names another directory",
		strings.Join(candidates, " or "))
}

// E2B measures the E2B figure, opts.Warmup + opts.Runs samples of each kind.
// unavailable says why it was skipped (node or the SDK missing); err is a
// failure of the measurement itself.
func E2B(ctx context.Context, api API, target E2BTarget, opts Options) (res *E2BResult, unavailable string, err error) {
	opts.defaults()
	if !strings.HasPrefix(target.URL, "http://") && !strings.HasPrefix(target.URL, "https://") {
		return nil, fmt.Sprintf("no HTTP URL for the daemon (%q): E2B's SDK reaches it over HTTP (with --external, SBX_URL and SBX_API_KEY name it)", target.URL), nil
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, "node is not installed (make deps installs it)", nil
	}
	dir, version, reason := FindE2BSDK(target.SDKDir)
	if dir == "" {
		return nil, reason, nil
	}
	opts.progress("E2B SDK %s: %d warm-up + %d runs of Sandbox.create → commands.run('true'), in turn with the same through /v1, each once the warm pool is full",
		version, opts.Warmup, opts.Runs)
	s, err := startSampler(ctx, node, dir, target)
	if err != nil {
		return nil, "", err
	}
	defer s.close()
	pa, _ := api.(PoolAPI)
	full := func() error {
		if pa == nil {
			return nil
		}
		return waitPoolFull(ctx, pa)
	}
	var sdk, peer []time.Duration
	for i := range opts.Warmup + opts.Runs {
		// In turn, and each first every other time: neither kind always
		// follows the other's refill.
		for k := range 2 {
			if err := full(); err != nil {
				return nil, "", err
			}
			if (i+k)%2 == 0 {
				d, err := s.sample()
				if err != nil {
					return nil, "", err
				}
				if i >= opts.Warmup {
					sdk = append(sdk, d)
				}
			} else {
				d, err := coldStart(ctx, api)
				if err != nil {
					return nil, "", err
				}
				if i >= opts.Warmup {
					peer = append(peer, d)
				}
			}
		}
	}
	if err := s.close(); err != nil {
		return nil, "", err
	}
	return &E2BResult{SDKVersion: version, SDK: summarize(sdk), Peer: summarize(peer)}, "", nil
}

// sampler is the node process running e2b.mjs.
type sampler struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Scanner
	stderr *headBuffer
	closed bool
}

func startSampler(ctx context.Context, node, dir string, target E2BTarget) (*sampler, error) {
	cmd := exec.CommandContext(ctx, node, "--input-type=module", "--eval", e2bSampler)
	cmd.Dir = dir // where node resolves the import of "e2b"
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "E2B_API_URL="+target.URL, "E2B_SANDBOX_URL="+target.URL, "E2B_API_KEY="+target.Key)
	s := &sampler{cmd: cmd, stderr: &headBuffer{n: 8 << 10}}
	cmd.Stderr = s.stderr
	var err error
	if s.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s.out = bufio.NewScanner(stdout)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting node for the E2B figure: %w", err)
	}
	var hello struct {
		Ready bool `json:"ready"`
	}
	if err := s.read(&hello); err != nil || !hello.Ready {
		s.close()
		return nil, fmt.Errorf("the E2B figure's node process did not start (%v): %s", err, s.stderr.String())
	}
	return s, nil
}

// read decodes the next JSON line of the sampler's output into v, past
// any line that is not JSON (a warning the SDK printed).
func (s *sampler) read(v any) error {
	for s.out.Scan() {
		line := s.out.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		return json.Unmarshal(line, v)
	}
	if err := s.out.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}

// sample takes one SDK sample.
func (s *sampler) sample() (time.Duration, error) {
	if _, err := io.WriteString(s.in, "sample\n"); err != nil {
		return 0, fmt.Errorf("the E2B figure's node process: %w: %s", err, s.stderr.String())
	}
	var r struct {
		MS    *float64 `json:"ms"`
		Error string   `json:"error"`
	}
	if err := s.read(&r); err != nil {
		return 0, fmt.Errorf("the E2B figure's node process: %w: %s", err, s.stderr.String())
	}
	if r.Error != "" || r.MS == nil {
		return 0, fmt.Errorf("E2B SDK: Sandbox.create → commands.run('true'): %s", r.Error)
	}
	return time.Duration(*r.MS * float64(time.Millisecond)), nil
}

// close ends the node process (end of its input) and waits for it.
func (s *sampler) close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.in.Close()
	for s.out.Scan() { // what is left, so that Wait sees the pipe's end
	}
	if err := s.cmd.Wait(); err != nil {
		return fmt.Errorf("the E2B figure's node process: %w: %s", err, s.stderr.String())
	}
	return nil
}

// headBuffer keeps the first n bytes written to it, safe for the writer's
// goroutine and a reader.
type headBuffer struct {
	mu sync.Mutex
	b  []byte // guarded by mu
	n  int
}

func (t *headBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.n - len(t.b); room > 0 {
		t.b = append(t.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (t *headBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
