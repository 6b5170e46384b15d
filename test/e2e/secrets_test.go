package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecrets drives the secret store end to end on the native backend: a
// secret set over HTTP and one set by the CLI (its value on stdin) reach a
// sandbox's processes by name (on create, on exec, through the CLI's exec
// --secret and through sandbox.exec's {{secret:name}}), proved by hashes the
// sandbox prints, so no answer carries a value. Then SECURITY.md AP-05's
// core: the daemon's log (at debug), the audit log, the store file, every
// file of the data dir and every answer of the test hold no value, while
// the secrets' names, which travel with the values in the same requests,
// are found in each (the control), and a plain marker given as env the same
// ways is found where the sandbox prints it.
func TestSecrets(t *testing.T) {
	d := startDaemon(t, "", "SANDBOX_BACKEND=native", "SBX_POOL_SIZE=0", "SBX_LOG_LEVEL=debug")
	cleaned := false
	defer func() {
		if !cleaned {
			d.cleanup()
		}
	}()
	var (
		nameA      = "ap05-env-" + randHex(6)
		nameB      = "ap05-cli-" + randHex(6)
		nameP      = "ap05-proxy-" + randHex(6)
		valueA     = "sbx-value-a-" + randHex(16)
		valueB     = "sbx-value-b-" + randHex(16)
		valueP     = "sbx-value-p-" + randHex(16)
		marker     = "ap05-marker-" + randHex(12)
		values     = map[string]string{"env secret": valueA, "CLI secret": valueB, "proxy secret": valueP}
		answers    [][]byte // every API answer and CLI output of the test
		sandboxIDs []string
	)
	api := func(method, path string, body any) (int, []byte) {
		t.Helper()
		st, b := d.api(method, path, body)
		answers = append(answers, b)
		return st, b
	}
	cli := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		out, errOut, code := d.cliIn(strings.NewReader(stdin), args...)
		answers = append(answers, []byte(out), []byte(errOut))
		return out, errOut, code
	}
	hash := func(v string) string {
		h := sha256.Sum256([]byte(v))
		return hex.EncodeToString(h[:])
	}
	execOut := func(id string, body map[string]any) string {
		t.Helper()
		st, b := api("POST", "/v1/sandboxes/"+id+"/exec", body)
		var r execResult
		if st != 200 || json.Unmarshal(b, &r) != nil || r.ExitCode != 0 {
			t.Fatalf("exec %v = %d %s", body, st, b)
		}
		return strings.TrimSpace(r.Stdout)
	}
	// hashOf is a command printing the SHA-256 of variable v's value.
	hashOf := func(v string) string { return `printf %s "$` + v + `" | sha256sum | cut -d' ' -f1` }

	// Set: over HTTP, and by the CLI with the value on stdin.
	if st, b := api("POST", "/v1/secrets", map[string]any{"name": nameA, "value": valueA}); st != 201 {
		t.Fatalf("POST /v1/secrets = %d %s", st, b)
	}
	if out, errOut, code := cli(valueB+"\n", "secret", "set", nameB); code != 0 || out != nameB+"\n" {
		t.Fatalf("sbx secret set = %d %q %q", code, out, errOut)
	}
	if st, b := api("POST", "/v1/secrets", map[string]any{"name": nameP, "value": valueP, "mode": "proxy", "hosts": []string{"api.example.com"}}); st != 201 {
		t.Fatalf("POST /v1/secrets (proxy) = %d %s", st, b)
	}
	out, _, code := cli("", "secret", "ls", "--json")
	var list struct{ Secrets []struct{ Name, Mode string } }
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Secrets) != 3 {
		t.Fatalf("sbx secret ls --json = %d %s", code, out)
	}

	// A name the key has no secret of: 400 naming it, and nothing starts.
	st, b := api("POST", "/v1/sandboxes", map[string]any{"secrets": map[string]string{"TOKEN": "no-such-secret"}})
	if st != 400 || !strings.Contains(string(b), `no secret named \"no-such-secret\"`) {
		t.Errorf("create with an unknown secret = %d %s", st, b)
	}
	if st, b := api("GET", "/v1/sandboxes", nil); st != 200 || !bytes.Contains(b, []byte(`"sandboxes":[]`)) {
		t.Errorf("a refused create left a sandbox: %d %s", st, b)
	}

	// Create with the secret and a plain marker; exec prints the secret's hash.
	id := d.create(map[string]any{"secrets": map[string]string{"TOKEN": nameA}, "env": map[string]string{"MARK": marker}})
	sandboxIDs = append(sandboxIDs, id)
	if got := execOut(id, map[string]any{"command": hashOf("TOKEN")}); got != hash(valueA) {
		t.Errorf("the sandbox's TOKEN hashes to %s, want the secret's %s", got, hash(valueA))
	}
	if got := execOut(id, map[string]any{"argv": []string{"printenv", "MARK"}}); got != marker {
		t.Errorf("control: printenv MARK = %q, want the marker", got)
	}
	// Exec with another secret: in that process's environment only.
	if got := execOut(id, map[string]any{"command": hashOf("T2"), "secrets": map[string]string{"T2": nameB}}); got != hash(valueB) {
		t.Errorf("exec with secret B printed %q, want the hash of its value", got)
	}
	if got := execOut(id, map[string]any{"command": `printenv T2 || echo absent`}); got != "absent" {
		t.Errorf("an exec's secret outlived its process: %q", got)
	}
	st, b = api("POST", "/v1/sandboxes/"+id+"/exec", map[string]any{"command": "touch /tmp/ran", "secrets": map[string]string{"X": "nope"}})
	if st != 400 || !strings.Contains(string(b), `no secret named \"nope\"`) {
		t.Errorf("exec with an unknown secret = %d %s", st, b)
	}
	if got := execOut(id, map[string]any{"command": "test -e /tmp/ran && echo ran || echo not-run"}); got != "not-run" {
		t.Errorf("a refused exec ran its command: %q", got)
	}
	// The CLI's exec --secret.
	out, errOut, code := cli("", "exec", "--secret", "T3="+nameA, id, "--", "sh", "-c", hashOf("T3"))
	if code != 0 || strings.TrimSpace(out) != hash(valueA) {
		t.Errorf("sbx exec --secret = %d %q %q", code, out, errOut)
	}
	// sandbox.exec with a {{secret:name}} handle and a plain value.
	st, res, raw := d.tool(id, "sandbox.exec", map[string]any{"runtime": "sh",
		"code":    hashOf("K") + `; printf '%s\n' "$P"`,
		"secrets": map[string]string{"K": "{{secret:" + nameB + "}}", "P": marker}})
	answers = append(answers, []byte(raw))
	if st != 200 || res["stdout"] != hash(valueB)+"\n"+marker+"\n" {
		t.Errorf("sandbox.exec with a handle = %d %s", st, raw)
	}
	st, _, raw = d.tool(id, "sandbox.exec", map[string]any{"runtime": "sh", "code": "true", "secrets": map[string]string{"K": "{{secret:no-such}}"}})
	answers = append(answers, []byte(raw))
	if st != 400 || !strings.Contains(raw, `no secret named \"no-such\"`) {
		t.Errorf("sandbox.exec with an unknown handle = %d %s", st, raw)
	}
	// Proxy mode: refused where no egress proxy of sbx's carries the
	// sandbox's traffic (tier none here), before anything starts.
	st, b = api("POST", "/v1/sandboxes", map[string]any{"secrets": map[string]string{"GH": nameP}})
	if st != 400 || !strings.Contains(string(b), "is proxy mode, which needs") {
		t.Errorf("create with a proxy secret on tier none = %d %s", st, b)
	}
	// The CLI's create --secret.
	out, errOut, code = cli("", "create", "--secret", "TOKEN="+nameB)
	idB := strings.TrimSpace(out)
	if code != 0 || idB == "" {
		t.Fatalf("sbx create --secret = %d %q %q", code, out, errOut)
	}
	sandboxIDs = append(sandboxIDs, idB)
	if got := execOut(idB, map[string]any{"command": hashOf("TOKEN")}); got != hash(valueB) {
		t.Errorf("sbx create --secret: TOKEN hashes to %s, want %s", got, hash(valueB))
	}

	// Every read route, for the search below.
	for _, p := range []string{"/v1/secrets", "/v1/secrets/" + nameA, "/v1/secrets/" + nameP, "/v1/sandboxes", "/v1/sandboxes/" + id, "/v1/sandboxes/" + idB} {
		if st, b := api("GET", p, nil); st != 200 {
			t.Errorf("GET %s = %d %s", p, st, b)
		}
	}
	// A replaced value: 200, and the next sandbox gets the new one.
	if st, b := api("POST", "/v1/secrets", map[string]any{"name": nameA, "value": valueA + "-2"}); st != 200 {
		t.Errorf("POST /v1/secrets again = %d %s", st, b)
	}
	values["replaced secret"] = valueA + "-2"
	if got := execOut(id, map[string]any{"command": hashOf("T4"), "secrets": map[string]string{"T4": nameA}}); got != hash(valueA+"-2") {
		t.Errorf("after the replace, the secret hashes to %s, want the new value's", got)
	}
	if out, errOut, code := cli("", "secret", "rm", nameB); code != 0 || out != nameB+"\n" {
		t.Errorf("sbx secret rm = %d %q %q", code, out, errOut)
	}
	if st, _ := api("GET", "/v1/secrets/"+nameB, nil); st != 404 {
		t.Errorf("GET a deleted secret = %d, want 404", st)
	}

	// Host processes' argv (readable by every host user) holds no value.
	seen := false
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		seen = seen || bytes.Contains(b, []byte(id))
		for what, v := range values {
			if bytes.Contains(b, []byte(v)) {
				t.Errorf("%s: the %s's value is in a host process's argv", p, what)
			}
		}
	}
	if !seen {
		t.Errorf("control: no host process names sandbox %s; the argv search proves nothing", id)
	}

	// The audit log: names, never values.
	st, audit := api("GET", "/v1/audit?limit=1000", nil)
	if st != 200 {
		t.Fatalf("GET /v1/audit = %d %s", st, audit)
	}
	for _, want := range []string{`"action":"set_secret","target":"` + nameA + `"`, `"action":"delete_secret","target":"` + nameB + `"`,
		`"detail":"secrets=` + nameA + `"`, "secrets=" + nameB} {
		if !strings.Contains(string(audit), want) {
			t.Errorf("control: the audit log lacks %s", want)
		}
	}

	// Stop the daemon (its sandboxes deleted), then search what it left.
	cleaned = true
	d.cleanup()
	logs := d.log.String()
	var files [][2]string // path, contents
	filepath.WalkDir(d.dataDir, func(p string, de os.DirEntry, err error) error {
		if err != nil || !de.Type().IsRegular() {
			return nil
		}
		if fi, _ := de.Info(); fi == nil || fi.Size() > 64<<20 {
			return nil
		}
		raw, _ := os.ReadFile(p)
		files = append(files, [2]string{p, string(raw)})
		return nil
	})
	db, err := os.ReadFile(filepath.Join(d.dataDir, "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	for what, v := range values {
		if strings.Contains(logs, v) {
			t.Errorf("AP-05: the daemon's log holds the %s's value", what)
		}
		if bytes.Contains(audit, []byte(v)) {
			t.Errorf("AP-05: the audit log holds the %s's value", what)
		}
		for _, f := range files {
			if strings.Contains(f[1], v) {
				t.Errorf("AP-05: %s holds the %s's value", f[0], what)
			}
		}
		for _, a := range answers {
			if bytes.Contains(a, []byte(v)) {
				t.Errorf("AP-05: an answer holds the %s's value: %.300s", what, a)
			}
		}
	}
	// The controls: what travelled with the values is found where it goes.
	for _, c := range []struct {
		where string
		found bool
	}{
		{"the daemon's log names secret A", strings.Contains(logs, nameA)},
		{"the daemon's log names the CLI's secret", strings.Contains(logs, nameB)},
		{"the audit log names the proxy secret", bytes.Contains(audit, []byte(nameP))},
		{"sbx.db holds secret A's name", bytes.Contains(db, []byte(nameA))},
		{"sbx.db holds the proxy secret's name", bytes.Contains(db, []byte(nameP))},
		{"an answer names secret A", anyContains(answers, nameA)},
		{"an answer holds the plain marker", anyContains(answers, marker)},
		{"an answer holds a value's hash", anyContains(answers, hash(valueA))},
	} {
		if !c.found {
			t.Errorf("control: %s: no", c.where)
		}
	}
	if len(answers) < 20 || len(files) < 3 || len(sandboxIDs) != 2 {
		t.Errorf("control: searched %d answers and %d files", len(answers), len(files))
	}
}

func anyContains(bs [][]byte, s string) bool {
	for _, b := range bs {
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}
