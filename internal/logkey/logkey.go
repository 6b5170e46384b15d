// Package logkey names the slog attribute keys used across sbx, so no key is spelled
// two ways.
package logkey

const (
	Component = "component"
	SandboxID = "sandbox_id"
	RequestID = "request_id"
	Op        = "op"
	Backend   = "backend"
	Err       = "err"
	Duration  = "duration"
	Process   = "process_id"
	Path      = "path"
	Method    = "method"
	Status    = "status"
	KeyID     = "key_id"
)
