package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpDaemon is a stand-in for the daemon's /mcp: one tool, echo, behind the
// API key; ended receives each session's id when it ends.
type mcpDaemon struct {
	srv      *httptest.Server
	ended    chan string
	sessions chan *mcp.ServerSession // each session, once initialized
}

func newMCPDaemon(t *testing.T) *mcpDaemon {
	d := &mcpDaemon{ended: make(chan string, 4), sessions: make(chan *mcp.ServerSession, 4)}
	s := mcp.NewServer(&mcp.Implementation{Name: "stub"}, &mcp.ServerOptions{
		Instructions: "stub instructions",
		InitializedHandler: func(_ context.Context, req *mcp.InitializedRequest) {
			d.sessions <- req.Session
			go func() {
				req.Session.Wait()
				d.ended <- req.Session.ID()
			}()
		},
	})
	s.AddTool(&mcp.Tool{Name: "echo", Title: "Echo", Description: "says it back",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"additionalProperties":false}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Text string }
			json.Unmarshal(req.Params.Arguments, &in)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}},
				StructuredContent: map[string]any{"text": in.Text}, Meta: mcp.Meta{"sbx/sandbox_id": "x"}}, nil
		})
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if c, ok := req.(*mcp.CallToolRequest); ok && c.Params.Name != "echo" {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no tool " + c.Params.Name}}}, nil
			}
			return next(ctx, method, req)
		}
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Authorization") != "Bearer key":
			apiError(w, 401, "unauthenticated", "", "unauthenticated: invalid API key")
		case r.URL.Path == "/v1/tools":
			io.WriteString(w, `{"tools":[]}`)
		case r.URL.Path == "/mcp":
			h.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func TestMCPProxy(t *testing.T) {
	d := newMCPDaemon(t)
	var errOut bytes.Buffer
	cs, code := startMCP(t, d, &errOut)
	if got := cs.InitializeResult().Instructions; got != "stub instructions" {
		t.Errorf("instructions = %q, want the daemon's", got)
	}
	var names []string
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
		if tool.Title != "Echo" || tool.OutputSchema == nil || tool.InputSchema.(map[string]any)["additionalProperties"] != false {
			t.Errorf("tool %+v: want the daemon's title and schemas", tool)
		}
	}
	if strings.Join(names, ",") != "echo" {
		t.Errorf("tools = %v, want the daemon's", names)
	}
	r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || r.IsError || r.Content[0].(*mcp.TextContent).Text != "hi" || r.Meta["sbx/sandbox_id"] != "x" {
		t.Errorf("echo = %+v, %v", r, err)
	}
	if sc, _ := json.Marshal(r.StructuredContent); string(sc) != `{"text":"hi"}` {
		t.Errorf("structuredContent = %s", sc)
	}
	r, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "nope"})
	if err != nil || !r.IsError || r.Content[0].(*mcp.TextContent).Text != "no tool nope" {
		t.Errorf("an unknown tool = %+v, %v: want the daemon's answer", r, err)
	}

	cs.Close() // closes stdin
	select {
	case c := <-code:
		if c != 0 || errOut.Len() != 0 {
			t.Errorf("sbx mcp after stdin closed = %d, stderr %q", c, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sbx mcp did not exit when stdin closed")
	}
	select {
	case <-d.ended:
	case <-time.After(10 * time.Second):
		t.Error("the daemon's session did not end when stdin closed")
	}
}

// startMCP runs `sbx mcp` against d; it returns the host's session and the
// command's exit code, once it exits.
func startMCP(t *testing.T, d *mcpDaemon, errOut *bytes.Buffer) (*mcp.ClientSession, chan int) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	e := &env{stdin: inR, stdout: outW, stderr: errOut, euid: 1000, getenv: func(k string) string {
		return map[string]string{"SBX_URL": d.srv.URL, "SBX_API_KEY": "key", "HOME": "/nonexistent"}[k]
	}}
	code := make(chan int, 1)
	go func() {
		code <- e.run(context.Background(), []string{"mcp"})
		outW.Close()
	}()
	host := mcp.NewClient(&mcp.Implementation{Name: "host"}, nil)
	cs, err := host.Connect(t.Context(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("connecting to sbx mcp: %v (stderr %q)", err, errOut.String())
	}
	t.Cleanup(func() { cs.Close() })
	return cs, code
}

// TestMCPDaemonEndsSession checks that sbx mcp exits, non-zero and saying
// why, when the daemon ends its session (a restart, the idle timeout).
func TestMCPDaemonEndsSession(t *testing.T) {
	d := newMCPDaemon(t)
	var errOut bytes.Buffer
	_, code := startMCP(t, d, &errOut)
	(<-d.sessions).Close()
	select {
	case c := <-code:
		if c != 1 || !strings.Contains(errOut.String(), "the daemon ended the MCP session") {
			t.Errorf("sbx mcp after the daemon ended its session = %d, stderr %q", c, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("sbx mcp did not exit when the daemon ended its session")
	}
}

func TestMCPWithoutDaemon(t *testing.T) {
	var out, errOut bytes.Buffer
	dir := t.TempDir()
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, euid: 1000,
		getenv: func(k string) string { return map[string]string{"SBX_DATA_DIR": dir}[k] }}
	code := e.run(context.Background(), []string{"mcp"})
	if code != 1 || out.Len() != 0 || !strings.Contains(errOut.String(), "sbx mcp: cannot reach the sbx daemon") ||
		!strings.Contains(errOut.String(), filepath.Join(dir, "sbx.sock")) {
		t.Errorf("sbx mcp without a daemon = %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	d := newMCPDaemon(t)
	e.getenv = func(k string) string { return map[string]string{"SBX_URL": d.srv.URL, "SBX_API_KEY": "wrong"}[k] }
	errOut.Reset()
	if code := e.run(context.Background(), []string{"mcp"}); code != 1 || out.Len() != 0 || !strings.Contains(errOut.String(), "invalid API key") {
		t.Errorf("sbx mcp with a wrong key = %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
	if code := e.run(context.Background(), []string{"mcp", "extra"}); code != 2 {
		t.Errorf("sbx mcp extra = %d, want 2", code)
	}
}
