// This file holds seed 004's web tools: http_request (python3's urllib in
// the sandbox) and browser_open (headless Chromium in the sandbox). Both
// reach the network from inside the sandbox, so its network policy applies;
// the daemon never makes the request.

package tools

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"sbx.dev/sbx/internal/sandbox"
)

// ---- http_request ----

// Bounds of http_request.
const (
	httpBodyMax    = 1 << 20 // bytes of a response body returned
	httpReqBodyMax = 8 << 20
)

type httpRequestIn struct {
	URL             string            `json:"url"`
	Method          string            `json:"method"`
	Headers         map[string]string `json:"headers"`
	Body            *string           `json:"body"`
	Timeout         *int              `json:"timeout"`
	FollowRedirects *bool             `json:"follow_redirects"`
}

type httpRequestOut struct {
	Status        int               `json:"status"`
	Reason        string            `json:"reason"`
	URL           string            `json:"url"`
	Headers       map[string]string `json:"headers"`
	Body          string            `json:"body"`
	BodyEncoding  string            `json:"body_encoding"`
	BodyTruncated bool              `json:"body_truncated"`
}

func (o httpRequestOut) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d %s\n", o.Status, o.Reason)
	for _, k := range slices.Sorted(mapsKeys(o.Headers)) {
		fmt.Fprintf(&b, "%s: %s\n", k, o.Headers[k])
	}
	b.WriteString("\n")
	if o.BodyEncoding == "base64" {
		fmt.Fprintf(&b, "[binary body, %d bytes of base64]\n", len(o.Body))
	} else {
		b.WriteString(o.Body)
	}
	if o.BodyTruncated {
		fmt.Fprintf(&b, "\n[body truncated at %d bytes]", httpBodyMax)
	}
	return b.String()
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// httpScript is the program python3 runs in the sandbox: the request comes
// as JSON on stdin, the answer goes as JSON to stdout — {"status", "reason",
// "url", "headers" (pairs), "body" (base64), "truncated"} or {"error",
// "message"}. An HTTP error status is an answer, not an error.
const httpScript = `
import base64, errno, json, socket, ssl, sys, urllib.error, urllib.request
spec = json.load(sys.stdin)
def emit(o):
    sys.stdout.write(json.dumps(o))
    sys.exit(0)
def kind(r):
    if isinstance(r, (socket.timeout, TimeoutError)): return "timeout"
    if isinstance(r, ConnectionRefusedError): return "connection_refused"
    if isinstance(r, socket.gaierror): return "dns"
    if isinstance(r, ssl.SSLError): return "tls"
    if isinstance(r, OSError) and r.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH): return "unreachable"
    return "connection_failed"
class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k): return None
data = None if spec["body"] is None else spec["body"].encode()
req = urllib.request.Request(spec["url"], data=data, method=spec["method"])
for k, v in spec["headers"]:
    req.add_header(k, v)
opener = urllib.request.build_opener(*([] if spec["follow"] else [NoRedirect()]))
try:
    resp = opener.open(req, timeout=spec["timeout"])
except urllib.error.HTTPError as e:
    resp = e
except urllib.error.URLError as e:
    emit({"error": kind(e.reason), "message": str(e.reason)})
except Exception as e:
    emit({"error": kind(e), "message": "%s: %s" % (type(e).__name__, e)})
try:
    body = resp.read(spec["limit"] + 1)
except Exception as e:
    emit({"error": kind(e), "message": "reading the body: %s: %s" % (type(e).__name__, e)})
emit({"status": resp.status if hasattr(resp, "status") and resp.status else resp.code,
      "reason": str(resp.reason or ""), "url": resp.geturl(),
      "headers": [[k, v] for k, v in resp.headers.items()],
      "body": base64.b64encode(body[:spec["limit"]]).decode(), "truncated": len(body) > spec["limit"]})
`

var (
	httpToken  = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	httpMethod = regexp.MustCompile(`^[A-Z]+$`)
)

