// Package httpapi serves the REST API /v1 on net/http.ServeMux. Handlers return
// errors; writeError is the one place an error becomes an HTTP response.
package httpapi

import (
	"log/slog"
	"net/http"

	"sbx/internal/manager"
)

// Options configure the API server.
type Options struct {
	Log *slog.Logger
	// MaxBodyBytes bounds JSON request bodies (uploads stream and are bounded
	// separately).
	MaxBodyBytes int64
}

// New returns the /v1 handler over m.
func New(m *manager.Manager, opts Options) http.Handler { panic("unimplemented") }
