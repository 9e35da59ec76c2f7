// Package deadletters is the dead_letters table's letters and how long they are kept.
// Consumers write letters, producers list, replay and purge them, the inspector counts
// them, all through internal/store, which spells the statements.
package deadletters

import (
	"time"

	"github.com/google/uuid"
)

// Retention is how long a letter is kept: the table's default_time_to_live (schema.cql).
const Retention = 30 * 24 * time.Hour

// Days is how many daily partitions can hold live letters: a letter's time to live runs
// from its write, so the partition of the day Retention ago still holds the letters of its
// later hours.
const Days = int(Retention/(24*time.Hour)) + 1

// Day is the partition (UTC days since the epoch) of letters that died at t.
func Day(t time.Time) int { return int(t.Unix() / 86400) }

// Letter is one row: a task that died, with the error it died of.
type Letter struct {
	// ID identifies the letter; its time is when the task died.
	ID         uuid.UUID
	TaskID     uuid.UUID
	Queue      string
	Payload    []byte
	Priority   int
	DueAt      time.Time
	Timeout    time.Duration
	Attempt    int
	Deliveries int64 // the fencing token of the task's last delivery
	Error      string
	DiedAt     time.Time
	Headers    map[string]string // the task's; nil when it had none
	Kind       string            // the task's; empty when it had none
}
