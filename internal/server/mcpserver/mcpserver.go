// Package mcpserver serves the agent tools (package tools) over the Model
// Context Protocol, with the official Go SDK, as streamable HTTP at /mcp behind
// the API keys of /v1 (httpapi mounts Handler). Every tool of the set is an MCP
// tool with the set's schemas; decoding, validation and capability checks stay
// the set's, so /v1/tools and /mcp answer alike.
//
// Tools act on the sandbox named by their optional sandbox_id argument, or
// else on the session's own sandbox: created on the session's first such
// call, reused by its later calls, deleted when the session ends (session.go).
package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/internal/logkey"
	"sbx.dev/sbx/internal/manager"
	"sbx.dev/sbx/internal/sandbox"
	"sbx.dev/sbx/internal/tools"
)

// Options configure a Server.
type Options struct {
	Log *slog.Logger
	// Version is the server version announced to clients.
	Version string
	// SessionTimeout ends a session that has had no request for this long,
	// deleting its sandbox: a client that vanished without a DELETE must not
	// keep one alive until its TTL. 0 means DefaultSessionTimeout; negative
	// means sessions end only when the client or the daemon ends them.
	SessionTimeout time.Duration
	// MaxRequestBytes bounds one request body (write_file carries whole
	// files); 0 means DefaultMaxRequestBytes.
	MaxRequestBytes int64
}

// DefaultSessionTimeout is the default idle time after which a session ends.
const DefaultSessionTimeout = 30 * time.Minute

// DefaultMaxRequestBytes is the default bound of a request body: the bound
// of /v1's JSON bodies, so a file that /v1 takes fits here too.
const DefaultMaxRequestBytes = 16 << 20

// MetaSandboxID is the _meta key of every tool result that names the sandbox
// the call acted on, so a client can reach it with /v1 or pass it on.
const MetaSandboxID = "sbx/sandbox_id"

// sandboxIDAbout describes the sandbox_id argument every tool takes here.
const sandboxIDAbout = "The id of a sandbox of this API key to act on. Omit it to act on this MCP session's own " +
	"sandbox, which the session's first call creates and whose files persist until the session ends."

// instructions tell a model what the server is and what the session sandbox is.
const instructions = `sbx runs these tools in an isolated Linux sandbox: its own filesystem and processes, no network unless its policy allows one.
Every tool acts on this session's own sandbox unless you pass sandbox_id: the sandbox is created by the first call and deleted when the session ends.
Files you write and programs you install persist between calls in that sandbox, so later calls can build on earlier ones.
A sandbox also ends when its time limit passes; the next call then gets a new, empty one and its result says so.`

// Server is the MCP server over one tool set.
type Server struct {
	set     *tools.Set
	m       *manager.Manager
	log     *slog.Logger
	srv     *mcp.Server
	handler http.Handler

	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*session
	closing  bool
	watchers sync.WaitGroup // one per session with a sandbox record (session.go)
}

// New returns the MCP server of every tool in set, acting through m.
func New(set *tools.Set, m *manager.Manager, opts Options) *Server {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	s := &Server{set: set, m: m, log: log.With(logkey.Component, "mcp"), sessions: map[*mcp.ServerSession]*session{}}
	s.srv = mcp.NewServer(&mcp.Implementation{Name: "sbx", Title: "sbx sandbox", Version: version},
		&mcp.ServerOptions{Instructions: instructions, Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}})
	for _, t := range set.List() {
		s.srv.AddTool(mcpTool(t), s.handle)
	}
	// The SDK answers a call of an unknown tool with a protocol error, which a
	// model never sees; the set's own error lists the tools instead.
	s.srv.AddReceivingMiddleware(s.unknownTools)
	timeout := opts.SessionTimeout
	switch {
	case timeout == 0:
		timeout = DefaultSessionTimeout
	case timeout < 0:
		timeout = 0
	}
	maxBody := opts.MaxRequestBytes
	if maxBody <= 0 {
		maxBody = DefaultMaxRequestBytes
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.srv },
		&mcp.StreamableHTTPOptions{SessionTimeout: timeout, MaxRequestBodyBytes: maxBody, Logger: s.log})
	s.handler = auth.RequireBearerToken(verifyKey, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	return s
}

