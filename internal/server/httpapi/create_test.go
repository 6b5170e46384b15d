package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
)

// The authenticated key reaches the manager in the request's context: it owns
// what it creates, and reads as the admin key it is.
func TestKeyReachesManager(t *testing.T) {
	e := newAPI(t, Options{})
	id := e.sandbox(`{}`)
	if sb, err := e.m.Get(t.Context(), sandbox.ID(id)); err != nil || sb.OwnerKey != e.key.ID {
		t.Errorf("the sandbox's owner = %q (%v), want the admin key %s", sb.OwnerKey, err, e.key.ID)
	}
	// Only the admin key reads the records of another key.
	if resp, b := e.do("GET", "/v1/audit?key_id=another", ""); resp.StatusCode != 200 {
		t.Errorf("the admin key reading another key's records = %d %s", resp.StatusCode, b)
	}
}

func TestCreateIdempotencyKey(t *testing.T) {
	e := newAPI(t, Options{})
	create := func(body, key string) (*http.Response, openapi.Sandbox, []byte) {
		t.Helper()
		resp, b := e.do("POST", "/v1/sandboxes", body, "Idempotency-Key", key)
		var sb openapi.Sandbox
		json.Unmarshal(b, &sb)
		return resp, sb, b
	}
	resp, first, b := create(`{"labels":{"a":"1"}}`, "op-1")
	if resp.StatusCode != 201 || first.ID == "" {
		t.Fatalf("first create = %d %s", resp.StatusCode, b)
	}
	resp, again, b := create(`{ "labels": {"a": "1"} }`, "op-1")
	if resp.StatusCode != 200 || again.ID != first.ID {
		t.Errorf("replay = %d %s, want 200 with %s", resp.StatusCode, b, first.ID)
	}
	if resp.Header.Get("Location") != "/v1/sandboxes/"+first.ID {
		t.Errorf("replay Location = %q", resp.Header.Get("Location"))
	}
	resp, _, b = create(`{"labels":{"a":"2"}}`, "op-1")
	if d := decodeErr(t, b); resp.StatusCode != 409 || d.Code != openapi.CodeAlreadyExists || !strings.Contains(d.Message, `"op-1"`) {
		t.Errorf("same key, another body = %d %+v; want 409 naming the key", resp.StatusCode, d)
	}
	resp, _, b = create(`{}`, "has space")
	if d := decodeErr(t, b); resp.StatusCode != 400 || !strings.Contains(d.Message, "Idempotency-Key") {
		t.Errorf("a malformed key = %d %+v; want 400 naming the header", resp.StatusCode, d)
	}
	// The header twice is refused, not half-read.
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/sandboxes", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Add("Idempotency-Key", "a")
	req.Header.Add("Idempotency-Key", "b")
	r2, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != 400 {
		t.Errorf("two Idempotency-Key headers = %d, want 400", r2.StatusCode)
	}
}

// A limit refusal is 429 with Retry-After from the manager's hint.
func TestLimitIs429(t *testing.T) {
	// One create each 1.5 s, on a clock that stands still: the second create
	// is 1.5 s early.
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	e := newAPI(t, Options{}, func(o *manager.Options) {
		o.Now = func() time.Time { return now }
		o.Limits = manager.Limits{CreateRate: 2.0 / 3, CreateBurst: 1}
	})
	e.sandbox(`{}`)
	resp, b := e.do("POST", "/v1/sandboxes", `{}`)
	d := decodeErr(t, b)
	if resp.StatusCode != 429 || d.Code != openapi.CodeResourceExhausted || !strings.Contains(d.Message, "create rate") {
		t.Errorf("create over a limit = %d %+v", resp.StatusCode, d)
	}
	if got := resp.Header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2 (1.5 s rounded up)", got)
	}
}
