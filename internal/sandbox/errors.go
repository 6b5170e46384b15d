package sandbox

import (
	"errors"
	"fmt"
)

// The error classes. Every error sbx returns wraps exactly one of them, and each
// transport maps them to its wire form in one function; the comments show the
// HTTP status and code httpapi gives each.
var (
	ErrNotFound    = errors.New("not found")        // 404 not_found
	ErrExists      = errors.New("already exists")   // 409 already_exists
	ErrInvalid     = errors.New("invalid argument") // 400 invalid_argument
	ErrWrongState  = errors.New("wrong state")      // 409 failed_precondition
	ErrDenied      = errors.New("access denied")    // 403 permission_denied
	ErrLimit       = errors.New("limit exceeded")   // 429 resource_exhausted
	ErrUnavailable = errors.New("unavailable")      // 503 unavailable
	ErrTimeout     = errors.New("timeout")          // 504 deadline_exceeded
	ErrTooLarge    = errors.New("too large")        // 413 out_of_range
	// ErrNoSpace: the host's disk under the data dir is too full to make a
	// sandbox safely.
	ErrNoSpace = errors.New("insufficient storage") // 507 insufficient_storage
	// ErrIsolation: a layer the policy requires cannot be applied on this host.
	ErrIsolation       = errors.New("isolation unavailable") // 503 isolation_unavailable
	ErrAgentLost       = errors.New("agent lost")            // 502 agent_lost
	ErrUnauthenticated = errors.New("unauthenticated")       // 401 unauthenticated
) // plus errors.ErrUnsupported for optional abilities: 501 unimplemented

// Error records a failed operation on one sandbox.
type Error struct {
	Op  string // "create", "exec", "write_file", ...
	ID  ID     // empty when no sandbox exists yet
	Err error
}

func (e *Error) Error() string {
	if e.ID == "" {
		return e.Op + ": " + e.Err.Error()
	}
	return e.Op + " " + string(e.ID) + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Wrap returns err as an *Error for op on id, unless it already is one for id.
func Wrap(op string, id ID, err error) error {
	if err == nil {
		return nil
	}
	var se *Error
	if errors.As(err, &se) && se.ID == id {
		return err
	}
	return &Error{Op: op, ID: id, Err: err}
}

// Invalid returns an ErrInvalid naming field: "invalid argument: timeout: 0 is below 1".
func Invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
}

// IDOf returns the sandbox id recorded in err, if any.
func IDOf(err error) ID {
	var se *Error
	if errors.As(err, &se) {
		return se.ID
	}
	return ""
}
