package client

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/sandbox"
)

// Each secret call is its route, with the body and answer of the contract:
// 201 is a new secret, 200 a replaced one, and errors decode to classes.
func TestSecretCalls(t *testing.T) {
	var got []string
	var sent openapi.SecretCreate
	exists := false
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.EscapedPath())
		info := openapi.SecretInfo{Name: "a.b-c", Mode: "env", Hosts: []string{}}
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/secrets":
			b, _ := io.ReadAll(r.Body)
			json.Unmarshal(b, &sent)
			if exists {
				w.WriteHeader(200)
			} else {
				w.WriteHeader(201)
			}
			exists = true
			json.NewEncoder(w).Encode(info)
		case r.Method == "GET" && r.URL.Path == "/v1/secrets":
			json.NewEncoder(w).Encode(openapi.SecretList{Secrets: []openapi.SecretInfo{info}})
		case r.Method == "GET":
			json.NewEncoder(w).Encode(info)
		case r.Method == "DELETE":
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"code":"not_found","message":"delete_secret: secret \"x y\" not found","op":"delete_secret"}}`)
		}
	})
	ctx := t.Context()
	req := openapi.SecretCreate{Name: "a.b-c", Value: "v", Mode: "proxy", Hosts: []string{"example.com"}}
	for _, want := range []bool{false, true} {
		info, replaced, err := c.SetSecret(ctx, req)
		if err != nil || replaced != want || info.Name != "a.b-c" {
			t.Errorf("SetSecret = %+v, %v, %v; want replaced %v", info, replaced, err, want)
		}
	}
	if sent.Name != req.Name || sent.Value != "v" || sent.Mode != "proxy" || len(sent.Hosts) != 1 {
		t.Errorf("the daemon got %+v", sent)
	}
	if l, err := c.Secrets(ctx); err != nil || len(l) != 1 {
		t.Errorf("Secrets = %+v, %v", l, err)
	}
	if s, err := c.Secret(ctx, "a.b-c"); err != nil || s.Name != "a.b-c" {
		t.Errorf("Secret = %+v, %v", s, err)
	}
	err := c.DeleteSecret(ctx, "x y")
	if !errors.Is(err, sandbox.ErrNotFound) || err.Error() != `delete_secret: secret "x y" not found` {
		t.Errorf("DeleteSecret = %v, want not found", err)
	}
	want := []string{"POST /v1/secrets", "POST /v1/secrets", "GET /v1/secrets", "GET /v1/secrets/a.b-c", "DELETE /v1/secrets/x%20y"}
	if len(got) != len(want) {
		t.Fatalf("requests = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d = %q, want %q", i, got[i], want[i])
		}
	}
}