func httpRequestTool() *Tool {
	return define(Tool{
		Name:  "http_request",
		Title: "Make an HTTP request",
		Description: "Make an HTTP or HTTPS request from inside the sandbox (python3's urllib, so the sandbox's network " +
			"policy applies: a sandbox without network reaches only its own loopback, e.g. a server you started " +
			"in it on 127.0.0.1). method defaults to GET, or POST when a body is given; headers is an object of " +
			"header names to values; body is sent as UTF-8 text (set Content-Type yourself, e.g. " +
			"application/json). Redirects are followed unless follow_redirects is false. timeout is in seconds " +
			"for connecting and for each read, 1–300, default 30. Returns status, reason, url (after redirects), " +
			"headers (lower-case names; repeated headers joined with \", \"), and body: text when it is UTF-8, " +
			"else base64 (body_encoding says which), cut at 1 MiB (body_truncated). A 4xx or 5xx status is a " +
			"result, not an error; failing to connect (refused, DNS, unreachable, TLS) or timing out is an error " +
			"saying which. Variables persisted with env_set (e.g. https_proxy) apply.",
		Capability: CapWeb,
		Input: json.RawMessage(`{
  "type": "object",
  "required": ["url"],
  "properties": {
    "url": {"type": "string", "description": "http:// or https:// URL, e.g. \"http://127.0.0.1:8000/api\"."},
    "method": {"type": "string", "description": "HTTP method, e.g. GET, POST, PUT, DELETE, HEAD. Default GET, or POST with a body."},
    "headers": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Request headers, e.g. {\"Authorization\": \"Bearer …\"}."},
    "body": {"type": "string", "description": "Request body (UTF-8 text, at most 8 MiB)."},
    "timeout": {"type": "integer", "minimum": 1, "maximum": 300, "default": 30, "description": "Seconds to wait to connect and for each read (1–300, default 30)."},
    "follow_redirects": {"type": "boolean", "default": true, "description": "Follow 3xx redirects. Default true."}
  },
  "additionalProperties": false
}`),
		Output: json.RawMessage(`{
  "type": "object",
  "required": ["status", "reason", "url", "headers", "body", "body_encoding", "body_truncated"],
  "properties": {
    "status": {"type": "integer", "description": "HTTP status code."},
    "reason": {"type": "string", "description": "The status line's reason phrase."},
    "url": {"type": "string", "description": "The URL answered, after redirects."},
    "headers": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Response headers, names in lower case."},
    "body": {"type": "string"},
    "body_encoding": {"type": "string", "enum": ["text", "base64"]},
    "body_truncated": {"type": "boolean", "description": "The body was longer than 1 MiB and was cut."}
  }
}`),
	}, runHTTPRequest)
}

// webURL checks a URL argument: absolute, with one of schemes.
func webURL(field, raw string, schemes ...string) (*url.URL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, sandbox.Invalid(field, "is empty")
	}
	if strings.ContainsAny(raw, "\x00\r\n\t ") {
		return nil, sandbox.Invalid(field, "%q contains whitespace or a control character", truncate(raw, 200))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, sandbox.Invalid(field, "%q is not a URL: %v", truncate(raw, 200), err)
	}
	if !slices.Contains(schemes, strings.ToLower(u.Scheme)) {
		return nil, sandbox.Invalid(field, "%q: the scheme must be one of %s", truncate(raw, 200), strings.Join(schemes, ", "))
	}
	if u.Scheme != "file" && u.Host == "" {
		return nil, sandbox.Invalid(field, "%q has no host", truncate(raw, 200))
	}
	return u, nil
}

func runHTTPRequest(ctx context.Context, c *Call, in httpRequestIn) (httpRequestOut, error) {
	if _, err := webURL("url", in.URL, "http", "https"); err != nil {
		return httpRequestOut{}, err
	}
	method := strings.ToUpper(in.Method)
	if method == "" {
		method = "GET"
		if in.Body != nil {
			method = "POST"
		}
	}
	if !httpMethod.MatchString(method) || len(method) > 20 {
		return httpRequestOut{}, sandbox.Invalid("method", "%q is not an HTTP method", truncate(in.Method, 40))
	}
	headers := [][2]string{}
	for _, k := range slices.Sorted(mapsKeys(in.Headers)) {
		v := in.Headers[k]
		if !httpToken.MatchString(k) {
			return httpRequestOut{}, sandbox.Invalid("headers", "%q is not a header name", truncate(k, 80))
		}
		if strings.ContainsAny(v, "\x00\r\n") {
			return httpRequestOut{}, sandbox.Invalid("headers", "the value of %s contains a line break or NUL", k)
		}
		headers = append(headers, [2]string{k, v})
	}
	if in.Body != nil && len(*in.Body) > httpReqBodyMax {
		return httpRequestOut{}, sandbox.Invalid("body", "is %d bytes, more than %d", len(*in.Body), httpReqBodyMax)
	}
	timeout, err := seconds("timeout", in.Timeout, 30, 1, 300)
	if err != nil {
		return httpRequestOut{}, err
	}
	spec, err := json.Marshal(map[string]any{"url": in.URL, "method": method, "headers": headers, "body": in.Body,
		"timeout": timeout.Seconds(), "follow": in.FollowRedirects == nil || *in.FollowRedirects, "limit": httpBodyMax})
	if err != nil {
		return httpRequestOut{}, err
	}
	// Connecting, and each read, may take the timeout; the body's reads
	// together are bounded here.
	res, err := c.run(ctx, command{argv: []string{"python3", "-I", "-c", httpScript}, stdin: spec, timeout: 3*timeout + 10*time.Second,
		output: 4 << 20})
	if errors.Is(err, errNotInstalled) {
		return httpRequestOut{}, notInstalled("http_request needs python3 in the sandbox, and this sandbox's template has none")
	}
	if err != nil {
		return httpRequestOut{}, err
	}
	if res.Reason == sandbox.ReasonTimeout {
		return httpRequestOut{}, fmt.Errorf("%w: the request to %s took longer than %s", sandbox.ErrTimeout, in.URL, 3*timeout+10*time.Second)
	}
	return parseHTTPAnswer(in.URL, res)
}

