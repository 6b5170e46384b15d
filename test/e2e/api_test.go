package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

func TestBadInput(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	for _, tc := range []struct {
		name, method, path string
		body               any
		status             int
		mention            string
	}{
		{"exec timeout 0", "POST", "/v1/sandboxes/" + id + "/exec", map[string]any{"command": "true", "timeout": 0}, 400, "timeout"},
		{"exec timeout 3601", "POST", "/v1/sandboxes/" + id + "/exec", map[string]any{"command": "true", "timeout": 3601}, 400, "timeout"},
		{"unknown id", "GET", "/v1/sandboxes/aaaaaaaaaaaaaaaaaaaaaaaaaa", nil, 404, "aaaaaaaaaaaaaaaaaaaaaaaaaa"},
		{"unknown id exec", "POST", "/v1/sandboxes/bbbbbbbbbbbbbbbbbbbbbbbbbb/exec", map[string]any{"command": "true"}, 404, "bbbbbbbbbbbbbbbbbbbbbbbbbb"},
		{"malformed id", "DELETE", "/v1/sandboxes/..%2f..%2fetc", nil, 404, "not found"},
		{"memory below the agent's need", "POST", "/v1/sandboxes", map[string]any{"memory_mb": 1}, 400, "memory_mb"},
		{"sandbox timeout 0", "POST", "/v1/sandboxes", map[string]any{"timeout": 0}, 400, "timeout"},
		{"unknown template", "POST", "/v1/sandboxes", map[string]any{"template": "no-such-template"}, 400, "template"},
		{"wrong type", "POST", "/v1/sandboxes", map[string]any{"memory_mb": "lots"}, 400, "memory_mb"},
		{"NUL in path", "GET", "/v1/sandboxes/" + id + "/files/read?path=/etc/host%00name", nil, 400, "path"},
		{"no command", "POST", "/v1/sandboxes/" + id + "/exec", map[string]any{}, 400, "command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, b := d.api(tc.method, tc.path, tc.body)
			if st != tc.status {
				t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.path, st, b, tc.status)
			}
			e := decodeError(t, b)
			if !strings.Contains(e.Error.Message, tc.mention) {
				t.Errorf("message %q does not name %q", e.Error.Message, tc.mention)
			}
		})
	}
	// The 404 names the id in its own field too.
	_, b := d.api("GET", "/v1/sandboxes/aaaaaaaaaaaaaaaaaaaaaaaaaa", nil)
	if e := decodeError(t, b); e.Error.SandboxID != "aaaaaaaaaaaaaaaaaaaaaaaaaa" {
		t.Errorf("404 sandbox_id = %q", e.Error.SandboxID)
	}
}

// Paths resolve inside the sandbox: the host's secrets are not reachable by any
// spelling, while the sandbox's own files are (positive control).
func TestFilePathsStayInside(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	// Control: a file the sandbox wrote is readable through the API.
	d.sh(id, "echo inside > /workspace/mine.txt")
	st, b := d.api("GET", "/v1/sandboxes/"+id+"/files/read?path=mine.txt", nil)
	if st != 200 || !strings.Contains(string(b), "inside") {
		t.Fatalf("control read = %d %s", st, b)
	}
	// /etc/shadow is masked out of the sandbox's /etc, whatever the spelling.
	for _, p := range []string{"/etc/shadow", "../../etc/shadow", "/workspace/../../../etc/shadow", "..%2f..%2fetc%2fshadow"} {
		st, b := d.api("GET", "/v1/sandboxes/"+id+"/files/read?path="+p, nil)
		if st == 200 {
			t.Errorf("read %s = 200: %.80s", p, b)
		}
	}
	// A symlink planted inside points at the sandbox's own view, not the host's.
	d.sh(id, "ln -s /etc/shadow /workspace/link; ln -s / /workspace/r")
	if st, b := d.api("GET", "/v1/sandboxes/"+id+"/files/read?path=/workspace/link", nil); st == 200 {
		t.Errorf("read through symlink to /etc/shadow = 200: %.80s", b)
	}
	// Writes through an intermediate symlink to / land in the sandbox, not the host.
	marker := fmt.Sprintf("/tmp/sbx-e2e-marker-%s", id)
	st, b = d.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": "/workspace/r" + marker, "content": "x"})
	if st != 200 {
		t.Logf("write through r -> / = %d %s", st, b)
	}
	if _, err := readHostFile(marker); err == nil {
		t.Fatalf("a write through a symlink reached the host at %s", marker)
	}
	if r := d.sh(id, "cat "+marker); r.ExitCode != 0 || r.Stdout != "x" {
		t.Errorf("the write should have landed inside the sandbox: %+v", r)
	}
}

