package bench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeSDK makes a directory that FindE2BSDK takes for one holding E2B's JS
// SDK at version.
func fakeSDK(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	pkg := filepath.Join(dir, "node_modules", "e2b")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "package.json"), []byte(`{"name":"e2b","version":"`+version+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// withSampler runs the E2B figure with script as the node sampler, in
// place of e2b.mjs (which needs the SDK and a daemon).
func withSampler(t *testing.T, script string) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("requires node (make deps installs it): %v", err)
	}
	old := e2bSampler
	e2bSampler = script
	t.Cleanup(func() { e2bSampler = old })
}

const fakeSampler = `
import { createInterface } from "node:readline";
console.log("a warning the SDK printed");
console.log(JSON.stringify({ ready: true }));
let n = 0;
for await (const line of createInterface({ input: process.stdin })) {
  if (line !== "sample") continue;
  n++;
  const env = [process.env.E2B_API_URL, process.env.E2B_SANDBOX_URL, process.env.E2B_API_KEY, process.env.E2B_DEBUG];
  if (JSON.stringify(env) !== JSON.stringify(["http://127.0.0.1:1", "http://127.0.0.1:1", "k", undefined])) {
    console.log(JSON.stringify({ error: "environment " + JSON.stringify(env) }));
  } else {
    console.log(JSON.stringify(process.env.FAIL_AT === String(n) ? { error: "SandboxError: boom" } : { ms: 2.5 }));
  }
}
`

func TestE2BFigure(t *testing.T) {
	withSampler(t, fakeSampler)
	t.Setenv("E2B_DEBUG", "true") // the caller's E2B variables do not reach the SDK
	api := &fakeAPI{live: map[string]bool{}}
	var progress bytes.Buffer
	res, why, err := E2B(t.Context(), api, E2BTarget{URL: "http://127.0.0.1:1", Key: "k", SDKDir: fakeSDK(t, "9.8.7")},
		Options{Runs: 5, Warmup: 2, Progress: &progress})
	if err != nil || why != "" {
		t.Fatalf("E2B = %v, %q, %v", res, why, err)
	}
	if res.SDKVersion != "9.8.7" || res.SDK.N != 5 || res.SDK.P50MS != 2.5 || res.Peer.N != 5 {
		t.Errorf("E2B = %+v, want 5 samples of 2.5 ms from SDK 9.8.7 and 5 of the peer", res)
	}
	if api.n != 7 || len(api.live) != 0 {
		t.Errorf("the peer made %d sandboxes (want 7: 2 warm-up + 5) and left %d", api.n, len(api.live))
	}
	if !strings.Contains(progress.String(), "E2B SDK 9.8.7") {
		t.Errorf("progress = %q", progress.String())
	}

	rep := Report{E2B: res}
	rep.Judge()
	var found bool
	for _, tg := range rep.Targets {
		if strings.HasPrefix(tg.Figure, "E2B SDK") {
			found = true
			if !tg.Met || tg.Want != "≤ 50 ms" || tg.Value != 2.5 {
				t.Errorf("E2B target = %+v", tg)
			}
		}
	}
	if !found {
		t.Errorf("no E2B target among %+v", rep.Targets)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	if !strings.Contains(table.String(), "E2B SDK: Sandbox.create → commands.run('true')") || !strings.Contains(table.String(), "the same via /v1 (Go client)") {
		t.Errorf("table:\n%s", table.String())
	}
}

func TestE2BFigureSamplerError(t *testing.T) {
	withSampler(t, fakeSampler)
	t.Setenv("FAIL_AT", "3")
	_, _, err := E2B(t.Context(), &fakeAPI{live: map[string]bool{}}, E2BTarget{URL: "http://127.0.0.1:1", Key: "k", SDKDir: fakeSDK(t, "1.0.0")},
		Options{Runs: 5, Warmup: 1})
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("E2B with a failing sample = %v, want the sample's error", err)
	}
}

func TestE2BFigureUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target E2BTarget
		want   string
	}{
		{"no URL", E2BTarget{SDKDir: t.TempDir()}, "no HTTP URL"},
		{"unix socket", E2BTarget{URL: "unix:/tmp/sbx.sock", SDKDir: t.TempDir()}, "no HTTP URL"},
		{"no SDK", E2BTarget{URL: "http://127.0.0.1:1", SDKDir: t.TempDir()}, "npm package e2b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath("node"); err != nil && tc.want == "npm package e2b" {
				t.Skipf("requires node (make deps installs it): %v", err)
			}
			res, why, err := E2B(t.Context(), &fakeAPI{live: map[string]bool{}}, tc.target, Options{Runs: 1, Warmup: 1})
			if res != nil || err != nil || !strings.Contains(why, tc.want) {
				t.Errorf("E2B(%+v) = %v, %q, %v; want unavailable with %q", tc.target, res, why, err, tc.want)
			}
		})
	}
}