// parseHTTPAnswer reads httpScript's answer.
func parseHTTPAnswer(target string, res *sandbox.ExecResult) (httpRequestOut, error) {
	var a struct {
		Error     string      `json:"error"`
		Message   string      `json:"message"`
		Status    int         `json:"status"`
		Reason    string      `json:"reason"`
		URL       string      `json:"url"`
		Headers   [][2]string `json:"headers"`
		Body      string      `json:"body"`
		Truncated bool        `json:"truncated"`
	}
	if res.ExitCode != 0 || json.Unmarshal(res.Stdout, &a) != nil {
		return httpRequestOut{}, fmt.Errorf("%w: the request's program failed in the sandbox (exit code %d): %s", sandbox.ErrWrongState, res.ExitCode, outputTail(res, 2000))
	}
	if a.Error != "" {
		class, what := sandbox.ErrUnavailable, map[string]string{
			"connection_refused": "connection refused", "dns": "the host name did not resolve",
			"unreachable": "the network is unreachable", "tls": "the TLS handshake failed",
			"connection_failed": "the connection failed", "timeout": "timed out",
		}[a.Error]
		if a.Error == "timeout" {
			class = sandbox.ErrTimeout
		}
		return httpRequestOut{}, fmt.Errorf("%w: request to %s failed: %s (%s)", class, target, cmpOr(what, a.Error), a.Message)
	}
	body, err := base64.StdEncoding.DecodeString(a.Body)
	if err != nil {
		return httpRequestOut{}, fmt.Errorf("%w: the request's program returned a body that is not base64: %v", sandbox.ErrWrongState, err)
	}
	out := httpRequestOut{Status: a.Status, Reason: a.Reason, URL: a.URL, Headers: map[string]string{}, BodyEncoding: "text", BodyTruncated: a.Truncated}
	for _, h := range a.Headers {
		k := strings.ToLower(h[0])
		if prev, ok := out.Headers[k]; ok {
			out.Headers[k] = prev + ", " + h[1]
		} else {
			out.Headers[k] = h[1]
		}
	}
	switch {
	case utf8.Valid(body):
		out.Body = string(body)
	case a.Truncated && utf8.Valid(trimPartialRune(body)):
		out.Body = string(trimPartialRune(body)) // cut inside a character
	default:
		out.Body, out.BodyEncoding = a.Body, "base64"
	}
	return out, nil
}

// trimPartialRune drops an incomplete UTF-8 sequence at b's end.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

// ---- browser_open ----

// browsers are the names a Chromium is looked up by on the sandbox's PATH,
// in this order.
var browsers = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chromium-headless-shell", "headless_shell"}

// findBrowser is the program that prints the first of its arguments found
// on PATH; the names come as arguments, never in the script's text.
const findBrowser = `for b in "$@"; do command -v "$b" && exit 0; done; exit 3`

// Bounds of browser_open.
const (
	browserTextMax  = 100 << 10
	browserLinksMax = 200
	browserTimeout  = 90 * time.Second
)

type browserOpenIn struct {
	URL            string `json:"url"`
	WaitMS         *int   `json:"wait_ms"`
	ScreenshotPath string `json:"screenshot_path"`
}

type browserLink struct {
	Text string `json:"text"`
	URL  string `json:"url"`
}

