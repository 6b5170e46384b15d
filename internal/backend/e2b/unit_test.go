package e2b

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ppb "sbx.dev/sbx/api/agent/process"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/backendtest"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/testutil"
)

func TestExitOf(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name       string
		end        *ppb.ProcessEvent_EndEvent
		why        string
		killReason string
		timeout    time.Duration
		elapsed    time.Duration
		// startLag: how long after the start was asked the start event came
		startLag time.Duration
		code     int32
		reason   string
		signal   int32
	}{
		{name: "exit 0", end: &ppb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"}, reason: "exited"},
		{name: "exit 3", end: &ppb.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: "exit status 3", Error: str("exit status 3")}, code: 3, reason: "exited"},
		{name: "sigterm", end: &ppb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: terminated"}, code: 143, reason: "signaled", signal: 15},
		{name: "segv core", end: &ppb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: segmentation fault (core dumped)"}, code: 139, reason: "signaled", signal: 11},
		{name: "killed by the adapter", end: &ppb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed"}, killReason: reasonKilled, code: 137, reason: "killed", signal: 9},
		{name: "killed by someone", end: &ppb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed"}, code: 137, reason: "signaled", signal: 9},
		{name: "killed at its lifetime", end: &ppb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed"}, timeout: time.Second, elapsed: 2 * time.Second, code: 124, reason: "timeout", signal: 9},
		// The remote counts from the request; the start event came 5 ms later.
		{name: "killed at its lifetime, start event late", end: &ppb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed"}, timeout: time.Second, elapsed: time.Second - 2*time.Millisecond, startLag: 5 * time.Millisecond, code: 124, reason: "timeout", signal: 9},
		{name: "killed before its lifetime", end: &ppb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed"}, timeout: time.Hour, elapsed: time.Second, code: 137, reason: "signaled", signal: 9},
		{name: "exit at its lifetime", end: &ppb.ProcessEvent_EndEvent{ExitCode: 1, Exited: true, Status: "exit status 1"}, timeout: time.Second, elapsed: 2 * time.Second, code: 1, reason: "exited"},
		{name: "unknown signal", end: &ppb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: no such thing"}, code: -1, reason: "signaled"},
		{name: "realtime signal", end: &ppb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: signal 40"}, code: 168, reason: "signaled", signal: 40},
		{name: "end unseen", why: reasonLost, code: -1, reason: "agent_lost"},
		{name: "end unseen past its lifetime", why: reasonLost, timeout: time.Second, elapsed: 2 * time.Second, code: 124, reason: "timeout", signal: 9},
		{name: "sandbox killed", why: reasonSandboxKilled, code: 137, reason: "killed", signal: 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			p := &proc{startedAt: now.Add(-tc.elapsed), askedAt: now.Add(-tc.elapsed - tc.startLag), timeout: tc.timeout, killReason: tc.killReason}
			res := p.exitOf(tc.end, tc.why, now)
			if res.ExitCode != tc.code || res.Reason != tc.reason || res.Signal != tc.signal {
				t.Errorf("exitOf(%v, %q) = %d %s %d, want %d %s %d", tc.end, tc.why, res.ExitCode, res.Reason, res.Signal, tc.code, tc.reason, tc.signal)
			}
		})
	}
}

func TestSignalNumber(t *testing.T) {
	for name, want := range map[string]syscall.Signal{"killed": 9, "terminated": 15, "hangup": 1, "interrupt": 2, "signal 40": 40, "nonsense": 0} {
		if got := signalNumber(name); got != want {
			t.Errorf("signalNumber(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestCapture(t *testing.T) {
	c := newCapture(8)
	for _, s := range []string{"abc", "defgh", "ijklm"} {
		c.write([]byte(s))
	}
	if c.total != 13 || c.dropped() != 5 || string(c.head) != "abcd" || string(c.tailBytes()) != "jklm" {
		t.Errorf("capture: total %d dropped %d head %q tail %q", c.total, c.dropped(), c.head, c.tailBytes())
	}
	if want := "abcd\n[sbx: 5 bytes dropped; the full output could not be saved]\njklm"; string(c.bytes()) != want {
		t.Errorf("bytes = %q, want %q", c.bytes(), want)
	}
	small := newCapture(100)
	small.write([]byte("hello"))
	if string(small.bytes()) != "hello" || small.dropped() != 0 {
		t.Errorf("bytes under the cap = %q", small.bytes())
	}
}

// TestMetadataQuery decodes the filter as an E2B server does (the query's
// decode, the form, then each key and value) and wants the map back.
func TestMetadataQuery(t *testing.T) {
	md := map[string]string{metaInstance: "ab12", "k y": "a b&c=d%"}
	q := url.Values{"metadata": {metadataQuery(md)}}
	parsed, err := url.ParseQuery(q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	form, err := url.ParseQuery(parsed.Get("metadata"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for k, vs := range form {
		dk, _ := url.QueryUnescape(k)
		dv, _ := url.QueryUnescape(vs[0])
		got[dk] = dv
	}
	if !reflect.DeepEqual(got, md) {
		t.Errorf("decoded metadata = %v, want %v", got, md)
	}
}

func TestNewSandbox(t *testing.T) {
	d := &Driver{instance: "inst", template: "tmpl"}
	sp := backendtest.Spec()
	sp.Env = map[string]string{"A": "1"}
	sp.TTL = 30 * time.Second
	b, err := d.newSandbox(sp)
	if err != nil || b.TemplateID != "tmpl" || b.Timeout != 90 || b.AllowInternetAccess == nil || *b.AllowInternetAccess ||
		b.Network != nil || b.EnvVars["A"] != "1" || b.Metadata[metaInstance] != "inst" || b.Metadata[metaSandbox] != string(sp.ID) {
		t.Errorf("newSandbox(none, 30 s) = %+v, %v", b, err)
	}
	sp.TTL, sp.Template = 24*time.Hour, "code-interpreter-v1"
	if b, _ := d.newSandbox(sp); b.Timeout != int64(lease/time.Second) || b.TemplateID != "code-interpreter-v1" {
		t.Errorf("newSandbox(24 h, another template) = timeout %d, template %s; want the lease and the template as named", b.Timeout, b.TemplateID)
	}
	sp.Network, sp.NetworkBlock = sandbox.NetworkFull, []string{"10.0.0.0/8"}
	if b, _ := d.newSandbox(sp); !*b.AllowInternetAccess || b.Network == nil || !slices.Equal(b.Network.DenyOut, []string{"10.0.0.0/8"}) {
		t.Errorf("newSandbox(full) = %+v", b)
	}
	sp.Network, sp.NetworkAllow = sandbox.NetworkAllowlist, []string{"example.com"}
	if b, _ := d.newSandbox(sp); b.AllowInternetAccess != nil || b.Network == nil || !slices.Equal(b.Network.AllowOut, []string{"example.com"}) ||
		!slices.Equal(b.Network.DenyOut, []string{"0.0.0.0/0", "10.0.0.0/8"}) {
		t.Errorf("newSandbox(allowlist) = %+v", b)
	}
	sp.NetworkAllow = nil
	if _, err := d.newSandbox(sp); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("newSandbox(empty allowlist) = %v, want ErrInvalid", err)
	}
}

// fakeServer is an E2B control plane that answers every request with
// status and counts the requests.
func fakeServer(t *testing.T, status int) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.Header.Get("X-API-Key") != "k" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"code":401,"message":"bad key"}`))
			return
		}
		w.WriteHeader(status)
		w.Write([]byte(`[]`))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func openFor(t *testing.T, u, key string) *Driver {
	d := open(backend.Options{Instance: "inst", Log: testutil.Logger(t), E2B: backend.E2BRemote{URL: u, APIKey: key}})
	t.Cleanup(func() { d.Close(context.Background()) })
	return d
}

// TestStartRefusesLayers: a spec that requires a layer is refused before the
// remote is asked for anything, naming the layers and the way to accept them.
func TestStartRefusesLayers(t *testing.T) {
	srv, n := fakeServer(t, http.StatusCreated)
	d := openFor(t, srv.URL, "k")
	sp := backendtest.Spec()
	sp.RequireLayers = []string{sandbox.LayerUserNS, sandbox.LayerSeccomp}
	_, err := d.Start(t.Context(), sp)
	if !errors.Is(err, sandbox.ErrIsolation) || !strings.Contains(err.Error(), "userns, seccomp") || !strings.Contains(err.Error(), "allow_missing") ||
		!strings.Contains(err.Error(), string(sp.ID)) {
		t.Errorf("Start(RequireLayers) = %v, want ErrIsolation naming the sandbox, the layers and allow_missing", err)
	}
	if n.Load() != 0 {
		t.Errorf("the remote got %d requests, want none", n.Load())
	}
}

func TestProbe(t *testing.T) {
	ok, _ := fakeServer(t, http.StatusOK)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + closed.Addr().String()
	closed.Close()
	for _, tc := range []struct {
		name, url, key string
		available      bool
		reason         string
	}{
		{"ok", ok.URL, "k", true, ""},
		{"no url", "", "k", false, "e2b.url"},
		{"no key", ok.URL, "", false, "SBX_E2B_API_KEY"},
		{"wrong key", ok.URL, "wrong", false, "refused the API key"},
		{"unreachable", deadURL, "k", false, "is not reachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := openFor(t, tc.url, tc.key).Probe(t.Context())
			if err != nil {
				t.Fatalf("Probe = %v", err)
			}
			reasons := strings.Join(rep.Reasons(), "; ")
			if rep.Available != tc.available || !strings.Contains(reasons, tc.reason) {
				t.Errorf("Probe: available %v (%s), want %v with %q", rep.Available, reasons, tc.available, tc.reason)
			}
			// Whatever the remote, no layer is claimed.
			if !rep.Sandbox || len(rep.Layers) != len(sandbox.AllLayers) || rep.Level != sandbox.LevelName(Name, rep.Layers) {
				t.Errorf("Probe report = %+v, want every layer reported", rep)
			}
			for l, st := range rep.Layers {
				if st != sandbox.Missing || rep.LayerReasons[l] == "" {
					t.Errorf("layer %s: %s (%q), want missing with a reason", l, st, rep.LayerReasons[l])
				}
			}
		})
	}
}

// TestApplied: the isolation a sandbox reports claims no layer.
func TestApplied(t *testing.T) {
	iso := isolation()
	if iso.Backend != Name || !iso.Sandbox || iso.Warning == "" || len(iso.Layers) != len(sandbox.AllLayers) {
		t.Fatalf("isolation() = %+v", iso)
	}
	if missing := iso.MissingLayers(); !slices.Equal(missing, slices.Sorted(slices.Values(sandbox.AllLayers))) {
		t.Errorf("missing layers = %v, want all", missing)
	}
	if !bytes.Contains([]byte(iso.Level), []byte("e2b-minus-")) {
		t.Errorf("level = %q, want the gap in its name", iso.Level)
	}
}

func TestEnvdBase(t *testing.T) {
	str := func(s string) *string { return &s }
	d := &Driver{api: &api{base: "http://127.0.0.1:7070"}}
	for _, tc := range []struct {
		configured string
		domain     *string
		want       string
	}{
		{"", nil, "http://127.0.0.1:7070"},
		{"", str(""), "http://127.0.0.1:7070"},
		{"", str("e2b.app"), "https://sandbox.e2b.app"},
		{"", str("example.com"), "https://49983-rid.example.com"},
		{"https://envd.example", str("e2b.app"), "https://envd.example"},
	} {
		d.sandboxURL = tc.configured
		if got := d.envdBase("rid", tc.domain); got != tc.want {
			t.Errorf("envdBase(sandbox_url %q, domain %v) = %q, want %q", tc.configured, tc.domain, got, tc.want)
		}
	}
}

func TestReadLines(t *testing.T) {
	long := strings.Repeat("é", 10)
	for _, tc := range []struct {
		name          string
		text          string
		offset, limit int64
		chars         int
		lines         string
		eof           bool
		total, cut    int64
		binary        bool
	}{
		{name: "all", text: "a\nb\r\nc", limit: 10, chars: 100, lines: "a|b|c", eof: true, total: 3},
		{name: "trailing newline", text: "a\nb\n", limit: 10, chars: 100, lines: "a|b", eof: true, total: 2},
		{name: "page", text: "a\nb\nc\nd\n", offset: 1, limit: 2, chars: 100, lines: "b|c", total: -1},
		{name: "page to the end", text: "a\nb\nc\n", offset: 1, limit: 2, chars: 100, lines: "b|c", eof: true, total: 3},
		{name: "past the end", text: "a\n", offset: 5, limit: 2, chars: 100, lines: "", eof: true, total: 1},
		{name: "cut at a rune", text: long + "\n", limit: 10, chars: 3, lines: "ééé", eof: true, total: 1, cut: 1},
		{name: "invalid utf-8", text: "a\xffb\n", limit: 10, chars: 100, lines: "a\uFFFDb", eof: true, total: 1},
		{name: "empty", text: "", limit: 10, chars: 100, lines: "", eof: true, total: 0},
		{name: "binary", text: "a\x00b", limit: 10, chars: 100, binary: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := readLines(bufio.NewReader(strings.NewReader(tc.text)), tc.offset, tc.limit, tc.chars)
			if tc.binary {
				if !errors.Is(err, errBinary) {
					t.Errorf("readLines = %v, want errBinary", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(out.Lines, "|"); got != tc.lines || out.Eof != tc.eof || out.TotalLines != tc.total ||
				out.CutLines != tc.cut || out.FirstLine != tc.offset+1 {
				t.Errorf("readLines = %q eof %v total %d cut %d first %d, want %q eof %v total %d cut %d",
					got, out.Eof, out.TotalLines, out.CutLines, out.FirstLine, tc.lines, tc.eof, tc.total, tc.cut)
			}
		})
	}
}

// TestForwardFullDuplex: a remote envd that answers a stream before the
// adapter has forwarded the whole request body still gets the rest, and
// the caller the whole answer.
func TestForwardFullDuplex(t *testing.T) {
	up := httptest.NewServer(testutil.EarlyAnswer())
	defer up.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	r := &remote{id: "sbxfullduplex", rid: "remote1", base: up.URL, d: &Driver{tr: tr}}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		forward(w, req.WithContext(context.WithValue(req.Context(), remoteKey{}, r)))
	}))
	defer front.Close()
	req, err := http.NewRequest("POST", front.URL+"/process.Process/Connect", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	testutil.CheckFullDuplex(t, front.Client(), req)
}
