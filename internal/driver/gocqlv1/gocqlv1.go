// Package gocqlv1 runs shardq's statements on a session of github.com/gocql/gocql.
//
// Every statement is pinned to QUORUM, and every conditional one to SERIAL, whatever the
// session's defaults are. Plain reads are idempotent, and, on sessions routed by
// hostpolicy (as shardq.RecommendedCluster sets up) that know two nodes or more, sent to
// a second node when the first has not answered within SpeculativeDelay: a node that
// froze (it keeps its connections, so the driver does not see it go) then costs a read
// that delay instead of the driver's whole timeout. Writes, lightweight transactions and
// SERIAL reads are never sent speculatively. (A failed plain write is sent to the next
// node by the session's retry policy, and a task write that timed out is sent again by
// the producer, both at the write's first timestamp.)
package gocqlv1

import (
	"context"
	"errors"
	"time"

	"github.com/gocql/gocql"

	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/hostpolicy"
)

// SpeculativeDelay is how long a plain read waits for its node before it is sent to the
// next one as well.
const SpeculativeDelay = 300 * time.Millisecond

// New returns session as a driver.Session.
func New(session *gocql.Session) driver.Session { return conn{session} }

type conn struct{ s *gocql.Session }

func (c conn) query(ctx context.Context, st driver.Statement) *gocql.Query {
	q := c.s.Query(st.CQL, driver.Args[gocql.UUID](st.Args)...).WithContext(ctx).
		Consistency(gocql.Quorum).SerialConsistency(gocql.Serial)
	switch st.Mode {
	case driver.Plain:
		if driver.IsRead(st.CQL) && hostpolicy.Speculate(c.s) {
			q = q.Idempotent(true).SetSpeculativeExecutionPolicy(speculation{})
		}
	case driver.Once:
		q = q.RetryPolicy(NoRetry)
	case driver.Serial:
		q = q.Consistency(gocql.Consistency(gocql.Serial)).
			SetSpeculativeExecutionPolicy(gocql.NonSpeculativeExecution{}).Idempotent(false)
		if !hostpolicy.Speculate(c.s) {
			q = q.RetryPolicy(SerialRetry)
		}
	}
	if st.CoordinatorTime {
		q = q.DefaultTimestamp(false)
	}
	if st.PageSize > 0 {
		q = q.PageSize(st.PageSize)
	}
	if st.OnePage {
		q = q.PageState(st.PageState)
	}
	return q
}

func (c conn) batch(ctx context.Context, b *driver.Batch) *gocql.Batch {
	typ := gocql.UnloggedBatch
	if b.Logged {
		typ = gocql.LoggedBatch
	}
	gb := c.s.NewBatch(typ).WithContext(ctx)
	gb.SetConsistency(gocql.Quorum)
	gb.SerialConsistency(gocql.Serial)
	if b.CoordinatorTime {
		gb.DefaultTimestamp(false)
	}
	for _, st := range b.Statements {
		gb.Query(st.CQL, driver.Args[gocql.UUID](st.Args)...)
	}
	return gb
}

func (c conn) Exec(ctx context.Context, st driver.Statement) error {
	return wrap(c.query(ctx, st).Exec())
}

func (c conn) Iter(ctx context.Context, st driver.Statement) driver.Iter {
	it := c.query(ctx, st).Iter()
	return driver.AdaptIter[gocql.UUID](it, func() string {
		if h := it.Host(); h != nil {
			return h.HostID()
		}
		return ""
	}, wrap)
}

func (c conn) ExecCAS(ctx context.Context, st driver.Statement, row map[string]any) (bool, error) {
	st.Mode = driver.Once
	if row == nil {
		row = map[string]any{}
	}
	applied, err := c.query(ctx, st).MapScanCAS(row)
	driver.Row[gocql.UUID](row)
	return applied, wrap(err)
}

func (c conn) ExecBatch(ctx context.Context, b *driver.Batch) error {
	return wrap(c.s.ExecuteBatch(c.batch(ctx, b)))
}

func (c conn) ExecBatchCAS(ctx context.Context, b *driver.Batch, row map[string]any) (bool, error) {
	gb := c.batch(ctx, b)
	gb.RetryPolicy(NoRetry)
	if row == nil {
		row = map[string]any{}
	}
	applied, it, err := c.s.MapExecuteBatchCAS(gb, row)
	if err == nil {
		err = it.Close()
	}
	driver.Row[gocql.UUID](row)
	return applied, wrap(err)
}

func (c conn) AwaitSchemaAgreement(ctx context.Context) error {
	return wrap(c.s.AwaitSchemaAgreement(ctx))
}

func (c conn) Keyspace() string { return c.s.Query("").Keyspace() }

// wrap returns the driver's err as a *driver.Error with its code, and whether it timed
// out.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, gocql.ErrNotFound) {
		return driver.ErrNotFound
	}
	code := 0
	var re gocql.RequestError
	if errors.As(err, &re) {
		code = re.Code()
	}
	return driver.Wrap(err, driver.Error{Code: code, TimedOut: TimedOut(err),
		Unanswered: errors.Is(err, gocql.ErrTimeoutNoResponse) || errors.Is(err, gocql.ErrConnectionClosed)})
}

// TimedOut reports whether err, the driver's or a driver.Error, is a request that timed
// out: its outcome is unknown. (The driver's session errors carry their cause as text
// only.)
func TimedOut(err error) bool {
	if err == nil {
		return false
	}
	var rt *gocql.RequestErrReadTimeout
	var wt *gocql.RequestErrWriteTimeout
	return errors.Is(err, gocql.ErrTimeoutNoResponse) || errors.As(err, &rt) || errors.As(err, &wt) ||
		driver.TimedOut(err) || driver.TimeoutText(err.Error())
}

// speculation sends a read once more, SpeculativeDelay after the first.
type speculation struct{}

func (speculation) Attempts() int { return 1 }

func (speculation) Delay() time.Duration { return SpeculativeDelay }

// NoRetry is set on every statement of Mode Once.
var NoRetry gocql.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: 0}

// SerialRetry sends a read at SERIAL that failed again, up to twice: to the same node
// when it timed out, to the next one otherwise. Such a read changes nothing but
// completing a round already under way, and the outcomes it settles are otherwise left
// unknown: one busy moment of a one-node cluster, where the driver has no other node to
// try, failed the settle of a queue's creation and of an ack batch. Where the session
// is RecommendedCluster's and knows more than one node, its retry policy sends one that
// failed to the next node instead.
var SerialRetry gocql.RetryPolicy = serialRetry{}

type serialRetry struct{}

func (serialRetry) Attempt(q gocql.RetryableQuery) bool { return q.Attempts() <= 2 }

func (serialRetry) GetRetryType(err error) gocql.RetryType {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return gocql.Rethrow // the caller gave up (gocql returns before asking)
	case TimedOut(err):
		return gocql.Retry
	}
	return gocql.RetryNextHost
}