type browserOpenOut struct {
	URL            string        `json:"url"`
	Title          string        `json:"title"`
	PageText       string        `json:"text"`
	TextTruncated  bool          `json:"text_truncated"`
	Links          []browserLink `json:"links"`
	Screenshot     string        `json:"screenshot,omitempty"`
	ScreenshotSize int64         `json:"screenshot_bytes,omitempty"`
	Browser        string        `json:"browser"`
}

func (o browserOpenOut) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n%s\n\n%s\n", o.Title, o.URL, o.PageText)
	if o.TextTruncated {
		fmt.Fprintf(&b, "[text truncated at %d KiB]\n", browserTextMax>>10)
	}
	if len(o.Links) > 0 {
		b.WriteString("\nLinks:\n")
		for _, l := range o.Links {
			fmt.Fprintf(&b, "- %s <%s>\n", l.Text, l.URL)
		}
	}
	if o.Screenshot != "" {
		fmt.Fprintf(&b, "\nScreenshot: %s\n", o.Screenshot)
	}
	return b.String()
}

func browserOpenTool() *Tool {
	return define(Tool{
		Name:  "browser_open",
		Title: "Open a page in a headless browser",
		Description: "Load a web page in headless Chromium inside the sandbox (its network policy applies: a sandbox " +
			"without network reaches only its own loopback and files) and return what it shows after its " +
			"scripts ran: title, text (the visible text of the rendered page, blocks on their own lines, cut at " +
			"100 KiB), and links (up to 200, text and absolute URL). url is http://, https:// or file:// (a page " +
			"in the sandbox, e.g. file:///workspace/index.html). wait_ms gives the page's scripts and timers that " +
			"many more milliseconds (of virtual time) before the page is read, 0–60000, default 0: use it for " +
			"pages that render late. screenshot_path saves a 1280×800 PNG screenshot there (relative paths " +
			"start at /workspace); read it back with the files API. Each call is a fresh browser with no " +
			"cookies or session. Needs a template with Chromium (chromium, chromium-browser, google-chrome or " +
			"chromium-headless-shell on PATH); without one the call fails saying so — use http_request for the " +
			"raw page then. A page that fails to load (refused, DNS, …) is an error naming Chromium's net:: code.",
		Capability: CapWeb,
		Input: json.RawMessage(`{
  "type": "object",
  "required": ["url"],
  "properties": {
    "url": {"type": "string", "description": "The page, e.g. \"http://127.0.0.1:8000/\" or \"file:///workspace/index.html\"."},
    "wait_ms": {"type": "integer", "minimum": 0, "maximum": 60000, "default": 0, "description": "Extra milliseconds (virtual time) for scripts before reading the page."},
    "screenshot_path": {"type": "string", "description": "Where to save a PNG screenshot in the sandbox, e.g. \"shot.png\"."}
  },
  "additionalProperties": false
}`),
		Output: json.RawMessage(`{
  "type": "object",
  "required": ["url", "title", "text", "text_truncated", "links", "browser"],
  "properties": {
    "url": {"type": "string"},
    "title": {"type": "string", "description": "The document's title after its scripts ran."},
    "text": {"type": "string", "description": "The page's visible text."},
    "text_truncated": {"type": "boolean"},
    "links": {"type": "array", "items": {"type": "object", "required": ["text", "url"], "properties": {"text": {"type": "string"}, "url": {"type": "string"}}}},
    "screenshot": {"type": "string", "description": "Absolute path of the screenshot, when screenshot_path was given."},
    "screenshot_bytes": {"type": "integer"},
    "browser": {"type": "string", "description": "The browser program that rendered the page."}
  }
}`),
	}, runBrowserOpen)
}

var pageLoadFailed = regexp.MustCompile(`Page load failed: (net::[A-Z_]+)`)

