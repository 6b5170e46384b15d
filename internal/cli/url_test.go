package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"sbx.dev/sbx/api/openapi"
)

func TestURL(t *testing.T) {
	public := false
	var puts []bool
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != id1 {
			apiError(w, 404, "not_found", r.PathValue("id"), "preview_url "+r.PathValue("id")+": sandbox not found")
			return
		}
		json.NewEncoder(w).Encode(openapi.PreviewURL{Port: 8000, URL: "http://8000-" + id1 + ".localhost:7070/",
			PathURL: "http://127.0.0.1:7070/v1/sandboxes/" + id1 + "/proxy/8000/", Token: "to+ken", Public: public})
	}
	mux.HandleFunc("GET /v1/sandboxes/{id}/ports/8000/url", answer)
	mux.HandleFunc("PUT /v1/sandboxes/{id}/ports/8000", func(w http.ResponseWriter, r *http.Request) {
		var in openapi.PortUpdate
		if json.NewDecoder(r.Body).Decode(&in) != nil || in.Public == nil {
			apiError(w, 400, "invalid_argument", id1, "bad body")
			return
		}
		public = *in.Public
		puts = append(puts, public)
		answer(w, r)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	sbx := func(args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, euid: 1000,
			getenv: func(k string) string {
				return map[string]string{"SBX_URL": srv.URL, "SBX_API_KEY": "key", "HOME": "/nonexistent"}[k]
			}}
		code := e.run(context.Background(), args)
		return out.String(), errOut.String(), code
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"url", id1, "8000"}, 0, "http://8000-" + id1 + ".localhost:7070/?sbx_token=to%2Bken\n", ""},
		{[]string{"url", "--path", id1, "8000"}, 0, "http://127.0.0.1:7070/v1/sandboxes/" + id1 + "/proxy/8000/?sbx_token=to%2Bken\n", ""},
		{[]string{"url", id1, "8000", "--public"}, 0, "http://8000-" + id1 + ".localhost:7070/\n", ""},
		{[]string{"url", "--json", id1, "8000"}, 0, `"public":true`, ""},
		{[]string{"url", "--private", id1, "8000"}, 0, "?sbx_token=", ""},
		{[]string{"url", id2, "8000"}, 1, "", "sbx url: preview_url " + id2 + ": sandbox not found"},
		{[]string{"url", id1}, 2, "", "want a sandbox ID and a port"},
		{[]string{"url", id1, "http"}, 2, "", `port "http" is not a number`},
		{[]string{"url", id1, "70000"}, 2, "", "in [1, 65535]"},
		{[]string{"url", "--public", "--private", id1, "8000"}, 2, "", "exclude each other"},
	} {
		out, errOut, code := sbx(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) || (tc.stdout != "" && tc.stdout[len(tc.stdout)-1] == '\n' && out != tc.stdout) {
			t.Errorf("sbx %v = %d, stdout %q, stderr %q; want %d, %q, %q", tc.args, code, out, errOut, tc.code, tc.stdout, tc.stderr)
		}
	}
	if len(puts) != 2 || !puts[0] || puts[1] {
		t.Errorf("PUTs = %v, want public then private", puts)
	}
}
