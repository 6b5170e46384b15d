package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RL-04: SIGTERM with sandboxes, streaming execs and a create in flight.
// The daemon lets in-flight calls finish (or the stream can be re-attached
// after the restart by process id, with its output), keeps every sandbox
// running (a counter each writes keeps advancing across the restart),
// destroys its warm pool, and leaves the in-flight create either made or
// rolled back.
func TestSIGTERMDrain(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, dir, "SBX_POOL_SIZE=2")
	const n = 8
	ids := make([]string, n)
	for i := range ids {
		ids[i] = d.create(map[string]any{"memory_mb": 64, "timeout": 3600})
		d.exec(ids[i], map[string]any{"command": "i=0; while :; do i=$((i+1)); echo $i > /workspace/count; sleep 0.1; done", "background": true})
	}
	count := func(dd *daemon, id string) int {
		return atoi(strings.TrimSpace(dd.sh(id, "cat /workspace/count").Stdout))
	}
	before := make([]int, n)
	for i, id := range ids {
		before[i] = count(d, id)
	}

	// Three streams, each started (its first event read) before the signal.
	type stream struct {
		pid  string
		done bool
		out  string
	}
	streams := make([]*stream, 3)
	var wg sync.WaitGroup
	started := make(chan struct{}, len(streams))
	for i := range streams {
		s := &stream{}
		streams[i] = s
		wg.Go(func() {
			body, _ := json.Marshal(map[string]any{"command": "for i in $(seq 20); do echo line$i; sleep 0.1; done", "timeout": 60})
			req, _ := http.NewRequest("POST", d.url+"/v1/sandboxes/"+ids[i]+"/exec", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+d.key)
			req.Header.Set("Accept", "application/x-ndjson")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				started <- struct{}{}
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			first := true
			for sc.Scan() {
				var ev map[string]any
				json.Unmarshal(sc.Bytes(), &ev)
				switch ev["type"] {
				case "started":
					s.pid, _ = ev["process_id"].(string)
				case "stdout":
					s.out += fmtAny(ev["data"])
				case "result":
					s.done = true
				}
				if first {
					first = false
					started <- struct{}{}
				}
			}
		})
	}
	for range streams {
		<-started
	}
	// One create in flight.
	createDone := make(chan int, 1)
	go func() {
		st, _ := d.api("POST", "/v1/sandboxes", map[string]any{"memory_mb": 64})
		createDone <- st
	}()
	time.Sleep(20 * time.Millisecond)
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the daemon did not exit within 60 s of SIGTERM")
	}
	wg.Wait()
	st := <-createDone
	t.Logf("the create in flight at SIGTERM answered %d", st)
	if !strings.Contains(d.log.String(), "shutting down") {
		t.Errorf("the daemon did not log the signal")
	}
	// The warm pool went; the sandboxes stayed.
	var groups []string
	all, _ := filepath.Glob("/sys/fs/cgroup/pids/sbx/" + d.instance + "/*")
	for _, g := range all {
		if idShape.MatchString(filepath.Base(g)) {
			groups = append(groups, g)
		}
	}
	if len(groups) < n || len(groups) > n+1 {
		t.Errorf("%d sandbox groups after SIGTERM, want the %d sandboxes (and the create's, if made), no warm pool", len(groups), n)
	}

	d2 := startDaemon(t, dir, "SBX_POOL_SIZE=0")
	defer d2.cleanup()
	for i, id := range ids {
		if after := count(d2, id); after <= before[i] {
			t.Errorf("sandbox %s's counter did not advance across the restart: %d then %d", id, before[i], after)
		}
	}
	for i, s := range streams {
		if s.done {
			continue
		}
		if s.pid == "" {
			t.Errorf("stream %d ended before its process id", i)
			continue
		}
		// Re-attached by process id: its output, buffered, is all there.
		if !waitUntil(10*time.Second, func() bool {
			st, b := d2.api("GET", "/v1/sandboxes/"+ids[i]+"/processes/"+s.pid, nil)
			return st == 200 && !strings.Contains(string(b), `"state":"running"`)
		}) {
			t.Errorf("stream %d's process still running", i)
		}
		st, b := d2.api("GET", "/v1/sandboxes/"+ids[i]+"/processes/"+s.pid+"/output?replay=true", nil)
		if st != 200 || !strings.Contains(string(b), "line20") {
			t.Errorf("re-attaching stream %d (%s) after the restart = %d %.300s", i, s.pid, st, b)
		}
	}
	// Nothing half-made: every sandbox the daemon knows runs.
	_, b := d2.api("GET", "/v1/sandboxes", nil)
	var list struct {
		Sandboxes []struct{ ID, State string } `json:"sandboxes"`
	}
	json.Unmarshal(b, &list)
	for _, s := range list.Sandboxes {
		if s.State != "running" {
			t.Errorf("sandbox %s is %s after the restart", s.ID, s.State)
		}
	}
	if len(list.Sandboxes) < n || len(list.Sandboxes) > n+1 {
		t.Errorf("%d sandboxes after the restart, want %d (+1 if the create was made)", len(list.Sandboxes), n)
	}
}

func fmtAny(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	default:
		b, _ := json.Marshal(x)
		return strconv.Quote(string(b))
	}
}
