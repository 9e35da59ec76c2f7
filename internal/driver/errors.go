package driver

import (
	"context"
	"errors"
	"net"
)

// The error codes of the native protocol (its specification, section 9) that shardq
// decides on; both drivers report them as they come.
const (
	CodeProtocol     = 0x000A
	CodeCredentials  = 0x0100
	CodeUnavailable  = 0x1000
	CodeOverloaded   = 0x1001
	CodeWriteTimeout = 0x1100
	CodeReadTimeout  = 0x1200
	CodeReadFailure  = 0x1300
	CodeSyntax       = 0x2000
	CodeUnauthorized = 0x2100
	CodeInvalid      = 0x2200
	CodeConfig       = 0x2300
)

// Error is a request that failed in the driver or on a node. Its text is the driver's.
type Error struct {
	// Code is the protocol error code the node answered with; 0 when no node answered.
	Code int
	// TimedOut says the request timed out, on a node or in the client: whether it
	// applied is unknown.
	TimedOut bool
	// Unanswered says no node answered (the client timed out, or the connection
	// closed): the request may still be under way.
	Unanswered bool
	err        error
}

// NewError returns an Error of code whose text is msg.
func NewError(code int, timedOut bool, msg string) *Error {
	return &Error{Code: code, TimedOut: timedOut, err: errors.New(msg)}
}

// Wrap returns err, the driver's, as e with err as its cause, or err itself when it is
// nil, ErrNotFound or already an *Error.
func Wrap(err error, e Error) error {
	var was *Error
	if err == nil || errors.Is(err, ErrNotFound) || errors.As(err, &was) {
		return err
	}
	e.err = err
	return &e
}

func (e *Error) Error() string { return e.err.Error() }

// Unwrap returns the driver's error.
func (e *Error) Unwrap() error { return e.err }

// TimedOut reports whether err is a request that timed out, on the client or a node: its
// outcome is unknown.
func TimedOut(err error) bool {
	if err == nil {
		return false
	}
	var e *Error
	var ne net.Error
	return (errors.As(err, &e) && e.TimedOut) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// Unanswered reports whether no node answered err's request, so it may still be under
// way.
func Unanswered(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Unanswered
}

// Refused reports whether a node refused err's request for what it is (invalid, say, or
// not allowed), so that sending it again would be refused again.
func Refused(err error) bool {
	switch code(err) {
	case CodeInvalid, CodeSyntax, CodeUnauthorized, CodeConfig, CodeCredentials, CodeProtocol:
		return true
	}
	return false
}

// NotApplied reports whether err says for certain that a request was not applied: the
// coordinator refused it before anything was written.
func NotApplied(err error) bool {
	switch c := code(err); {
	case Refused(err), c == CodeUnavailable, c == CodeOverloaded:
		return true
	}
	return false
}

func code(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}
