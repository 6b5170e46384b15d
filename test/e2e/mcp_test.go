package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessionLabel is the label of an MCP session's sandbox (mcpserver.SessionLabel).
const sessionLabel = "sbx.mcp.session"

var (
	summaryLine = regexp.MustCompile(`(?m)^(\d+) passed, (\d+) failed$`)
	sessionLine = regexp.MustCompile(`(?m)^session sandbox ([a-z2-7]+)$`)
)

// TestMCP runs test/node/mcp-client.mjs, the official TypeScript MCP client,
// against the daemon twice: through `sbx mcp` on stdio and at /mcp over
// streamable HTTP. Each run calls every tool the server lists; then the
// session's sandbox must be gone, deleted when the client closed.
func TestMCP(t *testing.T) {
	script := mcpClientScript(t)
	d := sharedDaemon(t)
	for _, tc := range []struct{ mode, where string }{{"stdio", sbxBin}, {"http", d.url}} {
		t.Run(tc.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", script, tc.mode, tc.where)
			cmd.Dir = filepath.Dir(script)
			cmd.Env = append(os.Environ(), "SBX_URL="+d.url, "SBX_API_KEY="+d.key)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			t.Logf("node mcp-client.mjs %s:\n%s", tc.mode, stdout.String())
			if stderr.Len() > 0 {
				t.Logf("its stderr:\n%s", stderr.String())
			}
			m := summaryLine.FindStringSubmatch(stdout.String())
			if err != nil || m == nil || m[2] != "0" {
				t.Fatalf("the MCP client failed (%v): %q", err, m)
			}
			if n, _ := strconv.Atoi(m[1]); n < 5 {
				t.Errorf("only %d checks passed", n)
			}
			s := sessionLine.FindStringSubmatch(stdout.String())
			if s == nil {
				t.Fatal("the client named no session sandbox")
			}
			waitSandboxGone(t, d, s[1])
			if left := sessionSandboxes(t, d); len(left) > 0 {
				t.Errorf("session sandboxes left after the client closed: %v", left)
			}
		})
	}
}

// TestMCPShutdown checks that a session still open when the daemon stops has
// its sandbox deleted, where other sandboxes survive a restart. (Its name is
// short: the data dir's path bounds the sandboxes' socket paths.)
func TestMCPShutdown(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir)
	defer func() { d.cleanup() }() // the daemon running when the test ends
	kept := d.create(nil)
	cl := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "0"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: d.url + "/mcp", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearerTransport(d.key)}}
	cs, err := cl.Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatalf("connecting to /mcp: %v", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "sandbox.exec",
		Arguments: map[string]any{"runtime": "sh", "code": "echo hi"}})
	if err != nil || res.IsError {
		t.Fatalf("sandbox.exec = %+v, %v", res, err)
	}
	id, _ := res.Meta["sbx/sandbox_id"].(string)
	if got := sessionSandboxes(t, d); len(got) != 1 || got[0] != id {
		t.Fatalf("session sandboxes = %v, want [%s]", got, id)
	}
	began := time.Now()
	d.stop() // the session is still open, its event stream too
	if took := time.Since(began); took > 15*time.Second {
		t.Errorf("the daemon took %s to stop with an MCP session open", took)
	}

	d = startDaemon(t, dir)
	if st, b := d.api("GET", "/v1/sandboxes/"+id, nil); st != 404 {
		t.Errorf("the session sandbox %s after a restart: %d %s, want 404", id, st, b)
	}
	if st, b := d.api("GET", "/v1/sandboxes/"+kept, nil); st != 200 {
		t.Errorf("sandbox %s, made outside MCP, after a restart: %d %s", kept, st, b)
	}
}

// mcpClientScript returns test/node/mcp-client.mjs once its npm packages are
// installed (make deps, or npm ci in test/node).
func mcpClientScript(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs("../node/mcp-client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	sdk := filepath.Join(filepath.Dir(script), "node_modules", "@modelcontextprotocol", "sdk", "package.json")
	if _, err := os.Stat(sdk); err != nil {
		t.Fatalf("the MCP TypeScript SDK is not installed: make deps (or npm ci in test/node) installs it: %v", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not installed: make deps installs it: %v", err)
	}
	return script
}

// waitSandboxGone waits until GET /v1/sandboxes/id answers 404: a session's
// sandbox is deleted just after its session ends.
func waitSandboxGone(t *testing.T, d *daemon, id string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, b := d.api("GET", "/v1/sandboxes/"+id, nil)
		if st == 404 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session sandbox %s still there after the client closed: %d %s", id, st, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sessionSandboxes lists the ids of the sandboxes carrying the session label.
func sessionSandboxes(t *testing.T, d *daemon) []string {
	t.Helper()
	st, b := d.api("GET", "/v1/sandboxes", nil)
	if st != 200 {
		t.Fatalf("GET /v1/sandboxes = %d %s", st, b)
	}
	var list struct {
		Sandboxes []struct {
			ID     string            `json:"id"`
			Labels map[string]string `json:"labels"`
		} `json:"sandboxes"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sb := range list.Sandboxes {
		if _, ok := sb.Labels[sessionLabel]; ok {
			out = append(out, sb.ID)
		}
	}
	return out
}

// bearerTransport adds an API key to every request.
type bearerTransport string

func (k bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(k))
	return http.DefaultTransport.RoundTrip(r)
}
