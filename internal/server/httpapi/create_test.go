package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"sbx/api/openapi"
	"sbx/internal/manager"
	"sbx/internal/sandbox"
)

// The authenticated key reaches the manager in the request's context.
func TestKeyReachesManager(t *testing.T) {
	e := newAPI(t, Options{})
	if resp, b := e.do("POST", "/v1/sandboxes", `{}`); resp.StatusCode != 201 {
		t.Fatalf("create = %d %s", resp.StatusCode, b)
	}
	if len(e.f.callers) != 1 || e.f.callers[0].ID != "k1" || !e.f.callers[0].Admin {
		t.Errorf("keys the manager saw = %+v, want k1 (admin)", e.f.callers)
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
	req.Header.Set("Authorization", "Bearer "+testKey)
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
	e := newAPI(t, Options{})
	e.f.err = &manager.RetryError{After: 1500 * time.Millisecond,
		Err: fmt.Errorf("%w: key k1 is over its create rate of 1/s", sandbox.ErrLimit)}
	resp, b := e.do("POST", "/v1/sandboxes", `{}`)
	d := decodeErr(t, b)
	if resp.StatusCode != 429 || d.Code != openapi.CodeResourceExhausted || !strings.Contains(d.Message, "create rate") {
		t.Errorf("create over a limit = %d %+v", resp.StatusCode, d)
	}
	if got := resp.Header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2 (1.5 s rounded up)", got)
	}
}
