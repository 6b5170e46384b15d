package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/fake"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/secrets"
	"sbx.dev/sbx/internal/testutil"
)

// secretsAPI is the API over a real manager with a secret store and a fake
// egress proxy; every response body and log line goes through it, so a
// test can search them all for a value.
type secretsAPI struct {
	*apiEnv
	d      *envFake
	proxy  *placeholders
	logs   *testutil.SyncBuffer
	bodies [][]byte
}

// envFake is the fake driver that keeps the environment each sandbox got.
type envFake struct {
	*fake.Driver
	mu   sync.Mutex
	envs map[sandbox.ID]map[string]string
}

func (d *envFake) Start(ctx context.Context, spec sandbox.Spec) (*backend.Instance, error) {
	d.mu.Lock()
	d.envs[spec.ID] = maps.Clone(spec.Env)
	d.mu.Unlock()
	return d.Driver.Start(ctx, spec)
}

func (d *envFake) env(id string) map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.envs[sandbox.ID(id)]
}

// placeholders is a stand-in for the egress proxy's side of proxy-mode
// secrets.
type placeholders struct {
	mu        sync.Mutex
	n         int
	forgotten []sandbox.ID
}

func (p *placeholders) Placeholder(id sandbox.ID, secret string, value []byte, hosts []string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	return fmt.Sprintf("sbx-placeholder-%d", p.n), nil
}

func (p *placeholders) Restore(sandbox.ID, string, string, []byte, []string) error { return nil }

func (p *placeholders) ForgetSecrets(id sandbox.ID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forgotten = append(p.forgotten, id)
}

