package client

import "sbx.dev/sbx/internal/sandbox"

// Error is a failed operation on one sandbox, as every method returns it:
// errors.As(err, &e) gives the operation and the sandbox id, and errors.Is(err,
// ErrNotFound) (and the other classes below) says what kind of failure it was.
type Error = sandbox.Error

// ArchiveLimits bounds an archive extraction (UploadArchive).
type ArchiveLimits = sandbox.ArchiveLimits

// The error classes, one per API error code (openapi.Code*). Every error a
// method returns wraps exactly one of them.
var (
	ErrNotFound        = sandbox.ErrNotFound        // not_found
	ErrExists          = sandbox.ErrExists          // already_exists
	ErrInvalid         = sandbox.ErrInvalid         // invalid_argument
	ErrWrongState      = sandbox.ErrWrongState      // failed_precondition
	ErrDenied          = sandbox.ErrDenied          // permission_denied
	ErrLimit           = sandbox.ErrLimit           // resource_exhausted
	ErrUnavailable     = sandbox.ErrUnavailable     // unavailable
	ErrTimeout         = sandbox.ErrTimeout         // deadline_exceeded
	ErrTooLarge        = sandbox.ErrTooLarge        // out_of_range
	ErrNoSpace         = sandbox.ErrNoSpace         // insufficient_storage
	ErrIsolation       = sandbox.ErrIsolation       // isolation_unavailable
	ErrAgentLost       = sandbox.ErrAgentLost       // agent_lost
	ErrUnauthenticated = sandbox.ErrUnauthenticated // unauthenticated
)
