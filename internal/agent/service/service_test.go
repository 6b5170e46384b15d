package service

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"sbx.dev/sbx/api/agent/filesystem/filesystemconnect"
	"sbx.dev/sbx/api/agent/process/processconnect"
	pb "sbx.dev/sbx/api/agent/sbxagent"
	"sbx.dev/sbx/api/agent/sbxagent/sbxagentconnect"
)

// The routes Handler registers before building any service must be the ones
// the generated constructors would have registered.
func TestServicePathsMatchTheGeneratedOnes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func() (string, http.Handler)
	}{
		{processconnect.ProcessName, func() (string, http.Handler) {
			return processconnect.NewProcessHandler(processconnect.UnimplementedProcessHandler{})
		}},
		{filesystemconnect.FilesystemName, func() (string, http.Handler) {
			return filesystemconnect.NewFilesystemHandler(filesystemconnect.UnimplementedFilesystemHandler{})
		}},
		{sbxagentconnect.AgentName, func() (string, http.Handler) {
			return sbxagentconnect.NewAgentHandler(sbxagentconnect.UnimplementedAgentHandler{})
		}},
	} {
		if path, _ := tc.build(); path != servicePath(tc.name) {
			t.Errorf("%s: generated route %q, Handler registers %q", tc.name, path, servicePath(tc.name))
		}
	}
}

// Each procedure of the agent service has one route, and it reaches the
// service's method of the same name (an unimplemented service names the
// method it was called as).
func TestAgentRoutesCoverTheService(t *testing.T) {
	routes := agentRoutes(sbxagentconnect.UnimplementedAgentHandler{})
	methods := pb.File_sbxagent_agent_proto.Services().ByName("Agent").Methods()
	if len(routes) != methods.Len() {
		t.Errorf("%d routes for %d methods", len(routes), methods.Len())
	}
	mux := http.NewServeMux()
	byPath := map[string]bool{}
	for _, r := range routes {
		if byPath[r.procedure] {
			t.Errorf("%s routed twice", r.procedure)
		}
		byPath[r.procedure] = true
		mux.Handle(r.procedure, r.build())
	}
	for i := range methods.Len() {
		m := methods.Get(i)
		path := "/" + sbxagentconnect.AgentName + "/" + string(m.Name())
		if !byPath[path] {
			t.Errorf("method %s has no route", m.Name())
			continue
		}
		ct, body := "application/proto", ""
		if m.IsStreamingServer() {
			ct, body = "application/connect+proto", "\x00\x00\x00\x00\x00" // one empty message
		}
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Header.Set("Content-Type", ct)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		want := "sbxagent.Agent." + string(m.Name()) + " is not implemented"
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%s: answer %d %q, want one naming %q", path, rec.Code, rec.Body.String(), want)
		}
	}
}
