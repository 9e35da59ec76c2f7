// Package shardqgocqlv2 runs shardq on a session of the Apache Cassandra GoCQL driver v2
// (github.com/apache/cassandra-gocql-driver/v2), as shardqgocql does on
// github.com/gocql/gocql, and behaves as that adapter does. It is a module of its own so
// that programs on v1 do not link v2, and it links nothing of v1.
//
// Every statement is pinned to QUORUM, and every conditional one to SERIAL, whatever the
// session's defaults are. Plain reads are, on sessions made from a RecommendedCluster
// config that know two nodes or more, sent to a second node when the first has not
// answered within 300 ms: a node that froze (it keeps its connections, so the driver
// does not see it go) then costs a read that delay instead of the driver's whole
// timeout. Writes, lightweight transactions and SERIAL reads are never sent
// speculatively.
//
// v2 retries only requests marked idempotent, where v1 retries whatever the retry policy
// allows. So that the same requests are retried as on v1, plain statements, SERIAL reads
// and batches without conditions are marked idempotent (only plain reads also get a
// speculative execution policy), and lightweight transactions are not, besides being
// given no retries.
package shardqgocqlv2

import (
	"context"
	"errors"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/shardqgocqlv2/internal/hostpolicy"
)

// speculativeDelay is how long a plain read waits for its node before it is sent to the
// next one as well.
const speculativeDelay = 300 * time.Millisecond

// New returns the driver shardq runs on session.
func New(session *gocql.Session) *driver.Driver { return driver.New(conn{session}) }

type conn struct{ s *gocql.Session }

func (c conn) query(st driver.Statement) *gocql.Query {
	q := c.s.Query(st.CQL, driver.Args[gocql.UUID](st.Args)...).
		Consistency(gocql.Quorum).SerialConsistency(gocql.Serial)
	switch st.Mode {
	case driver.Plain:
		q = q.Idempotent(true)
		if driver.IsRead(st.CQL) && hostpolicy.Speculate(c.s) {
			q = q.SetSpeculativeExecutionPolicy(speculation{})
		}
	case driver.Once:
		q = q.Idempotent(false).RetryPolicy(noRetry)
	case driver.Serial:
		q = q.Consistency(gocql.Serial).SetSpeculativeExecutionPolicy(gocql.NonSpeculativeExecution{}).
			Idempotent(true) // for retries only: no speculative execution policy
		if !hostpolicy.Speculate(c.s) {
			q = q.RetryPolicy(serialRetries)
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

// batch returns b as gocql's; its statements are idempotent when retry says the driver
// may send it again.
func (c conn) batch(b *driver.Batch, retry bool) *gocql.Batch {
	typ := gocql.UnloggedBatch
	if b.Logged {
		typ = gocql.LoggedBatch
	}
	gb := c.s.Batch(typ).Consistency(gocql.Quorum).SerialConsistency(gocql.Serial)
	if b.CoordinatorTime {
		gb = gb.DefaultTimestamp(false)
	}
	if !retry {
		gb = gb.RetryPolicy(noRetry)
	}
	for _, st := range b.Statements {
		gb.Entries = append(gb.Entries, gocql.BatchEntry{Stmt: st.CQL, Args: driver.Args[gocql.UUID](st.Args), Idempotent: retry})
	}
	return gb
}

func (c conn) Exec(ctx context.Context, st driver.Statement) error {
	return wrap(c.query(st).ExecContext(ctx))
}

func (c conn) Iter(ctx context.Context, st driver.Statement) driver.Iter {
	it := c.query(st).IterContext(ctx)
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
	applied, err := c.query(st).MapScanCASContext(ctx, row)
	driver.Row[gocql.UUID](row)
	return applied, wrap(err)
}

func (c conn) ExecBatch(ctx context.Context, b *driver.Batch) error {
	return wrap(c.batch(b, true).ExecContext(ctx))
}

func (c conn) ExecBatchCAS(ctx context.Context, b *driver.Batch, row map[string]any) (bool, error) {
	if row == nil {
		row = map[string]any{}
	}
	applied, it, err := c.batch(b, false).MapExecCASContext(ctx, row)
	if it != nil {
		if cerr := it.Close(); err == nil {
			err = cerr
		}
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
	return driver.Wrap(err, driver.Error{Code: code, TimedOut: timedOut(err),
		Unanswered: errors.Is(err, gocql.ErrTimeoutNoResponse) || errors.Is(err, gocql.ErrConnectionClosed)})
}

// timedOut reports whether err, the driver's or a driver.Error, is a request that timed
// out: its outcome is unknown. (Some of the driver's errors carry their cause as text
// only.)
func timedOut(err error) bool {
	if err == nil {
		return false
	}
	var rt *gocql.RequestErrReadTimeout
	var wt *gocql.RequestErrWriteTimeout
	return errors.Is(err, gocql.ErrTimeoutNoResponse) || errors.As(err, &rt) || errors.As(err, &wt) ||
		driver.TimedOut(err) || driver.TimeoutText(err.Error())
}

// speculation sends a read once more, speculativeDelay after the first.
type speculation struct{}

func (speculation) Attempts() int { return 1 }

func (speculation) Delay() time.Duration { return speculativeDelay }

// noRetry is set on every statement of Mode Once and every conditional batch.
var noRetry gocql.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: 0}

// serialRetries sends a read at SERIAL that failed again, up to twice: to the same node
// when it timed out, to the next one otherwise. Such a read changes nothing but
// completing a round already under way, and the outcomes it settles are otherwise left
// unknown: on a one-node cluster the driver has no other node to try, and one busy
// moment would fail the settle. Where the session is RecommendedCluster's and knows more
// than one node, its retry policy sends one that failed to the next node instead.
var serialRetries gocql.RetryPolicy = serialRetry{}

type serialRetry struct{}

func (serialRetry) Attempt(q gocql.RetryableQuery) bool { return q.Attempts() <= 2 }

func (serialRetry) GetRetryType(err error) gocql.RetryType {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return gocql.Rethrow // the caller gave up (gocql returns before asking)
	case timedOut(err):
		return gocql.Retry
	}
	return gocql.RetryNextHost
}
