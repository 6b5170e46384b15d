package client

import (
	"context"
	"net/url"

	"sbx.dev/sbx/api/openapi"
)

// Tools lists the daemon's agent tools with their schemas.
func (c *Client) Tools(ctx context.Context) ([]openapi.ToolInfo, error) {
	var out openapi.ToolList
	err := c.call(ctx, request{op: "list_tools", method: "GET", path: "/v1/tools"}, &out)
	return out.Tools, err
}

// CallTool calls tool name on sandbox id with args (a JSON object's value)
// and decodes its structured result into out.
func (c *Client) CallTool(ctx context.Context, id, name string, args, out any) error {
	if args == nil {
		args = map[string]any{}
	}
	return c.call(ctx, request{op: "call_tool", id: id, method: "POST",
		path: sandboxPath(id) + "/tools/" + url.PathEscape(name), body: args}, out)
}
