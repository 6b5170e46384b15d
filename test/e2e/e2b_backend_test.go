package e2e

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"sbx.dev/sbx/internal/sandbox"
)

// remoteSandbox is what an E2B server lists of one sandbox.
type remoteSandbox struct {
	SandboxID string            `json:"sandboxID"`
	Metadata  map[string]string `json:"metadata"`
}

// e2bList lists d's sandboxes through its E2B API (what the e2b backend of
// another daemon sees of it), those whose metadata name instance.
func e2bList(t *testing.T, d *daemon, instance string) []remoteSandbox {
	t.Helper()
	q := url.Values{"metadata": {url.Values{"sbx.instance": {instance}}.Encode()}}
	req, _ := http.NewRequest("GET", d.url+"/v2/sandboxes?"+q.Encode(), nil)
	req.Header.Set("X-API-Key", d.key)
	resp, err := d.client().Do(req)
	if err != nil {
		t.Fatalf("GET /v2/sandboxes: %v", err)
	}
	defer resp.Body.Close()
	var out []remoteSandbox
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 || json.Unmarshal(b, &out) != nil {
		t.Fatalf("GET /v2/sandboxes = %d %s", resp.StatusCode, b)
	}
	return out
}

// TestE2BBackend: a daemon with SANDBOX_BACKEND=e2b runs its sandboxes on
// a second daemon, through that one's E2B API only. Its /v1 works as over any
// backend (exec in the foreground, streamed, in the background with stdin
// and wait; files), the remote runs the sandbox exactly while it lives, the
// front's isolation claims no layer (the remote reports none), and without
// the operator accepting that gap the front creates nothing.
func TestE2BBackend(t *testing.T) {
	remote := startDaemon(t, "", "SBX_POOL_SIZE=0")
	defer remote.cleanup()
	env := []string{"SANDBOX_BACKEND=e2b", "SBX_E2B_URL=" + remote.url, "SBX_E2B_API_KEY=" + remote.key, "SBX_POOL_SIZE=0"}

	// Fail closed: the default policy requires every layer.
	strict := startDaemon(t, "", env...)
	st, b := strict.api("POST", "/v1/sandboxes", map[string]any{})
	if e := decodeError(t, b); st != 503 || e.Error.Code != "isolation_unavailable" || !strings.Contains(e.Error.Message, "allow_missing") {
		t.Errorf("create without allow_missing = %d %s, want 503 isolation_unavailable naming allow_missing", st, b)
	}
	if left := e2bList(t, remote, strict.instance); len(left) != 0 {
		t.Errorf("a refused create left remote sandboxes: %+v", left)
	}
	strict.cleanup()

	env = append(env, "SBX_ALLOW_MISSING="+strings.Join(sandbox.AllLayers, ","))
	front := startDaemon(t, "", env...)
	frontStopped := false
	defer func() {
		if !frontStopped {
			front.cleanup()
		}
	}()

	// Health: available, claiming no layer.
	st, b = front.api("GET", "/v1/health", nil)
	var health struct {
		Backends []struct {
			Name      string            `json:"name"`
			Available bool              `json:"available"`
			Layers    map[string]string `json:"layers"`
		} `json:"backends"`
	}
	json.Unmarshal(b, &health)
	if st != 200 || len(health.Backends) != 1 || health.Backends[0].Name != "e2b" || !health.Backends[0].Available {
		t.Fatalf("GET /v1/health = %d %s, want the e2b backend available", st, b)
	}
	for l, s := range health.Backends[0].Layers {
		if s == "applied" {
			t.Errorf("health claims layer %s applied", l)
		}
	}

	id := front.create(map[string]any{"labels": map[string]string{"app": "e2e"}})
	st, b = front.api("GET", "/v1/sandboxes/"+id, nil)
	var sb struct {
		Backend   string `json:"backend"`
		Isolation struct {
			Backend      string            `json:"backend"`
			Level        string            `json:"level"`
			Layers       map[string]string `json:"layers"`
			AcceptedGaps []string          `json:"accepted_gaps"`
			Sandbox      bool              `json:"sandbox"`
		} `json:"isolation"`
	}
	json.Unmarshal(b, &sb)
	if st != 200 || sb.Backend != "e2b" || sb.Isolation.Backend != "e2b" || !sb.Isolation.Sandbox ||
		len(sb.Isolation.AcceptedGaps) != len(sandbox.AllLayers) || !strings.HasPrefix(sb.Isolation.Level, "e2b-minus-") {
		t.Errorf("GET sandbox = %d %s, want backend e2b, every layer an accepted gap", st, b)
	}
	for _, l := range sandbox.AllLayers {
		if s := sb.Isolation.Layers[l]; s != "missing" {
			t.Errorf("isolation layer %s = %q, want missing: the remote reports nothing of it", l, s)
		}
	}

	// The remote runs it, under metadata naming the front's instance and sandbox.
	listed := e2bList(t, remote, front.instance)
	if len(listed) != 1 || listed[0].Metadata["sbx.sandbox"] != id {
		t.Fatalf("the remote lists %+v, want one sandbox standing for %s", listed, id)
	}

	t.Run("Foreground", func(t *testing.T) {
		front.t = t
		r := front.sh(id, "echo hi; echo err >&2; exit 3")
		if r.ExitCode != 3 || r.Reason != "exited" || r.Stdout != "hi\n" || r.Stderr != "err\n" {
			t.Errorf("exec = %+v, want exit 3 with hi and err", r)
		}
	})

	t.Run("Streamed", func(t *testing.T) {
		front.t = t
		body, _ := json.Marshal(map[string]any{"command": "echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three; exit 4"})
		req, _ := http.NewRequest("POST", front.url+"/v1/sandboxes/"+id+"/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+front.key)
		req.Header.Set("Accept", "application/x-ndjson")
		resp, err := front.client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var types []string
		var text strings.Builder
		exit := -1
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev struct {
				Type     string `json:"type"`
				Data     string `json:"data"`
				ExitCode int    `json:"exit_code"`
			}
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				t.Fatalf("not an event: %q", sc.Text())
			}
			types = append(types, ev.Type)
			text.WriteString(ev.Data)
			if ev.Type == "result" {
				exit = ev.ExitCode
			}
		}
		if got := strings.Join(types, ","); resp.StatusCode != 200 || got != "started,stdout,stderr,stdout,result" ||
			text.String() != "one\ntwo\nthree\n" || exit != 4 {
			t.Errorf("streamed exec = %d: %s (%q, exit %d), want started, stdout, stderr, stdout, result, exit 4", resp.StatusCode, got, text.String(), exit)
		}
	})

	t.Run("BackgroundStdinWait", func(t *testing.T) {
		front.t = t
		st, b := front.api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "read l; echo got $l; exit 5", "background": true, "keep_stdin_open": true})
		var started struct {
			ProcessID string `json:"process_id"`
		}
		json.Unmarshal(b, &started)
		if st != 202 || started.ProcessID == "" {
			t.Fatalf("exec background = %d %s", st, b)
		}
		pp := "/v1/sandboxes/" + id + "/processes/" + started.ProcessID
		if st, b := front.api("GET", "/v1/sandboxes/"+id+"/processes", nil); st != 200 || !strings.Contains(string(b), started.ProcessID) {
			t.Errorf("GET processes = %d %s, want %s listed", st, b, started.ProcessID)
		}
		if st, b := front.api("POST", pp+"/stdin", map[string]any{"data": "hello\n", "eof": true}); st != 204 {
			t.Fatalf("POST stdin = %d %s", st, b)
		}
		st, b = front.api("POST", pp+"/wait", map[string]any{"timeout": 60})
		var p struct {
			State  string `json:"state"`
			Result struct {
				ExitCode int    `json:"exit_code"`
				Stdout   string `json:"stdout"`
			} `json:"result"`
		}
		json.Unmarshal(b, &p)
		if st != 200 || p.State != "exited" || p.Result.ExitCode != 5 || p.Result.Stdout != "got hello\n" {
			t.Errorf("POST wait = %d %s, want exited 5 with got hello", st, b)
		}
	})

	t.Run("Files", func(t *testing.T) {
		front.t = t
		if st, b := front.api("PUT", "/v1/sandboxes/"+id+"/files/write", map[string]any{"path": "/tmp/e2b/f.txt", "content": "abc\n"}); st != 200 {
			t.Fatalf("write = %d %s", st, b)
		}
		st, b := front.api("GET", "/v1/sandboxes/"+id+"/files/read?path=/tmp/e2b/f.txt", nil)
		var fc struct {
			Content string `json:"content"`
			EOF     bool   `json:"eof"`
		}
		json.Unmarshal(b, &fc)
		if st != 200 || fc.Content != "abc\n" || !fc.EOF {
			t.Errorf("read = %d %s", st, b)
		}
		st, b = front.api("GET", "/v1/sandboxes/"+id+"/files/list?path=/tmp/e2b", nil)
		var fl struct {
			Entries []struct {
				Name string `json:"name"`
				Size int64  `json:"size"`
			} `json:"entries"`
		}
		json.Unmarshal(b, &fl)
		if st != 200 || len(fl.Entries) != 1 || fl.Entries[0].Name != "f.txt" || fl.Entries[0].Size != 4 {
			t.Errorf("list = %d %s", st, b)
		}
		// The file is in the remote's sandbox: a command there reads it.
		if r := front.sh(id, "cat /tmp/e2b/f.txt"); r.Stdout != "abc\n" {
			t.Errorf("cat in the sandbox = %+v", r)
		}
	})

	t.Run("Tools", func(t *testing.T) {
		front.t = t
		// sandbox_bash reports the files a command wrote (Changed, over
		// find in the sandbox); read_file pages by line (ReadLines).
		st, b := front.api("POST", "/v1/sandboxes/"+id+"/tools/sandbox_bash", map[string]any{"command": "printf 'l1\\nl2\\n' > /workspace/tool.txt && echo done"})
		if st != 200 || !strings.Contains(string(b), `"/workspace/tool.txt"`) || !strings.Contains(string(b), `done\n`) {
			t.Errorf("sandbox_bash = %d %s, want its output and the file it wrote", st, b)
		}
		st, b = front.api("POST", "/v1/sandboxes/"+id+"/tools/read_file", map[string]any{"file_path": "/workspace/tool.txt"})
		if st != 200 || !strings.Contains(string(b), "l2") {
			t.Errorf("read_file = %d %s, want the file's lines", st, b)
		}
		st, b = front.api("POST", "/v1/sandboxes/"+id+"/tools/glob", map[string]any{"pattern": "*.txt"})
		if st != 501 || !strings.Contains(string(b), "e2b backend") {
			t.Errorf("glob = %d %s, want 501 naming the backend", st, b)
		}
	})

	t.Run("Restart", func(t *testing.T) {
		front.t = t
		st, b := front.api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "sleep 1000", "background": true, "timeout": 600})
		var started struct {
			ProcessID string `json:"process_id"`
		}
		json.Unmarshal(b, &started)
		if st != 202 || started.ProcessID == "" {
			t.Fatalf("exec background = %d %s", st, b)
		}
		// A new run of the front reattaches to the remote sandbox and finds
		// the process it left running there.
		front.stop()
		front = startDaemon(t, front.dataDir, env...)
		pp := "/v1/sandboxes/" + id + "/processes/" + started.ProcessID
		if st, b := front.api("GET", pp, nil); st != 200 || !strings.Contains(string(b), `"state":"running"`) {
			t.Fatalf("GET the process after the restart = %d %s, want it running", st, b)
		}
		if st, b := front.api("POST", pp+"/signal", map[string]any{"signal": "KILL"}); st != 200 || !strings.Contains(string(b), "stopped") {
			t.Errorf("signal KILL = %d %s, want stopped", st, b)
		}
		if st, b := front.api("POST", pp+"/wait", map[string]any{"timeout": 60}); st != 200 || !strings.Contains(string(b), `"reason":"killed"`) {
			t.Errorf("wait = %d %s, want it killed", st, b)
		}
		if r := front.sh(id, "cat /tmp/e2b/f.txt"); r.Stdout != "abc\n" {
			t.Errorf("cat after the restart = %+v, want the file written before", r)
		}
	})

	t.Run("E2BSurface", func(t *testing.T) {
		front.t = t
		// The front's own E2B API, over the e2b backend: envd's routes pass
		// through the adapter to the remote.
		e2b := func(method, path string, h map[string]string, body []byte) (int, []byte) {
			req, _ := http.NewRequest(method, front.url+path, bytes.NewReader(body))
			for k, v := range h {
				req.Header.Set(k, v)
			}
			resp, err := front.client().Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, b
		}
		st, b := e2b("POST", "/v2/sandboxes", map[string]string{"X-API-Key": front.key, "Content-Type": "application/json"}, []byte(`{"templateID":"base"}`))
		var created struct {
			SandboxID       string `json:"sandboxID"`
			EnvdAccessToken string `json:"envdAccessToken"`
		}
		if json.Unmarshal(b, &created); st != 201 || created.SandboxID == "" {
			t.Fatalf("POST /v2/sandboxes = %d %s", st, b)
		}
		msg := []byte(`{"process":{"cmd":"/bin/sh","args":["-c","echo via-envd; exit 6"]},"stdin":false}`)
		env := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg))) // a Connect envelope
		env = append(env, msg...)
		envd := map[string]string{"E2b-Sandbox-Id": created.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": created.EnvdAccessToken,
			"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}
		st, b = e2b("POST", "/process.Process/Start", envd, env)
		if st != 200 || !bytes.Contains(b, []byte(`"stdout":"dmlhLWVudmQK"`)) || !bytes.Contains(b, []byte(`"exitCode":6`)) {
			t.Errorf("process.Process/Start through the front = %d %q, want via-envd and exit 6", st, b)
		}
		if st, b := e2b("DELETE", "/sandboxes/"+created.SandboxID, map[string]string{"X-API-Key": front.key}, nil); st != 204 {
			t.Errorf("DELETE /sandboxes = %d %s", st, b)
		}
	})
	front.t = t // back from the subtests

	if st, b := front.api("DELETE", "/v1/sandboxes/"+id, nil); st != 204 {
		t.Fatalf("DELETE = %d %s", st, b)
	}
	if left := e2bList(t, remote, front.instance); len(left) != 0 {
		t.Errorf("after the delete the remote still runs %+v", left)
	}
	front.cleanup()
	frontStopped = true
	if left := e2bList(t, remote, front.instance); len(left) != 0 {
		t.Errorf("after the front stopped the remote still runs %+v", left)
	}
}
