// This file routes the sbx agent service's procedures one by one, each
// handler built on its procedure's first request. The generated
// NewAgentHandler builds all seventeen at once (each resolves its method's
// descriptor and makes a handler per protocol): ~0.5 ms of a sandbox's first
// exec, of which the exec's own handler is ~0.2.

package service

import (
	"context"
	"net/http"

	"connectrpc.com/connect"

	"sbx.dev/sbx/api/agent/sbxagent/sbxagentconnect"
)

// agentRoute is one procedure's route and the function building its handler.
type agentRoute struct {
	procedure string
	build     func() http.Handler
}

// agentRoutes returns a route for each procedure of svc's service.
//
// The handlers carry no schema (connect.WithSchema, which nothing here reads):
// resolving a method's descriptor expands the whole file's descriptors,
// ~0.15 ms of a fresh agent's CPU.
func agentRoutes(svc sbxagentconnect.AgentHandler, opts ...connect.HandlerOption) []agentRoute {
	return []agentRoute{
		unaryRoute(sbxagentconnect.AgentHealthProcedure, svc.Health, opts),
		streamRoute(sbxagentconnect.AgentExecProcedure, svc.Exec, opts),
		streamRoute(sbxagentconnect.AgentAttachProcedure, svc.Attach, opts),
		unaryRoute(sbxagentconnect.AgentWaitProcedure, svc.Wait, opts),
		unaryRoute(sbxagentconnect.AgentGetProcessProcedure, svc.GetProcess, opts),
		unaryRoute(sbxagentconnect.AgentListProcessesProcedure, svc.ListProcesses, opts),
		unaryRoute(sbxagentconnect.AgentWriteStdinProcedure, svc.WriteStdin, opts),
		unaryRoute(sbxagentconnect.AgentSignalProcedure, svc.Signal, opts),
		unaryRoute(sbxagentconnect.AgentReadOutputProcedure, svc.ReadOutput, opts),
		unaryRoute(sbxagentconnect.AgentResizeProcedure, svc.Resize, opts),
		unaryRoute(sbxagentconnect.AgentReadFileProcedure, svc.ReadFile, opts),
		unaryRoute(sbxagentconnect.AgentWriteFileProcedure, svc.WriteFile, opts),
		unaryRoute(sbxagentconnect.AgentGlobProcedure, svc.Glob, opts),
		unaryRoute(sbxagentconnect.AgentGrepProcedure, svc.Grep, opts),
		unaryRoute(sbxagentconnect.AgentChangedProcedure, svc.Changed, opts),
		unaryRoute(sbxagentconnect.AgentReadLinesProcedure, svc.ReadLines, opts),
		unaryRoute(sbxagentconnect.AgentEditFileProcedure, svc.EditFile, opts),
	}
}

// unaryRoute is the route of unary procedure p served by f.
func unaryRoute[Req, Res any](p string, f func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), opts []connect.HandlerOption) agentRoute {
	return agentRoute{procedure: p, build: func() http.Handler { return connect.NewUnaryHandler(p, f, opts...) }}
}

// streamRoute is the route of server-streaming procedure p served by f.
func streamRoute[Req, Res any](p string, f func(context.Context, *connect.Request[Req], *connect.ServerStream[Res]) error, opts []connect.HandlerOption) agentRoute {
	return agentRoute{procedure: p, build: func() http.Handler { return connect.NewServerStreamHandler(p, f, opts...) }}
}
