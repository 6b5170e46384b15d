// This file implements `sbx mcp`: the daemon's MCP server (/mcp) on stdin and
// stdout, for agent hosts that start MCP servers as commands. It opens one
// session at the daemon and mirrors its tools locally; each call is forwarded
// to that session and its result returned unchanged. The host's session and
// the daemon's are one: closing stdin ends the daemon's, which deletes its
// sandbox.

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"sbx.dev/sbx/client"
)

// mcpKeepAlive is how often the daemon's session is pinged: a host may stay
// idle longer than the daemon's session timeout, and its session must last
// as long as the host keeps this process.
const mcpKeepAlive = time.Minute

func runMCP(ctx context.Context, e *env, args []string) int {
	fs := e.flagSet("mcp", "\n\nServes the daemon's tools over MCP on stdin and stdout, for agent hosts (Claude Desktop,\n"+
		"Cursor, …). The daemon is found as by every command (SBX_URL and SBX_API_KEY, else the\n"+
		"local data dir). Tools act on a sandbox of this session, deleted when stdin closes.")
	if err := fs.Parse(args); err != nil {
		return e.parseErr(fs, err, exitMisuse)
	}
	if fs.NArg() > 0 {
		return e.misuse(fs, exitMisuse, "unexpected argument %q", fs.Arg(0))
	}
	c, err := e.newClient()
	if err != nil {
		return e.fail("mcp", false, exitError, err)
	}
	defer c.Close()
	if err := serveMCPProxy(ctx, c, e.stdin, e.stdout); err != nil {
		return e.fail("mcp", false, exitError, err)
	}
	return exitOK
}

// serveMCPProxy connects to the daemon's /mcp, serves its tools on in and out
// until in ends (nil) or the daemon's session does (an error), and then ends
// the daemon's session.
func serveMCPProxy(ctx context.Context, c *client.Client, in io.Reader, out io.Writer) error {
	// A daemon that is not there, or refuses the key, says so in the words
	// every command uses; the MCP client would only report a status.
	if _, err := c.Tools(ctx); err != nil {
		return err
	}
	up, err := connectUpstream(ctx, c)
	if err != nil {
		return err
	}
	defer up.Close() // DELETE /mcp: the daemon deletes the session's sandbox
	local, err := mirror(ctx, up)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errUpstream := errors.New("the daemon ended the MCP session (stopped or restarted?)")
	go func() {
		up.Wait()
		cancel(errUpstream)
	}()
	rc, ok := in.(io.ReadCloser) // closing os.Stdin ends a read blocked in it
	if !ok {
		rc = io.NopCloser(in)
	}
	err = local.Run(ctx, &mcp.IOTransport{Reader: rc, Writer: nopWriteCloser{out}})
	if cause := context.Cause(ctx); errors.Is(cause, errUpstream) {
		return cause
	}
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, mcp.ErrConnectionClosed) {
		return fmt.Errorf("serving MCP on stdin and stdout: %w", err)
	}
	return nil
}

// connectUpstream opens a session at the daemon's /mcp.
func connectUpstream(ctx context.Context, c *client.Client) (*mcp.ClientSession, error) {
	cl := mcp.NewClient(&mcp.Implementation{Name: "sbx-mcp", Version: version()},
		&mcp.ClientOptions{KeepAlive: mcpKeepAlive, Logger: slog.New(slog.DiscardHandler)})
	tr := &mcp.StreamableClientTransport{Endpoint: c.URL("/mcp"), HTTPClient: c.HTTPClient()}
	up, err := cl.Connect(ctx, tr, nil)
	if err != nil {
		return nil, fmt.Errorf("opening an MCP session at the daemon %s: %w", c.Address(), err)
	}
	return up, nil
}

// mirror returns a local server with every tool of up, each call forwarded.
func mirror(ctx context.Context, up *mcp.ClientSession) (*mcp.Server, error) {
	instructions := ""
	if r := up.InitializeResult(); r != nil {
		instructions = r.Instructions
	}
	local := mcp.NewServer(&mcp.Implementation{Name: "sbx", Title: "sbx sandbox", Version: version()},
		&mcp.ServerOptions{Instructions: instructions, Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
			Logger: slog.New(slog.DiscardHandler)})
	forward := forwarder(up)
	for t, err := range up.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("listing the daemon's MCP tools: %w", err)
		}
		local.AddTool(t, forward)
	}
	// Every call goes to the daemon, a name it does not know too: its answer
	// (an isError result listing the tools) is better than the SDK's refusal.
	local.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if call, ok := req.(*mcp.CallToolRequest); ok && method == "tools/call" && call.Params != nil {
				return forward(ctx, call)
			}
			return next(ctx, method, req)
		}
	})
	return local, nil
}

// forwarder calls the daemon's tool and returns its result as it came.
func forwarder(up *mcp.ClientSession) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := req.Params.Arguments
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		return up.CallTool(ctx, &mcp.CallToolParams{Name: req.Params.Name, Arguments: args})
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
