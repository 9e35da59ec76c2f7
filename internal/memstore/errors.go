package memstore

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/gocql/gocql"
)

// The driver builds its request errors only from frames it reads: their code and message
// live in an unexported embedded errorFrame, whose Code() lwt.Definite reads. Setting
// them by reflection is the one way to hand callers the driver's own types, with the
// codes a real node sends.

var errorFrameType = reflect.TypeOf(gocql.RequestErrUnavailable{}).Field(0).Type

// setFrame sets the code and message of an addressable errorFrame.
func setFrame(frame reflect.Value, code int, msg string) {
	set := func(name string) reflect.Value {
		f := frame.FieldByName(name)
		return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	}
	set("code").SetInt(int64(code))
	set("message").SetString(msg)
}

// withFrame sets the errorFrame embedded in e, a pointer to one of the driver's
// RequestErr structs, and returns e.
func withFrame[E any](e *E, code int, msg string) *E {
	setFrame(reflect.ValueOf(e).Elem().FieldByName("errorFrame"), code, msg)
	return e
}

// bareFrame is an error the driver returns as a plain errorFrame (it has no type of its
// own for overload or invalid requests).
func bareFrame(code int, msg string) error {
	v := reflect.New(errorFrameType).Elem()
	setFrame(v, code, msg)
	return v.Interface().(error)
}

// consistency is the consistency a refused or timed-out request ran at.
func consistency(serial bool) gocql.Consistency {
	if serial {
		return gocql.Consistency(gocql.Serial)
	}
	return gocql.Quorum
}

func unavailable(serial bool) error {
	c := consistency(serial)
	return withFrame(&gocql.RequestErrUnavailable{Consistency: c, Required: 1, Alive: 0},
		gocql.ErrCodeUnavailable, fmt.Sprintf("Cannot achieve consistency level %s", c))
}

func overloaded() error {
	return bareFrame(gocql.ErrCodeOverloaded, "Server is in overloaded state. Cannot accept more requests at this point")
}

// invalid is the error of a request a node rejects as invalid.
func invalid(msg string) error { return bareFrame(gocql.ErrCodeInvalid, msg) }

const timedOut = "Operation timed out - received only 0 responses."

// timeout is the error of request r under a timeout fault.
func timeout(f Fault, r Request, writeType string) error {
	if f == NoResponseLost || f == NoResponseApplied || f == NoResponseLate {
		return gocql.ErrTimeoutNoResponse
	}
	c := consistency(r.Conditional || r.Serial)
	if r.Write {
		return withFrame(&gocql.RequestErrWriteTimeout{Consistency: c, BlockFor: 1, WriteType: writeType},
			gocql.ErrCodeWriteTimeout, timedOut)
	}
	return withFrame(&gocql.RequestErrReadTimeout{Consistency: c, BlockFor: 1}, gocql.ErrCodeReadTimeout, timedOut)
}

// tooManyTombstones is what a read gets that scanned more tombstones than the failure
// threshold (TombstoneOverwhelmingException, sent as a read failure).
func tooManyTombstones(serial bool) error {
	return withFrame(&gocql.RequestErrReadFailure{Consistency: consistency(serial), BlockFor: 1, NumFailures: 1},
		gocql.ErrCodeReadFailure, "Operation failed - received 0 responses and 1 failures: READ_TOO_MANY_TOMBSTONES from localhost/127.0.0.1:7000")
}
