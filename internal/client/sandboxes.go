// This file implements the sandbox calls and health.

package client

import (
	"context"
	"net/http"
	"net/url"
	"sort"

	"sbx/api/openapi"
)

func sandboxPath(id string) string { return "/v1/sandboxes/" + url.PathEscape(id) }

// Health returns the daemon's backends; it needs no API key.
func (c *Client) Health(ctx context.Context) (*openapi.Health, error) {
	var h openapi.Health
	return &h, c.call(ctx, request{op: "health", method: http.MethodGet, path: "/v1/health"}, &h)
}

// Create creates a sandbox.
func (c *Client) Create(ctx context.Context, req openapi.CreateSandboxRequest) (*openapi.Sandbox, error) {
	var sb openapi.Sandbox
	return &sb, c.call(ctx, request{op: "create", method: http.MethodPost, path: "/v1/sandboxes", body: req}, &sb)
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
