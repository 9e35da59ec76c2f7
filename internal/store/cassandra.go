package store

import (
	"context"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/uuid"

	"github.com/shardq/shardq/internal/cql"
	"github.com/shardq/shardq/shard"
)

// Cassandra returns the Store of session's keyspace.
func Cassandra(session *gocql.Session) Store { return cassandra{session} }

type cassandra struct{ session *gocql.Session }

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
	var id gocql.UUID
	iter := cql.Query(c.session, `SELECT now() FROM system.local`).WithContext(ctx).Iter()
	scanned := iter.Scan(&id)
	if err := iter.Close(); err != nil {
		return time.Time{}, "", err
	}
	if !scanned {
		return time.Time{}, "", ErrNotFound
	}
	node := ""
	if h := iter.Host(); h != nil {
		node = h.HostID()
	}
	return shard.IDTime(uuid.UUID(id)), node, nil
}
