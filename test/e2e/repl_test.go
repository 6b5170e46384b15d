package e2e

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// repl_execute on the native backend: state across calls, a timeout that
// interrupts the cell and keeps the state, a matplotlib figure as PNG, and
// llm_query reaching a model endpoint through the daemon (a local stand-in of
// an OpenAI-compatible API on the test's loopback), whose key never enters
// the sandbox.
func TestToolsREPL(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
		auth string
	)
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, string(b))
		auth = r.Header.Get("Authorization")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"forty-two"}}]}`)
	}))
	defer model.Close()
	const secret = "sk-test-never-in-the-sandbox"
	d := startDaemon(t, "", "SBX_POOL_SIZE=0", "SBX_LLM_URL="+model.URL+"/v1", "SBX_LLM_MODEL=test-model", "SBX_LLM_API_KEY="+secret)
	defer d.cleanup()
	id := d.create(nil)

	out := d.mustTool(id, "repl_execute", map[string]any{"code": "import math\nx = 6\nprint('side', flush=True)\nx * 7"})
	if out["value"] != "42" || out["stdout"] != "side\n" {
		t.Fatalf("first cell = %v", out)
	}
	out = d.mustTool(id, "repl_execute", map[string]any{"code": "x + math.floor(0.5)"})
	if out["value"] != "6" {
		t.Errorf("state across calls: %v", out)
	}
	out = d.mustTool(id, "repl_execute", map[string]any{"code": "1/0"})
	if e, _ := out["error"].(map[string]any); e == nil || e["name"] != "ZeroDivisionError" || !strings.Contains(e["traceback"].(string), "ZeroDivisionError") {
		t.Errorf("exception = %v", out)
	}
	out = d.mustTool(id, "repl_execute", map[string]any{"code": "while True: pass", "timeout_seconds": 1})
	if out["timed_out"] != true || out["restarted"] == true {
		t.Errorf("timeout = %v, want interrupted with the session kept", out)
	}
	if out = d.mustTool(id, "repl_execute", map[string]any{"code": "x"}); out["value"] != "6" {
		t.Errorf("state after the timeout: %v", out)
	}
	out = d.mustTool(id, "repl_execute", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nFINAL('drawn')"})
	imgs, _ := out["images"].([]any)
	if len(imgs) != 1 || out["final"] != "drawn" {
		t.Fatalf("figure = %v", out)
	}
	png, err := base64.StdEncoding.DecodeString(imgs[0].(map[string]any)["png"].(string))
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG") {
		t.Errorf("the image is not a PNG (%v)", err)
	}

	out = d.mustTool(id, "repl_execute", map[string]any{"code": "llm_query('what is 6*7?', system='be brief')"})
	if out["value"] != "'forty-two'" {
		t.Errorf("llm_query = %v", out)
	}
	mu.Lock()
	var req struct {
		Model    string `json:"model"`
		Messages []struct{ Role, Content string }
	}
	if len(seen) != 1 || json.Unmarshal([]byte(seen[0]), &req) != nil || req.Model != "test-model" ||
		!strings.Contains(seen[0], "what is 6*7?") || auth != "Bearer "+secret {
		t.Errorf("the endpoint saw %q with %q", seen, auth)
	}
	mu.Unlock()
	// The key is nowhere in the sandbox: not in its environment, not in its files.
	if r := d.sh(id, "grep -rsl "+secret+" /proc/*/environ /tmp /workspace /etc 2>/dev/null | head -3; echo done"); strings.TrimSpace(r.Stdout) != "done" {
		t.Errorf("the model key is in the sandbox: %q", r.Stdout)
	}
	out = d.mustTool(id, "repl_execute", map[string]any{"code": "x", "restart": true})
	if e, _ := out["error"].(map[string]any); e == nil || e["name"] != "NameError" {
		t.Errorf("after restart x should be gone: %v", out)
	}
	if st, _, raw := d.tool(id, "repl_execute", map[string]any{"code": "1", "timeout_seconds": 0}); st != 400 || !strings.Contains(raw, "timeout_seconds: 0 is outside the range 1–3600") {
		t.Errorf("bad timeout = %d %s", st, raw)
	}
}
