// This file implements the sandbox calls and health.

package client

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"sbx.dev/sbx/api/openapi"
)

func sandboxPath(id string) string { return "/v1/sandboxes/" + url.PathEscape(id) }

// Health returns the daemon's backends; it needs no API key.
func (c *Client) Health(ctx context.Context) (*openapi.Health, error) {
	var h openapi.Health
	return &h, c.call(ctx, request{op: "health", method: http.MethodGet, path: "/v1/health"}, &h)
}

// CreateOption changes one Create call.
type CreateOption func(*request)

// WithIdempotencyKey sends key as the Idempotency-Key header: a retry of the
// same request with the same key returns the sandbox the first one created
// instead of creating another, and the same key with another request fails with
// sandbox.ErrExists.
func WithIdempotencyKey(key string) CreateOption {
	return func(r *request) {
		if r.header == nil {
			r.header = http.Header{}
		}
		r.header.Set(openapi.IdempotencyKeyHeader, key)
	}
}

// Create creates a sandbox.
func (c *Client) Create(ctx context.Context, req openapi.CreateSandboxRequest, opts ...CreateOption) (*openapi.Sandbox, error) {
	var sb openapi.Sandbox
	r := request{op: "create", method: http.MethodPost, path: "/v1/sandboxes", body: req}
	for _, o := range opts {
		o(&r)
	}
	return &sb, c.call(ctx, r, &sb)
}

// AuditQuery selects audit records; empty fields select everything.
type AuditQuery struct {
	SandboxID string
	KeyID     string
	Since     time.Time
	Limit     int // 0: the daemon's default (100)
}

// Audit returns the audit records q selects, newest first: every key's for the
// admin key, the caller's own for any other.
func (c *Client) Audit(ctx context.Context, q AuditQuery) ([]openapi.AuditRecord, error) {
	v := url.Values{}
	if q.SandboxID != "" {
		v.Set("sandbox_id", q.SandboxID)
	}
	if q.KeyID != "" {
		v.Set("key_id", q.KeyID)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var l openapi.AuditList
	if err := c.call(ctx, request{op: "audit", method: http.MethodGet, path: "/v1/audit", query: v}, &l); err != nil {
		return nil, err
	}
	return l.Records, nil
}

// Get returns sandbox id.
func (c *Client) Get(ctx context.Context, id string) (*openapi.Sandbox, error) {
	var sb openapi.Sandbox
	return &sb, c.call(ctx, request{op: "get", id: id, method: http.MethodGet, path: sandboxPath(id)}, &sb)
}

// List returns the sandboxes carrying every label in labels (all when empty).
func (c *Client) List(ctx context.Context, labels map[string]string) ([]openapi.Sandbox, error) {
	q := url.Values{}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("label", k+"="+labels[k])
	}
	var l openapi.SandboxList
	if err := c.call(ctx, request{op: "list", method: http.MethodGet, path: "/v1/sandboxes", query: q}, &l); err != nil {
		return nil, err
	}
	return l.Sandboxes, nil
}

// Update extends sandbox id's time to live or replaces its labels.
func (c *Client) Update(ctx context.Context, id string, req openapi.UpdateSandboxRequest) (*openapi.Sandbox, error) {
	var sb openapi.Sandbox
	return &sb, c.call(ctx, request{op: "update", id: id, method: http.MethodPatch, path: sandboxPath(id), body: req}, &sb)
}

// Delete destroys sandbox id.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.call(ctx, request{op: "delete", id: id, method: http.MethodDelete, path: sandboxPath(id)}, nil)
}
