// Package driver is the boundary between shardq's store and a CQL driver. The store
// spells statements and speaks uuid.UUID; a driver adapter (internal/driver/gocqlv1 for
// github.com/gocql/gocql) sends them with the consistency every shardq request is pinned
// to, converts values between uuid.UUID and the driver's own UUID type, and turns the
// driver's errors into *Error, so nothing above the adapter names a driver type.
package driver

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Mode says how a statement is sent. Every statement runs at QUORUM, and every
// conditional one at SERIAL, whatever the session's defaults are: a read then sees every
// write acknowledged before it, which the per-shard lock relies on.
type Mode uint8

const (
	// Plain is a read or write the driver may retry on the next node; a SELECT may
	// also be sent to a second node when the first has not answered in time.
	Plain Mode = iota
	// Once is never retried by the driver: a lightweight transaction (sent again, a
	// request whose outcome is unknown is a second, different decision) or a schema
	// change.
	Once
	// Serial is a read at SERIAL, which completes any Paxos round in flight on its
	// partition before it answers, so what it returns is settled. It is never sent to a
	// second node on a delay (that copy's round would contend with the first).
	Serial
)

// Statement is one CQL statement with its bound values.
type Statement struct {
	CQL  string
	Args []any
	Mode Mode
	// CoordinatorTime leaves a write's timestamp to the node that coordinates it rather
	// than the client's clock.
	CoordinatorTime bool
	// PageSize is the most rows a page of a read holds; 0 is the session's default.
	PageSize int
	// OnePage makes a read return one page, from PageState (nil: the first), rather
	// than fetch the next page as its Iter reaches the end of one.
	OnePage bool
	// PageState is where a read of OnePage resumes: an Iter's PageState.
	PageState []byte
}

// Batch is a batch of writes sent as one request.
type Batch struct {
	// Logged makes the batch atomic across partitions (through the batch log); an
	// unlogged batch of one partition is applied as one mutation anyway.
	Logged bool
	// CoordinatorTime is as Statement's.
	CoordinatorTime bool
	Statements      []Statement
}

// Add appends a statement to b.
func (b *Batch) Add(cql string, args ...any) {
	b.Statements = append(b.Statements, Statement{CQL: cql, Args: args})
}

// Len returns how many statements b holds.
func (b *Batch) Len() int { return len(b.Statements) }

// Session runs statements on one keyspace. Values bound and scanned may be uuid.UUID,
// slices and maps of it, and whatever the driver itself takes for the column.
type Session interface {
	// Exec runs a statement that returns no rows.
	Exec(ctx context.Context, st Statement) error
	// Iter runs a read.
	Iter(ctx context.Context, st Statement) Iter
	// ExecCAS runs a conditional statement (Mode is Once whatever st says) and reports
	// whether it applied; when it did not, row receives the current values of the
	// columns it conditioned on.
	ExecCAS(ctx context.Context, st Statement, row map[string]any) (bool, error)
	// ExecBatch runs b.
	ExecBatch(ctx context.Context, b *Batch) error
	// ExecBatchCAS runs b, which holds conditional statements, once, and reports whether
	// it applied; when it did not, row receives the current values of the first row
	// read.
	ExecBatchCAS(ctx context.Context, b *Batch, row map[string]any) (bool, error)
	// AwaitSchemaAgreement waits until every node that is up reports the same schema.
	AwaitSchemaAgreement(ctx context.Context) error
	// Keyspace returns the session's keyspace.
	Keyspace() string
}

// Iter reads the rows of a read.
type Iter interface {
	// Scan reads the next row's columns into dest and reports whether there was one.
	Scan(dest ...any) bool
	// MapScan reads the next row into m by column name and reports whether there was one.
	MapScan(m map[string]any) bool
	// PageState returns where the next page begins, or nothing after the last.
	PageState() []byte
	// Node returns the host ID of the node that answered, or "".
	Node() string
	// Close ends the read and returns its error, if any.
	Close() error
}

// ErrNotFound means a read that expected a row found none.
var ErrNotFound = errors.New("not found")

// Scan reads the first row of st into dest, or returns ErrNotFound.
func Scan(ctx context.Context, s Session, st Statement, dest ...any) error {
	iter := s.Iter(ctx, st)
	found := iter.Scan(dest...)
	if err := iter.Close(); err != nil {
		return err
	}
	if !found {
		return ErrNotFound
	}
	return nil
}

// MapScan reads the first row of st into m by column name, or returns ErrNotFound.
func MapScan(ctx context.Context, s Session, st Statement, m map[string]any) error {
	iter := s.Iter(ctx, st)
	found := iter.MapScan(m)
	if err := iter.Close(); err != nil {
		return err
	}
	if !found {
		return ErrNotFound
	}
	return nil
}

// Driver is one session of a CQL driver as shardq uses it, and the owner of what the
// parts built on it share (internal/sessionstate). Adapters make one per session
// (shardqgocql.New, shardqgocqlv2.New).
type Driver struct {
	session Session

	mu    sync.Mutex
	state any
}

// New returns the Driver of session, an adapter's; nil for a Driver whose parts work
// on a store of their own (SetState), such as the simulator's.
func New(session Session) *Driver { return &Driver{session: session} }

// Session returns the session d runs statements on.
func (d *Driver) Session() Session { return d.session }

// State returns what d keeps for the parts built on it, made by make on first use.
func (d *Driver) State(make func() any) any {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == nil {
		d.state = make()
	}
	return d.state
}

// SetState makes st what d keeps. It panics if d keeps something already: parts built
// before would share another.
func (d *Driver) SetState(st any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state != nil {
		panic("driver: SetState on a Driver that keeps a state")
	}
	d.state = st
}

// The driver settings shardq recommends, whatever the driver: shardq.RecommendedTimeout
// and its siblings say why.
const (
	RecommendedTimeout           = time.Second
	RecommendedConnectTimeout    = 5 * time.Second
	RecommendedReconnectInterval = 10 * time.Second
	RecommendedRetries           = 2
)
