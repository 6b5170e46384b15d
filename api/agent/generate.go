// Package agent holds the wire contracts of the in-sandbox agent: the envd-compatible
// process and filesystem services, the sbx-only service, and the boot configuration a
// backend hands the agent. Generated code is checked in; regenerate with go generate.
package agent

//go:generate protoc -I . -I /usr/include --plugin=protoc-gen-go=../../bin/protoc-gen-go --plugin=protoc-gen-connect-go=../../bin/protoc-gen-connect-go --plugin=protoc-gen-go-vtproto=../../bin/protoc-gen-go-vtproto --go_out=. --go_opt=module=sbx.dev/sbx/api/agent --go-vtproto_out=. --go-vtproto_opt=module=sbx.dev/sbx/api/agent,features=marshal+unmarshal+size --connect-go_out=. --connect-go_opt=module=sbx.dev/sbx/api/agent process/process.proto filesystem/filesystem.proto sbxagent/agent.proto
