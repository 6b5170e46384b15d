package fullduplex_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"sbx.dev/sbx/internal/fullduplex"
	"sbx.dev/sbx/internal/testutil"
)

// proxy forwards every request to upstream through fullduplex.Serve, as
// sbx's proxies do (httputil.ReverseProxy, answers flushed as they come).
func proxy(t *testing.T, upstream string) *httptest.Server {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:     tr,
		FlushInterval: -1,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fullduplex.Serve(rp, w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestServeFullDuplex(t *testing.T) {
	up := httptest.NewServer(testutil.EarlyAnswer())
	defer up.Close()
	p := proxy(t, up.URL)
	req, err := http.NewRequest("POST", p.URL+"/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	testutil.CheckFullDuplex(t, p.Client(), req)
}

// TestServeUnreadBody: requests with bodies the upstream never got (it
// refused the connection) are answered one after another on one kept
// connection, and the server's goroutine does not panic reading the next
// request (golang/go#68560; the client's transport would retry such a
// request on a new connection, so the server's log is what shows it).
func TestServeUnreadBody(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	addr := up.URL
	up.Close() // refused from now on
	p := proxy(t, addr)
	var logged testutil.SyncBuffer
	p.Config.ErrorLog = log.New(&logged, "", 0)
	c := p.Client()
	for i := range 3 {
		resp, err := c.Post(p.URL+"/x", "application/json", strings.NewReader(`{"n":1}`))
		if err != nil {
			t.Fatalf("request %d: %v (server log: %s)", i, err, logged.String())
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("request %d: %d, want 502", i, resp.StatusCode)
		}
	}
	if s := logged.String(); s != "" {
		t.Errorf("the server logged: %s", s)
	}
}
