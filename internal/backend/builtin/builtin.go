// Package builtin is the one list of drivers compiled into sbx. Register adds them
// to the backend registry; the daemon calls it before opening SANDBOX_BACKEND.
package builtin

import (
	"sync"

	"sbx.dev/sbx/internal/backend"
	"sbx.dev/sbx/internal/backend/e2b"
	"sbx.dev/sbx/internal/backend/local"
	"sbx.dev/sbx/internal/backend/native"
)

var once sync.Once

// Register registers every built-in driver. It is idempotent.
func Register() {
	once.Do(func() {
		backend.Register("native", native.Open)
		backend.Register("local", local.Open)
		backend.Register(e2b.Name, e2b.Open)
	})
}
