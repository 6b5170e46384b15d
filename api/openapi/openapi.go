// Package openapi holds the contract of the HTTP API /v1: openapi.json, the
// source of truth served at GET /v1/openapi.json, and the Go types of its JSON
// bodies, shared by the server and the client. It holds data only, no logic.
package openapi

import _ "embed"

// Document is the OpenAPI 3.1 document of /v1.
//
//go:embed openapi.json
var Document []byte
