package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The walkthrough, command by command.
func TestCLIWalkthrough(t *testing.T) {
	d := sharedDaemon(t)

	out, errOut, code := d.cli("run", "--", "python3", "-c", "print(6*7)")
	if code != 0 || out != "42\n" {
		t.Fatalf("sbx run python3 = %d %q (stderr %q), want 0 \"42\\n\"", code, out, errOut)
	}

	out, errOut, code = d.cli("create", "--timeout", "300", "--memory-mb", "256", "--pids", "64", "--label", "suite=e2e")
	if code != 0 {
		t.Fatalf("sbx create = %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	id := lines[len(lines)-1]
	if !idShape.MatchString(id) {
		t.Fatalf("sbx create's last stdout line %q is not an id", id)
	}

	_, _, code = d.cli("exec", id, "--", "sh", "-c", "echo hi > /workspace/a.txt; exit 3")
	if code != 3 {
		t.Errorf("sbx exec ... exit 3 = %d, want 3", code)
	}

	dir := t.TempDir()
	if _, e, c := d.cli("cp", id+":/workspace/a.txt", filepath.Join(dir, "a.txt")); c != 0 {
		t.Fatalf("sbx cp out = %d %s", c, e)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.txt")); string(b) != "hi\n" {
		t.Errorf("copied a.txt = %q, want %q", b, "hi\n")
	}

	blob := make([]byte, 5<<20+123)
	rand.Read(blob)
	local := filepath.Join(dir, "local.bin")
	os.WriteFile(local, blob, 0o644)
	if _, e, c := d.cli("cp", local, id+":/workspace/local.bin"); c != 0 {
		t.Fatalf("sbx cp in = %d %s", c, e)
	}
	back := filepath.Join(dir, "back.bin")
	if _, e, c := d.cli("cp", id+":/workspace/local.bin", back); c != 0 {
		t.Fatalf("sbx cp back = %d %s", c, e)
	}
	if b, _ := os.ReadFile(back); !bytes.Equal(b, blob) {
		t.Errorf("binary round trip differs: %d bytes back, want %d", len(b), len(blob))
	}

	out, _, code = d.cli("ls")
	if code != 0 || !strings.Contains(out, id) {
		t.Errorf("sbx ls = %d, output lacks %s:\n%s", code, id, out)
	}
	out, _, code = d.cli("ls", "--json")
	if code != 0 || !json.Valid([]byte(out)) || !strings.Contains(out, id) {
		t.Errorf("sbx ls --json = %d, not JSON listing %s:\n%s", code, id, out)
	}
	// The shared daemon runs the default warm pool of 4.
	out, _, code = d.cli("health")
	if code != 0 || !strings.Contains(out, "status: ok") || !strings.Contains(out, " of 4 ready") || !strings.Contains(out, "native: templates: host\n") {
		t.Errorf("sbx health = %d, want ok, the warm pool of 4 and native's one template:\n%s", code, out)
	}
	out, _, code = d.cli("health", "--json")
	var health struct{ Pool *struct{ Size, Ready int } }
	if code != 0 || json.Unmarshal([]byte(out), &health) != nil || health.Pool == nil || health.Pool.Size != 4 || health.Pool.Ready > 4 {
		t.Errorf("sbx health --json = %d, want pool.size 4:\n%s", code, out)
	}
	out, _, code = d.cli("get", "--json", id)
	var got struct {
		ID        string
		State     string
		Isolation struct {
			Backend string
			Level   string
			Layers  map[string]string
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.ID != id || got.State != "running" {
		t.Errorf("sbx get --json = %d %s", code, out)
	}
	if got.Isolation.Backend != "native" || got.Isolation.Layers["pidns"] != "applied" {
		t.Errorf("isolation = %+v, want backend native with pidns applied", got.Isolation)
	}

	if _, e, c := d.cli("rm", id); c != 0 {
		t.Fatalf("sbx rm = %d %s", c, e)
	}
	_, errOut, code = d.cli("get", id)
	if code != 1 || !strings.Contains(errOut, id) || !strings.Contains(errOut, "not found") {
		t.Errorf("sbx get after rm = %d %q, want 1 and a not-found error naming %s", code, errOut, id)
	}
}

func TestCLIExitCodes(t *testing.T) {
	d := sharedDaemon(t)
	id := d.create(nil)
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"exec", id, "--", "true"}, 0},
		{[]string{"exec", id, "--", "sh", "-c", "exit 7"}, 7},
		{[]string{"exec", "--timeout", "1", id, "--", "sleep", "30"}, 124},
		{[]string{"exec", id, "--", "sh", "-c", "kill -TERM $$"}, 128 + 15},
		{[]string{"exec", id, "--", "no-such-command-xyz"}, 127},
	} {
		if _, e, code := d.cli(tc.args...); code != tc.want {
			t.Errorf("sbx %v = %d (stderr %q), want %d", tc.args, code, e, tc.want)
		}
	}
	// The argv reaches the sandbox verbatim: no host shell in between.
	out, _, code := d.cli("exec", id, "--", "echo", "a;b", "$HOME", "`id`")
	if code != 0 || out != "a;b $HOME `id`\n" {
		t.Errorf("verbatim argv: got %d %q", code, out)
	}
	// Output streams as it comes, stdout and stderr apart.
	out, errOut, _ := d.cli("exec", id, "--", "sh", "-c", "echo out; echo err >&2")
	if out != "out\n" || errOut != "err\n" {
		t.Errorf("streams: stdout %q stderr %q", out, errOut)
	}
	// -i passes stdin through.
	out, _, _ = d.cliIn(strings.NewReader("from stdin\n"), "exec", "-i", id, "--", "cat")
	if out != "from stdin\n" {
		t.Errorf("exec -i cat = %q", out)
	}
	// Errors from sbx itself are 125, never mistaken for the command's own code.
	if _, _, code := d.cli("exec", "aaaaaaaaaaaaaaaaaaaaaaaaaa", "--", "true"); code != 125 {
		t.Errorf("exec on unknown sandbox = %d, want 125", code)
	}
	d.api("DELETE", "/v1/sandboxes/"+id, nil)
}
