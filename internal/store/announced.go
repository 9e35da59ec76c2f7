package store

import (
	"context"

	"github.com/shardq/shardq/internal/taskrow"
)

// Announce is called with the task rows and markers about to be written, and returns
// once their signal cells were touched (signal.Announcer); an error keeps them unwritten.
type Announce func(ctx context.Context, rows []taskrow.Row) error

// Announced returns s whose writes of task rows and markers (Tasks.Write and Apply,
// Leasing.WriteMarkers and ReplaceMarker) call announce first, and are not sent when it
// fails. Every writer of the tasks table goes through it, so the proof consumers take
// from an untouched cell holds whichever path wrote.
func Announced(s Store, announce Announce) Store {
	return &announced{Store: s, announce: announce}
}

type announced struct {
	Store
	announce Announce
}

func (a *announced) Tasks() Tasks {
	return announcedTasks{Tasks: a.Store.Tasks(), announce: a.announce}
}
func (a *announced) Leasing() Leasing {
	return announcedLeasing{Leasing: a.Store.Leasing(), announce: a.announce}
}

type announcedTasks struct {
	Tasks
	announce Announce
}

// inserted lists the rows muts insert.
func inserted(muts []Mutation) []taskrow.Row {
	var rows []taskrow.Row
	for _, m := range muts {
		if m.Op == Insert {
			rows = append(rows, m.Row)
		}
	}
	return rows
}

func (t announcedTasks) Write(ctx context.Context, muts []Mutation) error {
	if err := t.announce(ctx, inserted(muts)); err != nil {
		return err
	}
	return t.Tasks.Write(ctx, muts)
}

func (t announcedTasks) Apply(ctx context.Context, muts []Mutation) (bool, error) {
	if err := t.announce(ctx, inserted(muts)); err != nil {
		return false, err
	}
	return t.Tasks.Apply(ctx, muts)
}

type announcedLeasing struct {
	Leasing
	announce Announce
}

func (l announcedLeasing) WriteMarkers(ctx context.Context, rows []taskrow.Row, ts int64, inFlight int) error {
	if err := l.announce(ctx, rows); err != nil {
		return err
	}
	return l.Leasing.WriteMarkers(ctx, rows, ts, inFlight)
}

func (l announcedLeasing) ReplaceMarker(ctx context.Context, from, to taskrow.Row) (bool, error) {
	if err := l.announce(ctx, []taskrow.Row{to}); err != nil {
		return false, err
	}
	return l.Leasing.ReplaceMarker(ctx, from, to)
}
