package fakenet

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// waitFor returns the first event match accepts, failing t with the log if none
// arrives in 10 s (servers log asynchronously to their clients).
func waitFor(t *testing.T, n *Internet, what string, match func(Event) bool) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := n.Wait(ctx, match)
	if err != nil {
		t.Fatalf("%s: %v\n%s", what, err, dump(n))
	}
	return e
}

func dump(n *Internet) string {
	var b strings.Builder
	b.WriteString("the fake internet's log:\n")
	for _, e := range n.Log() {
		b.WriteString("  " + e.String() + "\n")
	}
	return b.String()
}

// get fetches url with c and returns the status and body.
func get(t *testing.T, c *http.Client, method, url string, body io.Reader, header http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return resp, string(b)
}