func runBrowserOpen(ctx context.Context, c *Call, in browserOpenIn) (browserOpenOut, error) {
	u, err := webURL("url", in.URL, "http", "https", "file")
	if err != nil {
		return browserOpenOut{}, err
	}
	wait, err := intInRange("wait_ms", in.WaitMS, 0, 0, 60000)
	if err != nil {
		return browserOpenOut{}, err
	}
	shot := ""
	if in.ScreenshotPath != "" {
		if shot, err = sandboxPath("screenshot_path", in.ScreenshotPath); err != nil {
			return browserOpenOut{}, err
		}
	}
	find, err := c.run(ctx, command{argv: append([]string{"/bin/sh", "-c", findBrowser, "sh"}, browsers...), timeout: 30 * time.Second})
	if errors.Is(err, errNotInstalled) {
		return browserOpenOut{}, notInstalled("browser_open needs /bin/sh in the sandbox to find a browser, and this sandbox's template has none")
	}
	if err != nil {
		return browserOpenOut{}, err
	}
	browser := strings.TrimSpace(string(find.Stdout))
	if find.ExitCode != 0 || browser == "" {
		return browserOpenOut{}, notInstalled("this sandbox's template has no browser: none of " + strings.Join(browsers, ", ") +
			" is on its PATH. Use a template with Chromium installed (e.g. Debian's chromium or chromium-headless-shell package), " +
			"or fetch the page without running its scripts with http_request")
	}
	profile := fmt.Sprintf("/tmp/sbx-browser-%d", time.Now().UnixNano())
	defer c.M().Remove(context.WithoutCancel(ctx), c.Sandbox, profile)
	argv := []string{browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--no-default-browser-check", "--hide-scrollbars", "--mute-audio", "--user-data-dir=" + profile, "--window-size=1280,800"}
	if wait > 0 {
		argv = append(argv, "--virtual-time-budget="+strconv.Itoa(wait))
	}
	if shot != "" {
		if _, err := c.M().MakeDir(ctx, c.Sandbox, parentDir(shot)); err != nil && !errors.Is(err, sandbox.ErrExists) {
			return browserOpenOut{}, c.own(err)
		}
		argv = append(argv, "--screenshot="+shot)
	}
	argv = append(argv, "--dump-dom", u.String())
	res, err := c.run(ctx, command{argv: argv, timeout: browserTimeout + time.Duration(wait)*time.Millisecond, output: 16 << 20})
	if err != nil {
		if errors.Is(err, errNotInstalled) {
			return browserOpenOut{}, notInstalled(browser + " was found on PATH but could not be run")
		}
		return browserOpenOut{}, err
	}
	if res.Reason == sandbox.ReasonTimeout {
		return browserOpenOut{}, fmt.Errorf("%w: %s did not finish loading %s within %s", sandbox.ErrTimeout, browser, in.URL, browserTimeout)
	}
	if m := pageLoadFailed.FindSubmatch(res.Stderr); m != nil {
		return browserOpenOut{}, fmt.Errorf("%w: %s could not load %s: %s", sandbox.ErrUnavailable, path0(browser), in.URL, m[1])
	}
	if res.ExitCode != 0 || len(strings.TrimSpace(string(res.Stdout))) == 0 {
		return browserOpenOut{}, fmt.Errorf("%w: %s failed on %s (exit code %d): %s", sandbox.ErrWrongState, path0(browser), in.URL, res.ExitCode, browserErrors(res))
	}
	out := pageContent(u, string(res.Stdout))
	out.URL, out.Browser = in.URL, browser
	if shot != "" {
		fi, err := c.M().Stat(ctx, c.Sandbox, shot)
		if err != nil {
			return browserOpenOut{}, fmt.Errorf("%w: %s made no screenshot at %s: %s", sandbox.ErrWrongState, path0(browser), shot, browserErrors(res))
		}
		out.Screenshot, out.ScreenshotSize = fi.Path, fi.Size
	}
	return out, nil
}

func parentDir(p string) string {
	if i := strings.LastIndexByte(p, '/'); i > 0 {
		return p[:i]
	}
	return "/"
}

// path0 is a program's name without its directory.
func path0(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// browserErrors keeps Chromium's ERROR lines but those about D-Bus and GPUs
// a headless browser in a sandbox always prints, or the tail of stderr.
func browserErrors(res *sandbox.ExecResult) string {
	var keep []string
	for _, l := range strings.Split(string(res.Stderr), "\n") {
		if strings.Contains(l, "ERROR") && !strings.Contains(l, "dbus") && !strings.Contains(l, "gpu") && !strings.Contains(l, "bluez") {
			keep = append(keep, strings.TrimSpace(l))
		}
	}
	if len(keep) == 0 {
		return outputTail(res, 1500)
	}
	s := strings.Join(keep, "\n")
	if len(s) > 1500 {
		s = "…" + s[len(s)-1500:]
	}
	return s
}

// pageContent extracts a rendered DOM's title, visible text and links.
func pageContent(base *url.URL, dom string) browserOpenOut {
	out := browserOpenOut{Links: []browserLink{}}
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		out.PageText = dom
		return out
	}
	var text textWriter
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		switch n.Type {
		case html.ElementNode:
			switch n.DataAtom {
			case atom.Script, atom.Style, atom.Noscript, atom.Template, atom.Head, atom.Svg, atom.Iframe, atom.Object:
				if n.DataAtom == atom.Head {
					findTitle(n, &out.Title)
				}
				return
			case atom.Title:
				out.Title = strings.TrimSpace(nodeText(n))
				return
			}
			if hidden(n) {
				return
			}
			if n.DataAtom == atom.A {
				if href := attr(n, "href"); href != "" && len(out.Links) < browserLinksMax {
					if ref, err := base.Parse(href); err == nil && (ref.Scheme == "http" || ref.Scheme == "https" || ref.Scheme == "file") {
						out.Links = append(out.Links, browserLink{Text: collapse(nodeText(n)), URL: ref.String()})
					}
				}
			}
			block := isBlock(n.DataAtom)
			if block || n.DataAtom == atom.Br {
				text.newline()
			}
			for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
				walk(ch)
			}
			if block {
				text.newline()
			}
			return
		case html.TextNode:
			if startsWithSpace(n.Data) {
				text.space()
			}
			text.word(collapse(n.Data))
			if endsWithSpace(n.Data) {
				text.space()
			}
			return
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch)
		}
	}
	walk(doc)
	var lines []string
	for _, l := range strings.Split(text.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	t := strings.Join(lines, "\n")
	if len(t) > browserTextMax {
		t = string(trimPartialRune([]byte(t[:browserTextMax])))
		out.TextTruncated = true
	}
	out.PageText = t
	return out
}