func TestExecTimeoutKillsWholeTree(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	// A double-forked, setsid'd grandchild that ignores SIGTERM and SIGHUP.
	r := d.exec(id, map[string]any{
		"command": `setsid sh -c 'trap "" TERM HUP; sleep 1000 & echo $! > /workspace/gc.pid; wait' & sleep 1000`,
		"timeout": 2,
	})
	if r.Reason != "timeout" || r.ExitCode != 124 {
		t.Fatalf("exec = reason %q exit %d, want timeout 124", r.Reason, r.ExitCode)
	}
	gc := strings.TrimSpace(d.sh(id, "cat /workspace/gc.pid").Stdout)
	if gc == "" {
		t.Fatal("the grandchild never wrote its pid")
	}
	if r := d.sh(id, "kill -0 "+gc); r.ExitCode == 0 {
		t.Errorf("grandchild %s survived the timeout", gc)
	}
	// Control: the same probe sees a process that is alive.
	bg := d.exec(id, map[string]any{"command": "sleep 1000", "background": true})
	if r := d.sh(id, fmt.Sprintf("kill -0 %d", bg.PID)); r.ExitCode != 0 {
		t.Errorf("control: kill -0 on a live background process failed: %+v", r)
	}
	st, b := d.api("POST", "/v1/sandboxes/"+id+"/processes/"+bg.ProcessID+"/signal", map[string]any{"signal": "SIGKILL"})
	if st != 200 || !strings.Contains(string(b), "stopped") {
		t.Errorf("signal SIGKILL = %d %s, want stopped", st, b)
	}
	// Once it has exited, a second kill says so instead of pretending.
	if st, b := d.api("POST", "/v1/sandboxes/"+id+"/processes/"+bg.ProcessID+"/wait", map[string]any{"timeout": 30}); st != 200 || !strings.Contains(string(b), "exited") {
		t.Fatalf("wait after SIGKILL = %d %s", st, b)
	}
	st, b = d.api("POST", "/v1/sandboxes/"+id+"/processes/"+bg.ProcessID+"/signal", map[string]any{"signal": "SIGKILL"})
	if st != 200 || !strings.Contains(string(b), "already_exited") {
		t.Errorf("second SIGKILL = %d %s, want already_exited", st, b)
	}
}

func TestOutputCapAndSpill(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	r := d.exec(id, map[string]any{"command": `i=0; while [ $i -lt 40000 ]; do echo "line $i of output padding padding padding"; i=$((i+1)); done`})
	if !r.Truncated || r.StdoutDropped == 0 || r.StdoutPath == "" {
		t.Fatalf("3 MB of output: truncated=%v dropped=%d path=%q", r.Truncated, r.StdoutDropped, r.StdoutPath)
	}
	if !strings.HasPrefix(r.Stdout, "line 0 of") || !strings.Contains(r.Stdout, "line 39999 of") {
		t.Errorf("head and tail not both kept")
	}
	if len(r.Stdout) > 1<<20+4096 {
		t.Errorf("stdout is %d bytes, over the 1 MiB cap", len(r.Stdout))
	}
	full := d.sh(id, "wc -l < "+r.StdoutPath)
	if strings.TrimSpace(full.Stdout) != "40000" {
		t.Errorf("full output file has %q lines, want 40000", full.Stdout)
	}
}

func TestExecStreamsNDJSON(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	defer d.api("DELETE", "/v1/sandboxes/"+id, nil)

	body, _ := json.Marshal(map[string]any{"command": "echo one; echo two >&2; printf '\\001\\377'; exit 4"})
	req, _ := http.NewRequest("POST", d.url+"/v1/sandboxes/"+id+"/exec", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+d.key)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var types []string
	var result map[string]any
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		typ, _ := ev["type"].(string)
		types = append(types, typ)
		if typ == "result" {
			result = ev
		}
	}
	if len(types) < 3 || types[0] != "started" || types[len(types)-1] != "result" {
		t.Fatalf("event types = %v, want started … result", types)
	}
	if result["exit_code"] != float64(4) {
		t.Errorf("result exit_code = %v, want 4", result["exit_code"])
	}
}

// A burst of 200 concurrent creates waits in the queue; none fails.
func TestCreateBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("burst of 200 sandboxes skipped in -short")
	}
	d := sharedDaemon(t)
	const n = 200
	ids := make([]string, n)
	errs := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			st, b := d.api("POST", "/v1/sandboxes", map[string]any{"labels": map[string]string{"burst": "1"}, "memory_mb": 64})
			if st != 201 {
				errs[i] = fmt.Sprintf("%d %s", st, b)
				return
			}
			var s struct{ ID string }
			json.Unmarshal(b, &s)
			ids[i] = s.ID
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for i := range n {
		if errs[i] != "" {
			t.Errorf("create %d: %s", i, errs[i])
		}
		if ids[i] != "" && seen[ids[i]] {
			t.Errorf("id %s handed out twice", ids[i])
		}
		seen[ids[i]] = true
	}
	for _, id := range ids {
		if id == "" {
			continue
		}
		wg.Go(func() {
			if st, b := d.api("DELETE", "/v1/sandboxes/"+id, nil); st != 204 {
				t.Errorf("DELETE %s = %d %s", id, st, b)
			}
		})
	}
	wg.Wait()
}

func TestAuthRequired(t *testing.T) {
	d := sharedDaemon(t)
	for _, key := range []string{"", "sbx_wrong", "Basic abc"} {
		for _, r := range [][2]string{{"GET", "/v1/sandboxes"}, {"POST", "/v1/sandboxes"}, {"GET", "/v1/sandboxes/aaaaaaaaaaaaaaaaaaaaaaaaaa"}, {"POST", "/v1/sandboxes/aaaaaaaaaaaaaaaaaaaaaaaaaa/exec"}, {"GET", "/v1/sandboxes/aaaaaaaaaaaaaaaaaaaaaaaaaa/files/read?path=x"}} {
			if st, b := d.apiKey(key, r[0], r[1], nil); st != 401 {
				t.Errorf("%s %s with key %q = %d %s, want 401", r[0], r[1], key, st, b)
			}
		}
	}
	// Health is the documented exception.
	if st, b := d.apiKey("", "GET", "/v1/health", nil); st != 200 || !strings.Contains(string(b), "native") {
		t.Errorf("GET /v1/health = %d %s", st, b)
	}
	if st, b := d.apiKey("", "GET", "/v1/openapi.json", nil); st != 200 || !json.Valid(b) {
		t.Errorf("GET /v1/openapi.json = %d, valid JSON %v", st, json.Valid(b))
	}
}
