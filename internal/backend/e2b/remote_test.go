package e2b

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveBuild()
	os.Exit(code)
}

// remoteDaemon is a second `sbx serve` on loopback (native backend, its own
// data dir): the E2B server the driver under test talks to.
type remoteDaemon struct {
	url, key, instance, dir string
	cmd                     *exec.Cmd
	done                    chan struct{}
	log                     *testutil.SyncBuffer
}

var listening = regexp.MustCompile(`listening on (http://127\.0\.0\.1:[0-9]+)`)

// startRemote starts the remote daemon for t, stopped and removed at its
// cleanup. It needs what the native backend needs.
func startRemote(t *testing.T) *remoteDaemon {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireUserNS(t)
	testutil.RequireNamespaces(t)
	testutil.RequireOverlay(t)
	bin := testutil.BuildSBX(t)
	dir, err := os.MkdirTemp("", "sbx-e2b-remote-") // short: the socket path has a length limit
	if err != nil {
		t.Fatal(err)
	}
	rd := &remoteDaemon{dir: dir, done: make(chan struct{}), log: &testutil.SyncBuffer{}}
	rd.cmd = exec.Command(bin, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--socket", filepath.Join(dir, "sbx.sock"))
	rd.cmd.Env = append(os.Environ(), "SANDBOX_BACKEND=native", "SBX_POOL_SIZE=0")
	pr, pw := io.Pipe()
	rd.cmd.Stdout = io.MultiWriter(pw, rd.log)
	rd.cmd.Stderr = rd.log
	if err := rd.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("starting the remote sbx serve: %v", err)
	}
	go func() {
		rd.cmd.Wait()
		pw.Close()
		close(rd.done)
	}()
	t.Cleanup(func() { rd.stop(t) })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case rd.url = <-found:
	case <-rd.done:
		t.Fatalf("the remote sbx serve exited early:\n%s", rd.log.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the remote sbx serve printed no URL within 60 s:\n%s", rd.log.String())
	}
	key, err := os.ReadFile(filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	rd.key = strings.TrimSpace(string(key))
	inst, _ := os.ReadFile(filepath.Join(dir, "instance"))
	rd.instance = strings.TrimSpace(string(inst))
	return rd
}

// stop ends the remote daemon (SIGTERM) and removes its data dir and its
// empty cgroups.
func (rd *remoteDaemon) stop(t *testing.T) {
	// A native sandbox outlives its daemon: none may be left behind.
	for _, id := range rd.sandboxes(t) {
		t.Errorf("leak: the remote daemon still holds sandbox %s at the end of the test; deleting it", id)
		req, _ := http.NewRequest(http.MethodDelete, rd.url+"/v1/sandboxes/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+rd.key)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	rd.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-rd.done:
	case <-time.After(30 * time.Second):
		t.Errorf("the remote sbx serve did not exit within 30 s of SIGTERM")
		rd.cmd.Process.Kill()
		<-rd.done
	}
	if t.Failed() {
		t.Logf("the remote daemon's log:\n%s", rd.log.String())
	}
	if rd.instance != "" {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/sbx/" + rd.instance)
		for _, d := range append(dirs, "/sys/fs/cgroup/sbx/"+rd.instance) {
			os.Remove(d) // rmdir: only an empty group goes
		}
	}
	os.RemoveAll(rd.dir)
}

// sandboxes lists every sandbox the remote daemon holds, by its own API.
func (rd *remoteDaemon) sandboxes(t *testing.T) []string {
	if rd.url == "" {
		return nil
	}
	req, _ := http.NewRequest(http.MethodGet, rd.url+"/v1/sandboxes", nil)
	req.Header.Set("Authorization", "Bearer "+rd.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("listing the remote daemon's sandboxes: %v", err)
		return nil
	}
	defer resp.Body.Close()
	var list struct {
		Sandboxes []struct{ ID string } `json:"sandboxes"`
	}
	json.NewDecoder(resp.Body).Decode(&list)
	var out []string
	for _, s := range list.Sandboxes {
		out = append(out, s.ID)
	}
	return out
}

// options are the driver's options for instance, against rd.
func (rd *remoteDaemon) options(t *testing.T, instance string) backend.Options {
	return backend.Options{DataDir: t.TempDir(), Instance: instance, Log: testutil.Logger(t), OutputLimitBytes: 1 << 20,
		E2B: backend.E2BRemote{URL: rd.url, APIKey: rd.key}}
}

// listed returns the remote's running sandboxes whose metadata name instance.
func (rd *remoteDaemon) listed(t *testing.T, instance string) []sandboxBody {
	t.Helper()
	a := &api{base: rd.url, key: rd.key, hc: http.DefaultClient}
	all, err := a.list(context.Background(), map[string]string{metaInstance: instance})
	if err != nil {
		t.Fatalf("listing the remote's sandboxes: %v", err)
	}
	return all
}

// checkNone fails t when the remote still runs a sandbox of instance,
// after up to 5 s for a cleanup in flight.
func (rd *remoteDaemon) checkNone(t *testing.T, instance string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := rd.listed(t, instance)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(left)
			t.Errorf("leak: the remote still runs sandboxes of instance %s: %s", instance, b)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// instanceName is a fresh instance name for a test's driver.
func instanceName() string { return fmt.Sprintf("t%d", time.Now().UnixNano()%1e12) }

// endAt is when the remote ends the sandbox saved names (its endAt).
func (rd *remoteDaemon) endAt(t *testing.T, sv []byte) time.Time {
	t.Helper()
	var s saved
	if err := json.Unmarshal(sv, &s); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, rd.url+"/sandboxes/"+s.RemoteID, nil)
	req.Header.Set("X-API-Key", rd.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		EndAt time.Time `json:"endAt"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.EndAt.IsZero() {
		t.Fatalf("GET /sandboxes/%s: %d, %v", s.RemoteID, resp.StatusCode, err)
	}
	return out.EndAt
}