// Handler is the streamable HTTP endpoint. It expects requests authenticated
// by httpapi, their key in the context (manager.KeyFrom); it binds each
// session to the key that opened it, so a session id alone grants nothing.
func (s *Server) Handler() http.Handler { return s.handler }

// keyExtra is the TokenInfo.Extra entry holding the request's manager.Key.
const keyExtra = "sbx.key"

// verifyKey hands the SDK the key httpapi authenticated: its id as the
// session's user, which the SDK then requires of every later request of the
// session (403 otherwise), and the key itself for the tool handlers.
func verifyKey(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
	k, ok := manager.KeyFrom(ctx)
	if !ok || k.ID == "" {
		return nil, fmt.Errorf("%w: the request carries no authenticated API key", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{UserID: k.ID, Extra: map[string]any{keyExtra: k}}, nil
}

// mcpTool is t as an MCP tool: the set's schemas, sandbox_id added.
func mcpTool(t *tools.Tool) *mcp.Tool {
	destructive := t.Destructive
	mt := &mcp.Tool{
		Name:        t.Name,
		Title:       t.Title,
		Description: t.Description,
		InputSchema: t.InputSchema(sandboxIDAbout),
		Annotations: &mcp.ToolAnnotations{Title: t.Title, ReadOnlyHint: t.ReadOnly, DestructiveHint: &destructive},
	}
	if len(t.Output) > 0 {
		mt.OutputSchema = t.Output
	}
	return mt
}

// unknownTools answers tools/call of a name the set lacks with the set's
// error as an isError result, before the SDK's lookup refuses it.
func (s *Server) unknownTools(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if call, ok := req.(*mcp.CallToolRequest); ok && method == "tools/call" && call.Params != nil {
			if _, known := s.set.Get(call.Params.Name); !known {
				return s.handle(ctx, call)
			}
		}
		return next(ctx, method, req)
	}
}

// handle runs one tool call. Every failure is an isError result whose text
// is what the model should read; a protocol error would hide it from the model.
func (s *Server) handle(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ctx = withCallerKey(ctx, req)
	name := req.Params.Name
	id, args, err := tools.SplitSandboxID(req.Params.Arguments)
	if err != nil {
		return errorResult(sandbox.Wrap(name, "", err)), nil
	}
	t, known := s.set.Get(name)
	if !known || !mayCall(ctx, t) {
		// The set's error (unknown tool, access denied), with no sandbox made for it.
		_, err := s.set.Call(ctx, name, id, args)
		return errorResult(err), nil
	}
	var note string
	if id == "" { // else the manager keeps each key to its own sandboxes
		id, note, err = s.sessionSandbox(ctx, req.Session, name)
	}
	if err != nil {
		return errorResult(err), nil
	}
	res, err := s.set.Call(ctx, name, id, args)
	if err != nil {
		r := errorResult(err)
		r.Meta = mcp.Meta{MetaSandboxID: string(id)}
		return r, nil
	}
	return okResult(res, id, note), nil
}

// withCallerKey returns ctx carrying the key of the HTTP request that made the
// call, so capabilities and ownership are the caller's. Calls from other
// transports keep the key their context already carries, if any.
func withCallerKey(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return ctx
	}
	if k, ok := req.Extra.TokenInfo.Extra[keyExtra].(manager.Key); ok {
		return manager.WithKey(ctx, k)
	}
	return ctx
}

// mayCall reports whether ctx's key holds t's capability; calls without a key
// are the daemon's own, as in the set.
func mayCall(ctx context.Context, t *tools.Tool) bool {
	k, ok := manager.KeyFrom(ctx)
	return !ok || k.Can(t.Capability)
}

// okResult is res as MCP wants it: the structured result, and its text for
// models that read content; note (a replaced session sandbox) leads the text.
func okResult(res tools.Result, id sandbox.ID, note string) *mcp.CallToolResult {
	b, err := json.Marshal(res)
	if err != nil {
		return errorResult(sandbox.Wrap("encoding the result", id, err))
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: note + res.Text()}},
		StructuredContent: json.RawMessage(b),
		Meta:              mcp.Meta{MetaSandboxID: string(id)},
	}
}

// errorResult is a failed call: isError, with the text tools.Message gives.
func errorResult(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: tools.Message(err)}}}
}
