package files

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
)

// Kind classifies an error for the transports.
type Kind int

const (
	Internal Kind = iota
	Invalid
	NotFound
	Exists
	Denied
	NoSpace
	TooLarge // a cap was hit (archive bytes, entries, depth, name length)
	// Precondition: the path is not what the operation works on (a binary
	// file given to a text operation).
	Precondition
)

// Error is a failed file operation, with a message written for the caller: it
// names wire paths only, never the host's.
type Error struct {
	Kind Kind
	Msg  string
	Err  error // the cause, for the agent's log
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

func errorf(k Kind, format string, args ...any) error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...)}
}

// KindOf returns the kind of err.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Internal
}

// pathErr classifies err from an operation on wire path p.
func pathErr(p string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	var errno syscall.Errno
	errors.As(err, &errno)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &Error{Kind: NotFound, Msg: fmt.Sprintf("path '%s' does not exist", p), Err: err}
	case errors.Is(err, fs.ErrExist):
		return &Error{Kind: Exists, Msg: fmt.Sprintf("path '%s' already exists", p), Err: err}
	case escapes(err):
		return &Error{Kind: Denied, Msg: fmt.Sprintf("path '%s' leads outside the sandbox root", p), Err: err}
	case errors.Is(err, fs.ErrPermission):
		return &Error{Kind: Denied, Msg: fmt.Sprintf("permission denied: '%s'", p), Err: err}
	case errno == syscall.ENOTDIR:
		return &Error{Kind: Invalid, Msg: fmt.Sprintf("path '%s': a component is not a directory", p), Err: err}
	case errno == syscall.EISDIR:
		return &Error{Kind: Invalid, Msg: fmt.Sprintf("path '%s' is a directory", p), Err: err}
	case errno == syscall.ELOOP:
		return &Error{Kind: Invalid, Msg: fmt.Sprintf("path '%s': too many levels of symbolic links", p), Err: err}
	case errno == syscall.ENOTEMPTY:
		return &Error{Kind: Invalid, Msg: fmt.Sprintf("path '%s': directory not empty", p), Err: err}
	case errno == syscall.ENOSPC || errno == syscall.EDQUOT:
		return &Error{Kind: NoSpace, Msg: fmt.Sprintf("path '%s': no space left on the sandbox's disk", p), Err: err}
	case errno == syscall.EXDEV || errno == syscall.EINVAL || errno == syscall.ENAMETOOLONG:
		return &Error{Kind: Invalid, Msg: fmt.Sprintf("path '%s': %s", p, errno.Error()), Err: err}
	case errno != 0:
		return &Error{Kind: Internal, Msg: fmt.Sprintf("path '%s': %s", p, errno.Error()), Err: err}
	}
	return &Error{Kind: Internal, Msg: fmt.Sprintf("path '%s': operation failed", p), Err: err}
}

// escapes reports whether err is os.Root refusing a path that leads out of it.
func escapes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}
