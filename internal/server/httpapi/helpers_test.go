package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/backend/fake"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/manager/managertest"
	"sbx.dev/sbx/internal/store"
	"sbx.dev/sbx/internal/testutil"
)

// apiEnv is the API over a real manager, whose store is a file in a temporary
// directory and whose one backend is the fake driver, served on an httptest
// server.
type apiEnv struct {
	t     *testing.T
	s     *server
	srv   *httptest.Server
	m     *manager.Manager
	st    *store.Store
	d     *fake.Driver
	key   manager.Key // the admin key, as the manager authenticates it
	token string      // its secret, which do sends
}

// newAPI starts an apiEnv with opts; tweak, when given, changes the manager's
// options before it starts.
func newAPI(t *testing.T, opts Options, tweak ...func(*manager.Options)) *apiEnv {
	t.Helper()
	ctx := t.Context()
	me := managertest.New(t, func(o *manager.Options, _ *fake.Driver) {
		for _, f := range tweak {
			f(o)
		}
	})
	m, st, d, token := me.M, me.Store, me.Driver, me.AdminToken
	key, err := m.Authenticate(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Log == nil {
		opts.Log = testutil.Logger(t)
	}
	s := newServer(m, opts)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return &apiEnv{t: t, s: s, srv: srv, m: m, st: st, d: d, key: key, token: token}
}

// newKey creates an API key named name and returns its secret and identity.
func (e *apiEnv) newKey(name string) (string, manager.Key) {
	e.t.Helper()
	token, _, err := e.st.CreateKey(e.t.Context(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	k, err := e.m.Authenticate(e.t.Context(), token)
	if err != nil {
		e.t.Fatal(err)
	}
	return token, k
}

// do sends one request with the admin key (hdr may replace it) and returns the
// response with its body read; body may be empty.
func (e *apiEnv) do(method, path string, body string, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// sandbox creates a sandbox through the API from the JSON body and returns its id.
func (e *apiEnv) sandbox(body string) string {
	e.t.Helper()
	resp, b := e.do("POST", "/v1/sandboxes", body)
	var sb openapi.Sandbox
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &sb) != nil {
		e.t.Fatalf("create %s = %d %s", body, resp.StatusCode, b)
	}
	return sb.ID
}

func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func contextWithRequestID(r *http.Request, id string) context.Context {
	return context.WithValue(r.Context(), requestIDKey{}, id)
}
