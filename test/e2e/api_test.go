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
