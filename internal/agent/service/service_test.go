package service

import (
	"net/http"
	"testing"

	"sbx.dev/sbx/api/agent/filesystem/filesystemconnect"
	"sbx.dev/sbx/api/agent/process/processconnect"
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
