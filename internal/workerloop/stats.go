package workerloop

import (
	"sync/atomic"

	"github.com/shardq/shardq/shardqtype"
)

// stats counts what a worker did; Stats is a snapshot of it.
type stats struct {
	acquired, started, succeeded, failed, panicked, retried        atomic.Uint64
	deadLettered, acked, leaseLost, lockContended, released, polls atomic.Uint64
	expired                                                        atomic.Uint64
	running                                                        atomic.Int64
}

func (s *stats) count(e shardqtype.Event) {
	switch e := e.(type) {
	case shardqtype.TaskStarted:
		s.started.Add(1)
	case shardqtype.TaskFinished:
		if e.Err == nil {
			s.succeeded.Add(1)
		} else {
			s.failed.Add(1)
		}
		if e.Panicked {
			s.panicked.Add(1)
		}
	case shardqtype.Retried:
		s.retried.Add(1)
	case shardqtype.DeadLettered:
		s.deadLettered.Add(1)
	case shardqtype.Acked:
		s.acked.Add(uint64(e.Count))
	case shardqtype.LeaseLost:
		s.leaseLost.Add(1)
	case shardqtype.LockContended:
		s.lockContended.Add(1)
	}
}

func (s *stats) snapshot() Stats {
	return Stats{
		Acquired: s.acquired.Load(), Started: s.started.Load(), Succeeded: s.succeeded.Load(),
		Failed: s.failed.Load(), Panicked: s.panicked.Load(), Retried: s.retried.Load(),
		DeadLettered: s.deadLettered.Load(), Acked: s.acked.Load(), LeaseLost: s.leaseLost.Load(),
		LockContended: s.lockContended.Load(), Released: s.released.Load(), Expired: s.expired.Load(), Polls: s.polls.Load(),
		Running: s.running.Load(),
	}
}
