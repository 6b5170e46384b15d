package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"sbx.dev/sbx/api/openapi"
)

// secretDaemon is a stand-in for the secret routes: it keeps what it was
// sent, values included, so the test can see what the CLI read.
type secretDaemon struct {
	mu   sync.Mutex
	sent []openapi.SecretCreate
	have map[string]openapi.SecretInfo
	srv  *httptest.Server
}

func newSecretDaemon(t *testing.T) *secretDaemon {
	d := &secretDaemon{have: map[string]openapi.SecretInfo{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/secrets", func(w http.ResponseWriter, r *http.Request) {
		var in openapi.SecretCreate
		json.NewDecoder(r.Body).Decode(&in)
		d.mu.Lock()
		defer d.mu.Unlock()
		d.sent = append(d.sent, in)
		_, exists := d.have[in.Name]
		info := openapi.SecretInfo{Name: in.Name, Mode: in.Mode, Hosts: in.Hosts, UpdatedAt: time.Now().Add(-90 * time.Second)}
		if info.Hosts == nil {
			info.Hosts = []string{}
		}
		d.have[in.Name] = info
		w.Header().Set("Content-Type", "application/json")
		if exists {
			w.WriteHeader(200)
		} else {
			w.WriteHeader(201)
		}
		json.NewEncoder(w).Encode(info)
	})
	mux.HandleFunc("GET /v1/secrets", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		l := openapi.SecretList{Secrets: []openapi.SecretInfo{}}
		for _, n := range []string{"api", "gh"} {
			if s, ok := d.have[n]; ok {
				l.Secrets = append(l.Secrets, s)
			}
		}
		json.NewEncoder(w).Encode(l)
	})
	mux.HandleFunc("DELETE /v1/secrets/{name}", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		n := r.PathValue("name")
		if _, ok := d.have[n]; !ok {
			apiError(w, 404, "not_found", "", `delete_secret: secret "`+n+`" not found`)
			return
		}
		delete(d.have, n)
		w.WriteHeader(204)
	})
	d.srv = httptest.NewServer(mux)
	t.Cleanup(d.srv.Close)
	return d
}

func (d *secretDaemon) sbx(stdin string, args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	e := &env{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errOut, euid: 1000,
		getenv: func(k string) string {
			return map[string]string{"SBX_URL": d.srv.URL, "SBX_API_KEY": "key", "HOME": "/nonexistent"}[k]
		}}
	code := e.run(context.Background(), args)
	return out.String(), errOut.String(), code
}

func TestSecretCommands(t *testing.T) {
	d := newSecretDaemon(t)
	for _, tc := range []struct {
		stdin          string
		args           []string
		code           int
		stdout, stderr string
	}{
		{"tok-1\n", []string{"secret", "set", "api"}, 0, "api\n", ""},
		{"tok-2\r\n", []string{"secret", "set", "api", "--mode", "env"}, 0, "api\n", "replaced secret api"},
		{"gh-tok", []string{"secret", "set", "--host", "api.github.com", "gh", "--host", "*.github.com"}, 0, "gh\n", ""},
		{"x", []string{"secret", "set", "--json", "other"}, 0, `"name":"other","mode":"env"`, ""},
		{"", []string{"secret", "set", "api"}, 2, "", "no value on stdin"},
		{"\n", []string{"secret", "set", "api"}, 2, "", "no value on stdin"},
		{"\xff\xfe", []string{"secret", "set", "api"}, 2, "", "not UTF-8"},
		{strings.Repeat("v", maxSecretBytes+1), []string{"secret", "set", "api"}, 2, "", "over 65536 bytes"},
		{"x", []string{"secret", "set", "api", "the-value"}, 2, "", "never from the command line"},
		{"x", []string{"secret", "set"}, 2, "", "missing the secret's NAME"},
		{"", []string{"secret", "ls"}, 0, "NAME  MODE   HOSTS                        UPDATED\napi   env    -                            1m30s ago\ngh    proxy  api.github.com,*.github.com  1m30s ago\n", ""},
		{"", []string{"secret", "ls", "--json"}, 0, `{"secrets":[{"name":"api","mode":"env","hosts":[]`, ""},
		{"", []string{"secret", "rm", "other", "nope"}, 1, "other\n", `sbx secret rm: delete_secret: secret "nope" not found`},
		{"", []string{"secret", "rm", "--json", "gh"}, 0, `{"deleted":["gh"]}`, ""},
		{"", []string{"secret"}, 2, "", "missing set, ls or rm"},
		{"", []string{"secret", "show"}, 2, "", `unknown subcommand "show"`},
		{"", []string{"secret", "-h"}, 0, "usage: sbx secret set NAME", ""},
	} {
		out, errOut, code := d.sbx(tc.stdin, tc.args...)
		exact := strings.HasSuffix(tc.stdout, "\n")
		if code != tc.code || !strings.Contains(out, tc.stdout) || (exact && out != tc.stdout) || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("sbx %v = %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, code, out, errOut, tc.code, tc.stdout, tc.stderr)
		}
	}
	// What the daemon got: the values as read, less one newline; proxy mode
	// for a secret given hosts.
	var got []string
	for _, s := range d.sent {
		got = append(got, s.Name+"="+s.Value+" "+s.Mode+" "+strings.Join(s.Hosts, ","))
	}
	want := []string{"api=tok-1 env ", "api=tok-2 env ", "gh=gh-tok proxy api.github.com,*.github.com", "other=x env "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("the daemon got %q, want %q", got, want)
	}
}

// --secret on create and exec names secrets by environment variable.
func TestSecretFlags(t *testing.T) {
	d := newDaemon(t)
	if out, errOut, code := d.sbx("", "create", "--secret", "API_KEY=my-api-key", "--secret", "DB=db"); code != 0 {
		t.Fatalf("create --secret = %d %q %q", code, out, errOut)
	}
	if out, errOut, code := d.sbx("", "exec", "--secret", "TOKEN=tok", id1, "--", "true"); code != 0 {
		t.Fatalf("exec --secret = %d %q %q", code, out, errOut)
	}
	d.mu.Lock()
	created, execs := d.created, d.execs
	d.mu.Unlock()
	if len(created) != 1 || len(created[0].Secrets) != 2 || created[0].Secrets["API_KEY"] != "my-api-key" || created[0].Secrets["DB"] != "db" {
		t.Errorf("create sent %+v", created)
	}
	if len(execs) != 1 || len(execs[0].Secrets) != 1 || execs[0].Secrets["TOKEN"] != "tok" {
		t.Errorf("exec sent %+v", execs)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"create", "--secret", "NOEQUALS"}, 2, `--secret "NOEQUALS": want key=value`},
		{[]string{"exec", "--secret", "=x", id1, "--", "true"}, 125, `--secret "=x": want key=value`},
		{[]string{"exec", "-t", "--secret", "A=b", id1, "--", "sh"}, 125, "-t does not take --secret"},
	} {
		if _, errOut, code := d.sbx("", tc.args...); code != tc.code || !strings.Contains(errOut, tc.stderr) {
			t.Errorf("sbx %v = %d, stderr %q; want %d, %q", tc.args, code, errOut, tc.code, tc.stderr)
		}
	}
}
