package memstore

import (
	"fmt"

	"github.com/shardq/shardq/internal/driver"
)

// The errors below are what a driver adapter makes of a real node's: their codes and
// texts are the node's.

// consistency is the consistency a refused or timed-out request ran at.
func consistency(serial bool) string {
	if serial {
		return "SERIAL"
	}
	return "QUORUM"
}

func unavailable(serial bool) error {
	return driver.NewError(driver.CodeUnavailable, false, fmt.Sprintf("Cannot achieve consistency level %s", consistency(serial)))
}

func overloaded() error {
	return driver.NewError(driver.CodeOverloaded, false, "Server is in overloaded state. Cannot accept more requests at this point")
}

// invalid is the error of a request a node rejects as invalid.
func invalid(msg string) error { return driver.NewError(driver.CodeInvalid, false, msg) }

const timedOut = "Operation timed out - received only 0 responses."

// timeout is the error of request r under a timeout fault.
func timeout(f Fault, r Request) error {
	if f == NoResponseLost || f == NoResponseApplied || f == NoResponseLate {
		e := driver.NewError(0, true, "gocql: no response received from cassandra within timeout period")
		e.Unanswered = true
		return e
	}
	if r.Write {
		return driver.NewError(driver.CodeWriteTimeout, true, timedOut)
	}
	return driver.NewError(driver.CodeReadTimeout, true, timedOut)
}

// tooManyTombstones is what a read gets that scanned more tombstones than the failure
// threshold (TombstoneOverwhelmingException, sent as a read failure).
func tooManyTombstones(bool) error {
	return driver.NewError(driver.CodeReadFailure, false,
		"Operation failed - received 0 responses and 1 failures: READ_TOO_MANY_TOMBSTONES from localhost/127.0.0.1:7000")
}
