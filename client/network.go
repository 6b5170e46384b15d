// This file implements the network tier calls.

package client

import (
	"context"
	"net/http"

	"sbx.dev/sbx/api/openapi"
)

// SetNetwork changes running sandbox id's network tier and lists; its
// connections through the egress proxy are cut.
func (c *Client) SetNetwork(ctx context.Context, id string, n openapi.NetworkPolicy) (*openapi.Sandbox, error) {
	var sb openapi.Sandbox
	return &sb, c.call(ctx, request{op: "set_network", id: id, method: http.MethodPut,
		path: sandboxPath(id) + "/network", body: n}, &sb)
}

// NetworkEvents returns the egress decisions about sandbox id's traffic.
func (c *Client) NetworkEvents(ctx context.Context, id string) (*openapi.NetworkEvents, error) {
	var ev openapi.NetworkEvents
	return &ev, c.call(ctx, request{op: "network_events", id: id, method: http.MethodGet,
		path: sandboxPath(id) + "/network/events"}, &ev)
}
