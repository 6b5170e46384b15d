package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The MCP Inspector's CLI (@modelcontextprotocol/inspector, pinned in
// test/node), headless, lists the tools and calls one, over streamable HTTP
// and through `sbx mcp`. It checks a result's structuredContent against the
// tool's outputSchema, so a result that breaks its schema fails here.
func TestMCPInspector(t *testing.T) {
	bin := filepath.Join(filepath.Dir(mcpClientScript(t)), "node_modules", ".bin", "mcp-inspector")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the MCP Inspector is not installed: make deps (or npm ci in test/node) installs it: %v", err)
	}
	d := sharedDaemon(t)
	// The Inspector's CLI leaves its HTTP session open when it exits (no
	// DELETE /mcp): the daemon would delete that session's sandbox after the
	// idle timeout. Here it goes at the end, so later tests find none.
	defer func() {
		for _, id := range sessionSandboxes(t, d) {
			d.api("DELETE", "/v1/sandboxes/"+id, nil)
		}
	}()
	http := []string{"--cli", d.url + "/mcp", "--transport", "http", "--header", "Authorization: Bearer " + d.key}
	stdio := []string{"--cli", "-e", "SBX_URL=" + d.url, "-e", "SBX_API_KEY=" + d.key}
	run := func(t *testing.T, args ...string) map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir()) // its catalog file goes there
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var v map[string]any
		if jerr := json.Unmarshal(out, &v); err != nil || jerr != nil || v["error"] != nil {
			t.Fatalf("mcp-inspector %s: %v (%v)\n%.2000s\nstderr: %s", strings.Join(args, " "), err, jerr, out, stderr.String())
		}
		return v
	}
	for name, transport := range map[string][]string{"http": http, "stdio": stdio} {
		t.Run(name, func(t *testing.T) {
			tail := []string{}
			if name == "stdio" {
				tail = []string{"--", sbxBin, "mcp"}
			}
			list := run(t, append(append(transport, "--method", "tools/list"), tail...)...)
			tools, _ := list["tools"].([]any)
			names := map[string]bool{}
			for _, tl := range tools {
				names[tl.(map[string]any)["name"].(string)] = true
			}
			for _, want := range []string{"sandbox_bash", "exec_command", "write_stdin", "repl_execute", "sandbox.exec", "read_file", "edit_file", "grep", "file_write", "bsl_check"} {
				if !names[want] {
					t.Errorf("tools/list lacks %s (has %d tools)", want, len(names))
				}
			}
			res := run(t, append(append(transport, "--method", "tools/call", "--tool-name", "sandbox_bash",
				"--tool-arg", "command=echo inspected"), tail...)...)
			sc, _ := res["structuredContent"].(map[string]any)
			if sc["stdout"] != "inspected\n" || sc["exit_code"] != 0.0 {
				t.Errorf("tools/call sandbox_bash = %v", res)
			}
		})
	}
}
