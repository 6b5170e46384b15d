// This file implements key management, which only the admin key may do: API
// keys with the capabilities each holds.

package client

import (
	"context"
	"net/http"
	"net/url"

	"sbx.dev/sbx/api/openapi"
)

// CreateKey makes an API key named name holding caps (nil: every
// capability) and returns it with its secret, which is shown this once.
func (c *Client) CreateKey(ctx context.Context, name string, caps []string) (*openapi.KeyInfo, error) {
	var k openapi.KeyInfo
	return &k, c.call(ctx, request{op: "create_key", method: http.MethodPost, path: "/v1/keys",
		body: openapi.KeyCreate{Name: name, Capabilities: caps}}, &k)
}

// Keys lists every API key, revoked ones included, without secrets.
func (c *Client) Keys(ctx context.Context) ([]openapi.KeyInfo, error) {
	var l openapi.KeyList
	if err := c.call(ctx, request{op: "list_keys", method: http.MethodGet, path: "/v1/keys"}, &l); err != nil {
		return nil, err
	}
	return l.Keys, nil
}

// RevokeKey revokes key id at once.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	return c.call(ctx, request{op: "revoke_key", method: http.MethodDelete, path: "/v1/keys/" + url.PathEscape(id)}, nil)
}
