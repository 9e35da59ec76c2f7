package store

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/shard"
)

// Of returns the Store of session's keyspace.
func Of(session driver.Session) Store { return cassandra{session} }

type cassandra struct{ session driver.Session }

// read is a read of stmt, at SERIAL when serial.
func read(stmt string, serial bool, args ...any) driver.Statement {
	st := driver.Statement{CQL: stmt, Args: args}
	if serial {
		st.Mode = driver.Serial
	}
	return st
}

func (c cassandra) Tasks() Tasks             { return tasks(c) }
func (c cassandra) Leasing() Leasing         { return leasing(c) }
func (c cassandra) Locks() Locks             { return locks(c) }
func (c cassandra) Keys() Keys               { return keys(c) }
func (c cassandra) Queues() Queues           { return queues(c) }
func (c cassandra) Index() Index             { return index(c) }
func (c cassandra) DeadLetters() DeadLetters { return letters(c) }
func (c cassandra) Signals() Signals         { return signals(c) }
func (c cassandra) Series() Series           { return series(c) }
func (c cassandra) Scans() Scans             { return scans(c) }

func (c cassandra) Now(ctx context.Context) (time.Time, string, error) {
	var id uuid.UUID
	iter := c.session.Iter(ctx, driver.Statement{CQL: `SELECT now() FROM system.local`})
	scanned := iter.Scan(&id)
	if err := iter.Close(); err != nil {
		return time.Time{}, "", err
	}
	if !scanned {
		return time.Time{}, "", ErrNotFound
	}
	return shard.IDTime(id), iter.Node(), nil
}
