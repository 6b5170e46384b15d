// This file routes the sbx agent service's procedures one by one, each
// handler built on its procedure's first request. The generated
// NewAgentHandler builds all seventeen at once (each resolves its method's
// descriptor and makes a handler per protocol): ~0.5 ms of a sandbox's first
// exec, of which the exec's own handler is ~0.2.

package service

import (
	"context"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/api/agent/sbxagent/sbxagentconnect"
)

// agentRoute is one procedure's route and the function building its handler.
type agentRoute struct {
	procedure string
	build     func() http.Handler
}

// agentRoutes returns a route for each procedure of svc's service.
func agentRoutes(svc sbxagentconnect.AgentHandler, opts ...connect.HandlerOption) []agentRoute {
	methods := pb.File_sbxagent_agent_proto.Services().ByName("Agent").Methods()
	options := func(procedure string) []connect.HandlerOption {
		name := procedure[strings.LastIndexByte(procedure, '/')+1:]
		return []connect.HandlerOption{connect.WithSchema(methods.ByName(protoreflect.Name(name))), connect.WithHandlerOptions(opts...)}
	}
	return []agentRoute{
		unaryRoute(sbxagentconnect.AgentHealthProcedure, svc.Health, options),
		streamRoute(sbxagentconnect.AgentExecProcedure, svc.Exec, options),
		streamRoute(sbxagentconnect.AgentAttachProcedure, svc.Attach, options),
		unaryRoute(sbxagentconnect.AgentWaitProcedure, svc.Wait, options),
		unaryRoute(sbxagentconnect.AgentGetProcessProcedure, svc.GetProcess, options),
		unaryRoute(sbxagentconnect.AgentListProcessesProcedure, svc.ListProcesses, options),
		unaryRoute(sbxagentconnect.AgentWriteStdinProcedure, svc.WriteStdin, options),
		unaryRoute(sbxagentconnect.AgentSignalProcedure, svc.Signal, options),
		unaryRoute(sbxagentconnect.AgentReadOutputProcedure, svc.ReadOutput, options),
		unaryRoute(sbxagentconnect.AgentResizeProcedure, svc.Resize, options),
		unaryRoute(sbxagentconnect.AgentReadFileProcedure, svc.ReadFile, options),
		unaryRoute(sbxagentconnect.AgentWriteFileProcedure, svc.WriteFile, options),
		unaryRoute(sbxagentconnect.AgentGlobProcedure, svc.Glob, options),
		unaryRoute(sbxagentconnect.AgentGrepProcedure, svc.Grep, options),
		unaryRoute(sbxagentconnect.AgentChangedProcedure, svc.Changed, options),
		unaryRoute(sbxagentconnect.AgentReadLinesProcedure, svc.ReadLines, options),
		unaryRoute(sbxagentconnect.AgentEditFileProcedure, svc.EditFile, options),
	}
}

// unaryRoute is the route of unary procedure p served by f.
func unaryRoute[Req, Res any](p string, f func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), options func(string) []connect.HandlerOption) agentRoute {
	return agentRoute{procedure: p, build: func() http.Handler { return connect.NewUnaryHandler(p, f, options(p)...) }}
}

// streamRoute is the route of server-streaming procedure p served by f.
func streamRoute[Req, Res any](p string, f func(context.Context, *connect.Request[Req], *connect.ServerStream[Res]) error, options func(string) []connect.HandlerOption) agentRoute {
	return agentRoute{procedure: p, build: func() http.Handler { return connect.NewServerStreamHandler(p, f, options(p)...) }}
}
