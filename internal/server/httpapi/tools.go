// This file serves the agent tools (package tools) over HTTP: GET /v1/tools
// lists them with their schemas, and POST /v1/sandboxes/{id}/tools/{name}
// calls one with its arguments as the body and its structured result as the
// answer. The MCP server serves the same set at /mcp.

package httpapi

import (
	"encoding/json"
	"net/http"

	"sbx.dev/sbx/api/openapi"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/tools"
)

// toolRoutes returns a route per tool, so each is in the routing table and
// the OpenAPI document with its own schemas, and the catch-all that names an
// unknown tool.
func (s *server) toolRoutes(sb string) []route {
	out := []route{{"GET", "/v1/tools", "list_tools", false, s.listTools}}
	for _, t := range s.tools.List() {
		out = append(out, route{"POST", sb + "/tools/" + t.Name, "call_tool", false, s.callTool})
	}
	return append(out, route{"POST", sb + "/tools/{name}", "call_tool", false, s.callTool})
}

func (s *server) listTools(w http.ResponseWriter, r *http.Request) error {
	var out openapi.ToolList
	for _, t := range s.tools.List() {
		out.Tools = append(out.Tools, openapi.ToolInfo{Name: t.Name, Title: t.Title, Description: t.Description,
			Capability: t.Capability, InputSchema: t.Input, OutputSchema: t.Output})
	}
	return writeJSON(w, http.StatusOK, out)
}

func (s *server) callTool(w http.ResponseWriter, r *http.Request) error {
	id := sandbox.ID(r.PathValue("id"))
	name := r.PathValue("name")
	if name == "" { // a route of its own: the last element is the tool
		name = r.URL.Path[len("/v1/sandboxes/"+string(id)+"/tools/"):]
	}
	var args json.RawMessage
	if err := s.decodeJSON(w, r, &args); err != nil {
		return err
	}
	bodyID, args, err := tools.SplitSandboxID(args)
	if err != nil {
		return err
	}
	if bodyID != "" && bodyID != id {
		return sandbox.Invalid("sandbox_id", "%q in the body is not the sandbox of the path (%s); give it once", truncate(string(bodyID), 64), id)
	}
	res, err := s.tools.Call(r.Context(), name, id, args)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

// mcpPath is where the MCP server is served (streamable HTTP).
const mcpPath = "/mcp"

// serveMCP authenticates r like any /v1 call and hands it to the MCP server
// with its key in the context.
func (s *server) serveMCP(w http.ResponseWriter, r *http.Request) {
	rt := route{method: r.Method, path: mcpPath, op: "mcp"}
	rw := &responseWriter{ResponseWriter: w}
	if err := checkOrigin(r.Header.Get("Origin"), r.Host, s.origins); err != nil {
		s.writeError(rw, r, rt, err)
		return
	}
	k, err := s.authenticate(r)
	if err != nil {
		s.writeError(rw, r, rt, err)
		return
	}
	// The MCP server streams (SSE) through the writer as it came.
	s.mcp.ServeHTTP(w, r.WithContext(manager.WithKey(r.Context(), k)))
}
