// This file implements the secret calls: the caller's own secrets, whose
// values go to the daemon and never come back.

package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/sandbox"
)

func secretPath(name string) string { return "/v1/secrets/" + url.PathEscape(name) }

// SetSecret creates the caller's secret req.Name, or replaces the caller's
// secret of that name (replaced says so), and returns it without its value.
func (c *Client) SetSecret(ctx context.Context, req openapi.SecretCreate) (info *openapi.SecretInfo, replaced bool, err error) {
	resp, err := c.do(ctx, request{op: "set_secret", method: http.MethodPost, path: "/v1/secrets", body: req})
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	var out openapi.SecretInfo
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, false, &sandbox.Error{Op: "set_secret", Err: fmt.Errorf("%w: decoding the answer: %v", sandbox.ErrUnavailable, err)}
	}
	return &out, resp.StatusCode == http.StatusOK, nil
}

// Secrets lists the caller's secrets by name, without values.
func (c *Client) Secrets(ctx context.Context) ([]openapi.SecretInfo, error) {
	var l openapi.SecretList
	if err := c.call(ctx, request{op: "list_secrets", method: http.MethodGet, path: "/v1/secrets"}, &l); err != nil {
		return nil, err
	}
	return l.Secrets, nil
}

// Secret returns the caller's secret name, without its value.
func (c *Client) Secret(ctx context.Context, name string) (*openapi.SecretInfo, error) {
	var s openapi.SecretInfo
	return &s, c.call(ctx, request{op: "get_secret", method: http.MethodGet, path: secretPath(name)}, &s)
}

// DeleteSecret deletes the caller's secret name.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.call(ctx, request{op: "delete_secret", method: http.MethodDelete, path: secretPath(name)}, nil)
}
