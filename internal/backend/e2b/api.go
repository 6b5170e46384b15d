// This file implements the client of E2B's control plane: create, get, kill,
// list (by metadata, page by page) and the timeout of a remote sandbox, with
// X-API-Key, and E2B's error body turned into sbx's error classes.

package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"sbx.dev/sbx/internal/sandbox"
)

// requestTimeout bounds one control-plane call whose context has no
// deadline of its own (E2B's SDK allows 60 s).
const requestTimeout = 60 * time.Second

// maxAPIBody bounds an answer of the control plane read into memory.
const maxAPIBody = 8 << 20

// api is E2B's control plane at base, authenticated by key.
type api struct {
	base string // no trailing slash
	key  string
	hc   *http.Client
}

// apiError is a control-plane answer other than success: its status and
// E2B's message.
type apiError struct {
	Status  int
	Message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("the e2b server answered %d: %s", e.Status, e.Message)
}

// statusOf is the HTTP status of an apiError in err's chain, or 0.
func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}

// classify wraps err with the sbx error class its status means: the
// remote's refusal of the key or its own trouble is the remote's
// unavailability, never the caller's fault.
func classify(err error) error {
	var class error
	switch s := statusOf(err); {
	case s == 0:
		return fmt.Errorf("%w: reaching the e2b server: %v", sandbox.ErrUnavailable, err)
	case s == http.StatusBadRequest:
		class = sandbox.ErrInvalid
	case s == http.StatusNotFound:
		class = sandbox.ErrNotFound
	case s == http.StatusConflict:
		class = sandbox.ErrExists
	case s == http.StatusTooManyRequests:
		class = sandbox.ErrLimit
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return fmt.Errorf("%w: the e2b server refused the API key (e2b.api_key): %v", sandbox.ErrUnavailable, err)
	default:
		class = sandbox.ErrUnavailable
	}
	return fmt.Errorf("%w: %v", class, err)
}

// newSandboxBody is E2B's NewSandboxV2, as its SDK sends it.
type newSandboxBody struct {
	TemplateID          string            `json:"templateID"`
	Timeout             int64             `json:"timeout"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
	Network             *networkBody      `json:"network,omitempty"`
}

// networkBody is E2B's network rules: denyOut closes destinations, and
// allowOut opens some again (it wins over denyOut).
type networkBody struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
}

// sandboxBody is what create answers (E2B's Sandbox), and the fields of
// get and list (SandboxDetail, ListedSandbox) the driver reads.
type sandboxBody struct {
	SandboxID       string            `json:"sandboxID"`
	TemplateID      string            `json:"templateID"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken"`
	Metadata        map[string]string `json:"metadata"`
	State           string            `json:"state"`
	// Domain, when set, is where E2B's SDK reaches the sandbox's envd
	// without E2B_SANDBOX_URL (envdBase).
	Domain *string `json:"domain"`
}

// do sends one request (body as JSON when not nil) and decodes a 2xx
// answer into out (when not nil); any other answer is an *apiError.
func (a *api) do(ctx context.Context, method, path string, q url.Values, body, out any) (http.Header, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := a.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", a.key)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIBody))
	if err != nil {
		return nil, fmt.Errorf("reading the answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &apiError{Status: resp.StatusCode, Message: errorMessage(resp, b)}
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("decoding the answer to %s %s: %w", method, path, err)
		}
	}
	return resp.Header, nil
}

// errorMessage is E2B's error body's message, else the body's text, else
// the status text, as E2B's SDK reads it.
func errorMessage(resp *http.Response, b []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil && e.Message != "" {
		return truncate(e.Message, 500)
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return truncate(s, 500)
	}
	return resp.Status
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// create makes a remote sandbox.
func (a *api) create(ctx context.Context, in newSandboxBody) (sandboxBody, error) {
	var out sandboxBody
	_, err := a.do(ctx, http.MethodPost, "/v2/sandboxes", nil, in, &out)
	if err == nil && out.SandboxID == "" {
		err = errors.New("the e2b server's create answer holds no sandboxID")
	}
	return out, err
}

// get returns remote sandbox rid; gone is an *apiError of status 404.
func (a *api) get(ctx context.Context, rid string) (sandboxBody, error) {
	var out sandboxBody
	_, err := a.do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(rid), nil, nil, &out)
	return out, err
}

// kill deletes remote sandbox rid; one already gone is no error.
func (a *api) kill(ctx context.Context, rid string) error {
	_, err := a.do(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(rid), nil, nil, nil)
	if statusOf(err) == http.StatusNotFound {
		return nil
	}
	return err
}

// setTimeout makes remote sandbox rid end d from now.
func (a *api) setTimeout(ctx context.Context, rid string, d time.Duration) error {
	_, err := a.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(rid)+"/timeout", nil,
		map[string]int64{"timeout": seconds(d)}, nil)
	return err
}

// seconds is d in whole seconds, rounded up, at least 1.
func seconds(d time.Duration) int64 {
	return max(1, int64((d+time.Second-1)/time.Second))
}

// maxPages bounds the pages one list reads (100 sandboxes each).
const maxPages = 1000

// list returns the running sandboxes whose metadata hold every pair of md,
// reading every page.
func (a *api) list(ctx context.Context, md map[string]string) ([]sandboxBody, error) {
	var all []sandboxBody
	next := ""
	for range maxPages {
		q := url.Values{"limit": {"100"}, "state": {"running"}}
		if len(md) > 0 {
			q.Set("metadata", metadataQuery(md))
		}
		if next != "" {
			q.Set("nextToken", next)
		}
		var page []sandboxBody
		h, err := a.do(ctx, http.MethodGet, "/v2/sandboxes", q, nil, &page)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next = h.Get("X-Next-Token"); next == "" {
			return all, nil
		}
	}
	return nil, fmt.Errorf("listing sandboxes: more than %d pages", maxPages)
}

// metadataQuery encodes a metadata filter as E2B's SDK does: each key and
// value escaped, the pairs joined as a form; the query's own encoding is
// the third layer.
func metadataQuery(md map[string]string) string {
	v := url.Values{}
	for k, val := range md {
		v.Set(url.QueryEscape(k), url.QueryEscape(val))
	}
	return v.Encode()
}
