// Package cql makes the statements shardq sends, with their consistency pinned whatever
// the session's defaults are: quorum reads and writes, so a read sees every write
// acknowledged before it (a locked read at ONE could return rows the previous lock
// holder already swapped away), and SERIAL for lightweight transactions and the reads
// that settle them, matching the per-shard lock.
package cql

import "github.com/gocql/gocql"

const (
	// Consistency is the consistency of every plain read and write.
	Consistency = gocql.Quorum
	// SerialConsistency is the serial consistency of every lightweight transaction.
	SerialConsistency = gocql.Serial
)

// Query returns a statement of session with pinned consistency.
func Query(session *gocql.Session, stmt string, args ...any) *gocql.Query {
	return session.Query(stmt, args...).Consistency(Consistency).SerialConsistency(SerialConsistency)
}

// Batch returns a batch of session with pinned consistency.
func Batch(session *gocql.Session, typ gocql.BatchType) *gocql.Batch {
	b := session.NewBatch(typ)
	b.SetConsistency(Consistency)
	b.SerialConsistency(SerialConsistency)
	return b
}
