// Package cql makes the statements shardq sends, with their consistency pinned whatever
// the session's defaults are: quorum reads and writes, so a read sees every write
// acknowledged before it (a locked read at ONE could return rows the previous lock
// holder already swapped away), and SERIAL for lightweight transactions and the reads
// that settle them, matching the per-shard lock.
//
// Plain reads are idempotent, and, on sessions routed by hostpolicy (as
// shardq.RecommendedCluster sets up) that know two nodes or more, sent to a second node when
// the first has not answered within SpeculativeDelay: a node that froze (it keeps its connections, so the driver does
// not see it go) then costs a read that delay instead of the driver's whole timeout.
// Writes and lightweight transactions are never sent speculatively, nor are SERIAL reads,
// which take part in Paxos. (A failed plain write is sent to the next node by the
// session's retry policy, and a task write that timed out is sent again by the producer,
// both at the write's first timestamp.)
package cql

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/gocql/gocql"

	"github.com/shardq/shardq/internal/hostpolicy"
)

const (
	// Consistency is the consistency of every plain read and write.
	Consistency = gocql.Quorum
	// SerialConsistency is the serial consistency of every lightweight transaction.
	SerialConsistency = gocql.Serial
	// SpeculativeDelay is how long a plain read waits for its node before it is sent to
	// the next one as well.
	SpeculativeDelay = 300 * time.Millisecond
)

// Query returns a statement of session with pinned consistency.
func Query(session *gocql.Session, stmt string, args ...any) *gocql.Query {
	q := session.Query(stmt, args...).Consistency(Consistency).SerialConsistency(SerialConsistency)
	if isRead(stmt) && hostpolicy.Speculate(session) {
		q = q.Idempotent(true).SetSpeculativeExecutionPolicy(speculation{})
	}
	return q
}

// Batch returns a batch of session with pinned consistency.
func Batch(session *gocql.Session, typ gocql.BatchType) *gocql.Batch {
	b := session.NewBatch(typ)
	b.SetConsistency(Consistency)
	b.SerialConsistency(SerialConsistency)
	return b
}

func isRead(stmt string) bool {
	s := strings.TrimSpace(stmt)
	return len(s) >= 6 && strings.EqualFold(s[:6], "SELECT")
}

// speculation sends a read once more, SpeculativeDelay after the first. Reads at SERIAL
// replace it (lwt.SerialRead).
type speculation struct{}

func (speculation) Attempts() int { return 1 }

func (s speculation) Delay() time.Duration { return SpeculativeDelay }

// TimedOut reports whether err is a request that timed out, on the client or a node: its
// outcome is unknown. (The driver's session errors carry their cause as text only.)
func TimedOut(err error) bool {
	if err == nil {
		return false
	}
	var rt *gocql.RequestErrReadTimeout
	var wt *gocql.RequestErrWriteTimeout
	var ne net.Error
	msg := err.Error()
	return errors.Is(err, gocql.ErrTimeoutNoResponse) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &rt) || errors.As(err, &wt) || (errors.As(err, &ne) && ne.Timeout()) ||
		strings.Contains(msg, "within timeout") || strings.Contains(msg, "i/o timeout")
}

// Refused reports whether a node refused err's request for what it is (invalid, say,
// or not allowed), so that sending it again would be refused again.
func Refused(err error) bool {
	var re gocql.RequestError
	if !errors.As(err, &re) {
		return false
	}
	switch re.Code() {
	case gocql.ErrCodeInvalid, gocql.ErrCodeSyntax, gocql.ErrCodeUnauthorized, gocql.ErrCodeConfig,
		gocql.ErrCodeCredentials, gocql.ErrCodeProtocol:
		return true
	}
	return false
}