func newSecretsAPI(t *testing.T) *secretsAPI {
	t.Helper()
	box, err := secrets.NewBox(bytes.Repeat([]byte{5}, secrets.KeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	s := &secretsAPI{proxy: &placeholders{}, logs: &testutil.SyncBuffer{}}
	log := slogTo(s.logs)
	s.apiEnv = newAPI(t, Options{Log: log}, func(o *manager.Options) {
		s.d = &envFake{Driver: o.Drivers[0].Driver.(*fake.Driver), envs: map[sandbox.ID]map[string]string{}}
		o.Drivers[0].Driver = s.d
		o.SecretBox = box
		o.ProxySecrets = s.proxy
		o.Log = log
		o.Policy.Networks = []sandbox.Network{sandbox.NetworkNone, sandbox.NetworkAllowlist, sandbox.NetworkFull}
	})
	return s
}

// call sends one request as token and keeps the response's body.
func (s *secretsAPI) call(token, method, path, body string) (int, []byte) {
	s.t.Helper()
	resp, b := s.do(method, path, body, "Authorization", "Bearer "+token)
	s.bodies = append(s.bodies, b)
	return resp.StatusCode, b
}

// requestIDs match the X-Request-Id a body may carry, which differs per request.
var requestIDs = regexp.MustCompile(`"request_id":"[^"]*"`)

func TestSecretRoutes(t *testing.T) {
	e := newSecretsAPI(t)
	const value = "tok-value-91b3e0"
	code, b := e.call(e.token, "POST", "/v1/secrets", `{"name":"api","value":"`+value+`","mode":"proxy","hosts":["API.example.com","*.example.org"]}`)
	var info openapi.SecretInfo
	if code != http.StatusCreated || json.Unmarshal(b, &info) != nil || info.Name != "api" || info.Mode != "proxy" ||
		strings.Join(info.Hosts, ",") != "api.example.com,*.example.org" || info.CreatedAt.IsZero() || !info.UpdatedAt.Equal(info.CreatedAt) {
		t.Fatalf("POST /v1/secrets = %d %s", code, b)
	}
	var raw map[string]any
	json.Unmarshal(b, &raw)
	if len(raw) != 5 {
		t.Errorf("the answer has fields %v, want name, mode, hosts, created_at, updated_at only", raw)
	}
	// The same name again replaces it: 200, created_at kept.
	code, b = e.call(e.token, "POST", "/v1/secrets", `{"name":"api","value":"`+value+`-2"}`)
	var again openapi.SecretInfo
	if code != http.StatusOK || json.Unmarshal(b, &again) != nil || again.Mode != "env" || len(again.Hosts) != 0 || !again.CreatedAt.Equal(info.CreatedAt) {
		t.Errorf("POST again = %d %s; want 200, env mode by default, created_at kept", code, b)
	}
	e.call(e.token, "POST", "/v1/secrets", `{"name":"db","value":"db-value-44","mode":"env"}`)
	code, b = e.call(e.token, "GET", "/v1/secrets", "")
	var list openapi.SecretList
	if code != 200 || json.Unmarshal(b, &list) != nil || len(list.Secrets) != 2 || list.Secrets[0].Name != "api" || list.Secrets[1].Name != "db" {
		t.Errorf("GET /v1/secrets = %d %s", code, b)
	}
	if code, b = e.call(e.token, "GET", "/v1/secrets/db", ""); code != 200 || !strings.Contains(string(b), `"name":"db","mode":"env","hosts":[]`) {
		t.Errorf("GET /v1/secrets/db = %d %s", code, b)
	}
	if code, b = e.call(e.token, "DELETE", "/v1/secrets/db", ""); code != http.StatusNoContent {
		t.Errorf("DELETE = %d %s", code, b)
	}
	for _, method := range []string{"GET", "DELETE"} {
		code, b = e.call(e.token, method, "/v1/secrets/db", "")
		if d := decodeErr(t, b); code != 404 || d.Code != openapi.CodeNotFound || d.Message != `get_secret: secret "db" not found` && d.Message != `delete_secret: secret "db" not found` {
			t.Errorf("%s of a deleted secret = %d %+v", method, code, d)
		}
	}

	// Bad input: each error names its field, and never holds the value.
	for _, tc := range []struct{ body, want string }{
		{`{"name":"x","value":""}`, "value: empty"},
		{`{"name":"x","value":"v","mode":"proxy"}`, "hosts: proxy mode needs at least one host"},
		{`{"name":"x","value":"v","mode":"env","hosts":["a.com"]}`, "hosts: env mode takes no hosts"},
		{`{"name":"a/b","value":"v"}`, "name: "},
		{`{"name":"","value":"v"}`, "name: empty"},
		{`{"name":"x","value":"v","mode":"all"}`, "mode: "},
		{`{"name":"x","value":"v","mode":"proxy","hosts":["10.1.2.3"]}`, "hosts[0]: "},
		{`{"name":"x","value":"seekrit-injection\r\nX: 1","mode":"proxy","hosts":["a.com"]}`, "value: contains CR or LF"},
		{`{"name":"x","value":5}`, "value"},
	} {
		code, b := e.call(e.token, "POST", "/v1/secrets", tc.body)
		if d := decodeErr(t, b); code != 400 || d.Code != openapi.CodeInvalidArgument || !strings.Contains(d.Message, tc.want) {
			t.Errorf("POST %s = %d %+v, want 400 %q", tc.body, code, d, tc.want)
		}
		if strings.Contains(string(b), "seekrit") {
			t.Errorf("POST %s: the error holds the value: %s", tc.body, b)
		}
	}
	if big := strings.Repeat("v", secrets.MaxValueBytes+1); true {
		code, b := e.call(e.token, "POST", "/v1/secrets", `{"name":"big","value":"`+big+`"}`)
		if code != 400 || !strings.Contains(string(b), "value: 65537 bytes, at most 65536") {
			t.Errorf("POST a value over 64 KiB = %d %.200s", code, b)
		}
	}

	// Another key: A's secret looks to it exactly as an unknown name.
	tokenB, _ := e.newKey("tenant-b")
	ghost := func() [][]byte {
		var out [][]byte
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v1/secrets/api", ""},
			{"DELETE", "/v1/secrets/api", ""},
			{"POST", "/v1/sandboxes", `{"secrets":{"K":"api"}}`},
		} {
			_, b := e.call(tokenB, c.method, c.path, c.body)
			out = append(out, requestIDs.ReplaceAll(b, nil))
		}
		return out
	}
	withA := ghost()
	code, _ = e.call(e.token, "DELETE", "/v1/secrets/api", "")
	withoutA := ghost()
	if code != 204 {
		t.Fatalf("DELETE A's secret = %d", code)
	}
	for i := range withA {
		if !bytes.Equal(withA[i], withoutA[i]) {
			t.Errorf("key B sees A's secret differently from an unknown name:\n%s\n%s", withA[i], withoutA[i])
		}
	}
	if !bytes.Contains(withA[0], []byte(`"code":"not_found"`)) || !bytes.Contains(withA[2], []byte(`no secret named \"api\"`)) {
		t.Errorf("key B's answers: %s", bytes.Join(withA, []byte("\n")))
	}
	if code, b := e.call(tokenB, "GET", "/v1/secrets", ""); code != 200 || string(b) != "{\"secrets\":[]}\n" {
		t.Errorf("key B's list = %d %s", code, b)
	}

	e.noValue(t, value, "db-value-44")
}

// Secrets named on create, exec and sandbox.exec reach the sandbox's
// processes; an unknown name is a 400 naming it, and nothing starts.
func TestSecretUse(t *testing.T) {
	e := newSecretsAPI(t)
	const (
		envValue   = "env-value-0d9c"
		proxyValue = "proxy-value-8e21"
		plain      = "plain-marker-5f"
	)
	for _, body := range []string{
		`{"name":"tok","value":"` + envValue + `"}`,
		`{"name":"gh","value":"` + proxyValue + `","mode":"proxy","hosts":["api.github.com"]}`,
	} {
		if code, b := e.call(e.token, "POST", "/v1/secrets", body); code != 201 {
			t.Fatalf("POST /v1/secrets = %d %s", code, b)
		}
	}

	// An unknown name: 400 naming it, no sandbox.
	code, b := e.call(e.token, "POST", "/v1/sandboxes", `{"secrets":{"TOKEN":"tok","X":"nope"}}`)
	if d := decodeErr(t, b); code != 400 || !strings.Contains(d.Message, `X: no secret named \"nope\"`) && !strings.Contains(d.Message, `X: no secret named "nope"`) {
		t.Errorf("create with an unknown secret = %d %+v", code, d)
	}
	if e.d.Called("Start", "") != 0 {
		t.Errorf("a sandbox started for a refused create")
	}
	// A proxy-mode secret on tier none: 400 naming the tier.
	code, b = e.call(e.token, "POST", "/v1/sandboxes", `{"secrets":{"GH":"gh"}}`)
	if d := decodeErr(t, b); code != 400 || !strings.Contains(d.Message, "network is none") {
		t.Errorf("create with a proxy secret on tier none = %d %+v", code, d)
	}

	code, b = e.call(e.token, "POST", "/v1/sandboxes", `{"network":"full","env":{"PLAIN":"`+plain+`"},"secrets":{"TOKEN":"tok","GH":"gh"}}`)
	var sb openapi.Sandbox
	if code != 201 || json.Unmarshal(b, &sb) != nil {
		t.Fatalf("create with secrets = %d %s", code, b)
	}
	got := e.d.env(sb.ID)
	if got["TOKEN"] != envValue || got["GH"] != "sbx-placeholder-1" || got["PLAIN"] != plain {
		t.Errorf("the sandbox's env: TOKEN is the value %v, GH the placeholder %v, PLAIN %v",
			got["TOKEN"] == envValue, got["GH"] == "sbx-placeholder-1", got["PLAIN"] == plain)
	}
	if code, b = e.call(e.token, "GET", "/v1/sandboxes/"+sb.ID, ""); code != 200 || bytes.Contains(b, []byte(plain)) {
		t.Errorf("GET the sandbox = %d; it echoes its environment: %v", code, bytes.Contains(b, []byte(plain)))
	}

	// Exec: an unknown name runs nothing; a known one runs.
	e.d.Script("true", fake.Run{})
	code, b = e.call(e.token, "POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"command":"true","secrets":{"T":"missing"}}`)
	if d := decodeErr(t, b); code != 400 || !strings.Contains(d.Message, `no secret named "missing"`) || d.SandboxID != sb.ID {
		t.Errorf("exec with an unknown secret = %d %+v", code, d)
	}
	if n := e.d.Called("Exec", sandbox.ID(sb.ID)); n != 0 {
		t.Errorf("a refused exec ran %d processes", n)
	}
	if code, b = e.call(e.token, "POST", "/v1/sandboxes/"+sb.ID+"/exec", `{"command":"true","secrets":{"T":"tok","G":"gh"}}`); code != 200 {
		t.Errorf("exec with secrets = %d %s", code, b)
	}
	// sandbox.exec: a {{secret:name}} handle names a secret; an unknown one is
	// a 400 naming it; a plain value works as it always did.
	code, b = e.call(e.token, "POST", "/v1/sandboxes/"+sb.ID+"/tools/sandbox.exec", `{"runtime":"sh","code":"true","secrets":{"K":"{{secret:my-api-key}}"}}`)
	if d := decodeErr(t, b); code != 400 || !strings.Contains(d.Message, `K: no secret named "my-api-key"`) {
		t.Errorf("sandbox.exec with an unknown handle = %d %+v", code, d)
	}
	if n := e.d.Called("Exec", sandbox.ID(sb.ID)); n != 1 {
		t.Errorf("the agent ran %d processes, want the one exec's", n)
	}
	for _, secretsArg := range []string{`{"K":"{{secret:tok}}"}`, `{"K":"{{ secret:gh }}","P":"` + plain + `"}`} {
		code, b = e.call(e.token, "POST", "/v1/sandboxes/"+sb.ID+"/tools/sandbox.exec", `{"runtime":"sh","code":"true","secrets":`+secretsArg+`}`)
		if code != 200 || !strings.Contains(string(b), `"exit_code":0`) {
			t.Errorf("sandbox.exec with secrets %s = %d %s", secretsArg, code, b)
		}
	}
	// The sandbox's end drops what the proxy holds for it.
	if code, _ = e.call(e.token, "DELETE", "/v1/sandboxes/"+sb.ID, ""); code != 204 {
		t.Fatalf("DELETE = %d", code)
	}
	e.proxy.mu.Lock()
	forgotten := e.proxy.forgotten
	e.proxy.mu.Unlock()
	if len(forgotten) != 1 || string(forgotten[0]) != sb.ID {
		t.Errorf("ForgetSecrets calls = %v, want [%s]", forgotten, sb.ID)
	}

	// The audit records name the secrets.
	code, b = e.call(e.token, "GET", "/v1/audit?limit=1000", "")
	for _, want := range []string{`"action":"set_secret","target":"tok"`, `"detail":"secrets=gh,tok"`, `"detail":"secrets=nope,tok"`} {
		if code != 200 || !strings.Contains(string(b), want) {
			t.Errorf("the audit log lacks %s", want)
		}
	}
	e.noValue(t, envValue, proxyValue)
}

// noValue fails t when a response body of the test or a log line holds one
// of values.
func (s *secretsAPI) noValue(t *testing.T, values ...string) {
	t.Helper()
	s.call(s.token, "GET", "/v1/audit?limit=1000", "")
	logs := s.logs.String()
	if !strings.Contains(logs, "audit") {
		t.Errorf("control: the log holds no audit line")
	}
	for _, v := range values {
		if strings.Contains(logs, v) {
			t.Errorf("the log holds a secret's value")
		}
		for _, b := range s.bodies {
			if bytes.Contains(b, []byte(v)) {
				t.Errorf("a response holds a secret's value: %.300s", b)
			}
		}
	}
}
