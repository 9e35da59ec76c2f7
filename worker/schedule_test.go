package worker_test

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/shardq/shardq/producer"
)

// scheduleAgain schedules tasks as a service under load would: the tasks of a write not
// confirmed (a timeout on a busy node) are scheduled again, up to five tries in all. ids
// holds, in order, each task's ID whose write was confirmed; unsure maps the IDs of
// writes not confirmed, which may have applied all the same and then run too, to their
// task's index in tasks.
func scheduleAgain(ctx context.Context, p *producer.Producer, tasks []producer.Task) (ids []uuid.UUID, unsure map[uuid.UUID]int, err error) {
	ids = make([]uuid.UUID, len(tasks))
	unsure = map[uuid.UUID]int{}
	todo := make([]int, len(tasks))
	for i := range todo {
		todo[i] = i
	}
	for try := 1; ; try++ {
		batch := make([]producer.Task, len(todo))
		for j, i := range todo {
			batch[j] = tasks[i]
		}
		got, err := p.ScheduleTasks(ctx, batch)
		var partial *producer.PartialError
		if err != nil && (!errors.As(err, &partial) || try == 5) {
			return nil, unsure, err
		}
		failed := map[int]bool{}
		if partial != nil {
			for _, f := range partial.Failed {
				failed[f] = true
			}
		}
		var again []int
		for j, i := range todo {
			if failed[j] {
				unsure[got[j]] = i
				again = append(again, i)
				continue
			}
			ids[i] = got[j]
		}
		if len(again) == 0 {
			return ids, unsure, nil
		}
		todo = again
	}
}
