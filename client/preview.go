// This file implements the preview URL calls.

package client

import (
	"context"
	"net/http"
	"strconv"

	"sbx.dev/sbx/api/openapi"
)

// PreviewURL returns how to reach port of sandbox id from outside: its URLs
// by host and by path, the sandbox's preview token, and whether the port is
// public.
func (c *Client) PreviewURL(ctx context.Context, id string, port int) (*openapi.PreviewURL, error) {
	var u openapi.PreviewURL
	return &u, c.call(ctx, request{op: "preview_url", id: id, method: http.MethodGet,
		path: sandboxPath(id) + "/ports/" + strconv.Itoa(port) + "/url"}, &u)
}

// SetPortPublic makes port of sandbox id served without a token (public) or
// not, and returns its preview URLs.
func (c *Client) SetPortPublic(ctx context.Context, id string, port int, public bool) (*openapi.PreviewURL, error) {
	var u openapi.PreviewURL
	return &u, c.call(ctx, request{op: "set_port_public", id: id, method: http.MethodPut,
		path: sandboxPath(id) + "/ports/" + strconv.Itoa(port), body: openapi.PortUpdate{Public: &public}}, &u)
}