// textWriter builds a page's text: words, single spaces between them, and
// line breaks between blocks.
type textWriter struct {
	b    strings.Builder
	last byte // the last byte written; 0 at the start
}

func (w *textWriter) String() string { return w.b.String() }

func (w *textWriter) word(s string) {
	if s != "" {
		w.b.WriteString(s)
		w.last = s[len(s)-1]
	}
}

func (w *textWriter) space() {
	if w.last != 0 && w.last != ' ' && w.last != '\n' {
		w.b.WriteByte(' ')
		w.last = ' '
	}
}

func (w *textWriter) newline() {
	if w.last != 0 && w.last != '\n' {
		w.b.WriteByte('\n')
		w.last = '\n'
	}
}

func findTitle(n *html.Node, title *string) {
	for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
		if ch.Type == html.ElementNode && ch.DataAtom == atom.Title {
			*title = strings.TrimSpace(nodeText(ch))
			return
		}
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// hidden reports an element a browser does not show: the hidden attribute,
// or an inline display:none.
func hidden(n *html.Node) bool {
	for _, a := range n.Attr {
		if a.Key == "hidden" {
			return true
		}
		if a.Key == "style" && strings.Contains(strings.ReplaceAll(strings.ToLower(a.Val), " ", ""), "display:none") {
			return true
		}
	}
	return false
}

func nodeText(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		if n.Type == html.ElementNode && (n.DataAtom == atom.Script || n.DataAtom == atom.Style) {
			return
		}
		for ch := n.FirstChild; ch != nil; ch = ch.NextSibling {
			walk(ch)
		}
	}
	walk(n)
	return b.String()
}

var spaces = regexp.MustCompile(`\s+`)

func collapse(s string) string { return strings.TrimSpace(spaces.ReplaceAllString(s, " ")) }

func startsWithSpace(s string) bool { return s != "" && strings.TrimLeft(s, " \t\n\r\f") != s }
func endsWithSpace(s string) bool   { return s != "" && strings.TrimRight(s, " \t\n\r\f") != s }

func isBlock(a atom.Atom) bool {
	switch a {
	case atom.Address, atom.Article, atom.Aside, atom.Blockquote, atom.Body, atom.Dd, atom.Details, atom.Dialog,
		atom.Div, atom.Dl, atom.Dt, atom.Fieldset, atom.Figcaption, atom.Figure, atom.Footer, atom.Form,
		atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6, atom.Header, atom.Hr, atom.Li, atom.Main, atom.Nav,
		atom.Ol, atom.P, atom.Pre, atom.Section, atom.Summary, atom.Table, atom.Tr, atom.Td, atom.Th, atom.Ul,
		atom.Caption, atom.Thead, atom.Tbody, atom.Tfoot, atom.Option, atom.Button, atom.Label, atom.Html:
		return true
	}
	return false
}

func webTools() []*Tool { return []*Tool{httpRequestTool(), browserOpenTool()} }
