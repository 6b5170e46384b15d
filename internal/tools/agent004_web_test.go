package tools

import (
	"encoding/base64"
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"sbx.dev/sbx/internal/sandbox"
)

func TestParseHTTPAnswer(t *testing.T) {
	body := base64.StdEncoding.EncodeToString([]byte("héllo"))
	res := &sandbox.ExecResult{Stdout: []byte(`{"status": 201, "reason": "Created", "url": "http://x/", "headers": [["Content-Type", "text/plain"], ["Set-Cookie", "a=1"], ["set-cookie", "b=2"]], "body": "` + body + `", "truncated": false}`)}
	got, err := parseHTTPAnswer("http://x/", res)
	if err != nil {
		t.Fatal(err)
	}
	want := httpRequestOut{Status: 201, Reason: "Created", URL: "http://x/", Headers: map[string]string{"content-type": "text/plain", "set-cookie": "a=1, b=2"},
		Body: "héllo", BodyEncoding: "text"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v", got)
	}
	bin := base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe, 0})
	got, _ = parseHTTPAnswer("http://x/", &sandbox.ExecResult{Stdout: []byte(`{"status": 200, "headers": [], "body": "` + bin + `"}`)})
	if got.BodyEncoding != "base64" || got.Body != bin {
		t.Errorf("binary body: %+v", got)
	}
	_, err = parseHTTPAnswer("http://127.0.0.1:1/", &sandbox.ExecResult{Stdout: []byte(`{"error": "connection_refused", "message": "[Errno 111] Connection refused"}`)})
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "http://127.0.0.1:1/") {
		t.Errorf("refused: %v", err)
	}
	_, err = parseHTTPAnswer("http://x/", &sandbox.ExecResult{Stdout: []byte(`{"error": "timeout", "message": "timed out"}`)})
	if !errors.Is(err, sandbox.ErrTimeout) {
		t.Errorf("timeout: %v", err)
	}
	if got := trimPartialRune([]byte("ab\xc3")); string(got) != "ab" {
		t.Errorf("trimPartialRune = %q", got)
	}
}

func TestPageContent(t *testing.T) {
	base, _ := url.Parse("http://127.0.0.1:8000/dir/page.html")
	dom := `<html><head><title> The  Title </title><style>p{}</style></head><body>
<h1>Heading</h1><p>One <b>bold</b>word and <span>a</span> <span>b</span>.</p>
<script>var x = "not text";</script><div hidden>secret</div><div style="display: none">also hidden</div>
<ul><li><a href="other.html">Other page</a></li><li><a href="https://example.com/x?q=1">Ext</a></li><li><a href="javascript:void(0)">js</a></li></ul>
line<br>break</body></html>`
	got := pageContent(base, dom)
	if got.Title != "The  Title" {
		t.Errorf("title %q", got.Title)
	}
	if want := "Heading\nOne boldword and a b.\nOther page\nExt\njs\nline\nbreak"; got.PageText != want {
		t.Errorf("text %q\nwant %q", got.PageText, want)
	}
	wantLinks := []browserLink{{"Other page", "http://127.0.0.1:8000/dir/other.html"}, {"Ext", "https://example.com/x?q=1"}}
	if !reflect.DeepEqual(got.Links, wantLinks) {
		t.Errorf("links %+v", got.Links)
	}
}
