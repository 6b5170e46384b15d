package service

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"sbx.dev/sbx/internal/agent/files"
	"sbx.dev/sbx/internal/agent/process"
)

// svcError is an error the services raise themselves, with its code.
type svcError struct {
	code connect.Code
	msg  string
}

func (e *svcError) Error() string { return e.msg }

func errInvalid(format string, args ...any) error {
	return &svcError{connect.CodeInvalidArgument, fmt.Sprintf(format, args...)}
}

func errNotFound(format string, args ...any) error {
	return &svcError{connect.CodeNotFound, fmt.Sprintf(format, args...)}
}

func errPrecondition(format string, args ...any) error {
	return &svcError{connect.CodeFailedPrecondition, fmt.Sprintf(format, args...)}
}

// toConnect is the only place an error becomes a Connect error.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	var se *svcError
	if errors.As(err, &se) {
		return connect.NewError(se.code, errors.New(se.msg))
	}
	if errors.Is(err, process.ErrStdinClosed) {
		return connect.NewError(connect.CodeInternal, process.ErrStdinClosed)
	}
	if errors.Is(err, process.ErrNoOutputLog) {
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	var cur *process.CursorError
	if errors.As(err, &cur) {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	var fe *files.Error
	if errors.As(err, &fe) {
		return connect.NewError(fileCode(fe.Kind), errors.New(fe.Msg))
	}
	return connect.NewError(connect.CodeInternal, err)
}

func fileCode(k files.Kind) connect.Code {
	switch k {
	case files.Invalid:
		return connect.CodeInvalidArgument
	case files.NotFound:
		return connect.CodeNotFound
	case files.Exists:
		return connect.CodeAlreadyExists
	case files.Denied:
		return connect.CodePermissionDenied
	case files.NoSpace:
		return connect.CodeResourceExhausted
	case files.TooLarge:
		return connect.CodeOutOfRange
	case files.Precondition:
		return connect.CodeFailedPrecondition
	}
	return connect.CodeInternal
}
