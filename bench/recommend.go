package main

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// headroom is how much faster than the target rate a point must have drained. A queue
// drained at exactly its load never works off a backlog (from a stall, a deploy, a
// burst); at 1.5x a backlog built in T clears in 2T. The bench's handlers also do no
// work, where a live queue's do.
const headroom = 1.5

// gcGrace is schema.cql's gc_grace_seconds, which a lap must exceed (docs/operations.md, Tuning).
const gcGrace = 600 * time.Second

var errNoPoints = errors.New("no sweep points to choose from")

// target is the load a recommendation is for.
type target struct {
	rate float64       // tasks/s the queue must sustain; 0: none, the fastest point wins
	p99  time.Duration // the most lateness p99 allowed; 0: no bound
}

// recommendation is the sweep point chosen for a target, with the bucket count that
// makes its lap exceed gcGrace.
type recommendation struct {
	point
	want        target
	bucketCount int
	met         bool
	reason      string // when !met: what no point reached
}

// recommend chooses among the points measured: the cheapest (fewest shards, then fewest
// consumers, then the fastest) that drained at least headroom × t.rate with a lateness
// p99 within t.p99; with no rate, the fastest within t.p99. When none qualifies it
// returns the fastest point, not met, and says why.
func recommend(points []point, t target) (recommendation, error) {
	if len(points) == 0 {
		return recommendation{}, errNoPoints
	}
	need := t.rate * headroom
	fastEnough := func(p point) bool { return p.drain >= need }
	onTime := func(p point) bool { return t.p99 == 0 || p.p99 <= ms(t.p99) }
	// faster breaks ties by lateness, so that a choice does not depend on the grid's order.
	faster := func(p, q point) bool { return p.drain > q.drain || p.drain == q.drain && p.p99 < q.p99 }
	cheaper := func(p, q point) bool {
		if t.rate == 0 {
			return faster(p, q)
		}
		if p.shards != q.shards {
			return p.shards < q.shards
		}
		if p.consumers != q.consumers {
			return p.consumers < q.consumers
		}
		return faster(p, q)
	}
	var chosen, fastest *point
	anyFastEnough := false
	for i := range points {
		p := &points[i]
		if fastest == nil || faster(*p, *fastest) {
			fastest = p
		}
		anyFastEnough = anyFastEnough || fastEnough(*p)
		if fastEnough(*p) && onTime(*p) && (chosen == nil || cheaper(*p, *chosen)) {
			chosen = p
		}
	}
	r := recommendation{point: *fastest, want: t, met: chosen != nil}
	switch {
	case chosen != nil:
		r.point = *chosen
	case !anyFastEnough:
		r.reason = fmt.Sprintf("no point drained %.0f tasks/s (%.0f x %.1f headroom)", need, t.rate, headroom)
	case t.rate > 0:
		r.reason = fmt.Sprintf("no point that drained %.0f tasks/s (%.0f x %.1f headroom) had a lateness p99 within %v", need, t.rate, headroom, t.p99)
	default:
		r.reason = fmt.Sprintf("no point had a lateness p99 within %v", t.p99)
	}
	// The least count whose lap exceeds gcGrace: a worker's first poll and `shardq stats`
	// read every partition of the lap.
	r.bucketCount = int(gcGrace/r.bucket) + 1
	return r, nil
}

func (r recommendation) lap() time.Duration { return time.Duration(r.bucketCount) * r.bucket }

// command is the shardq command that gives a live queue the recommended layout.
func (r recommendation) command() string {
	return fmt.Sprintf("shardq queue resize NAME --shards %d --bucket %v --buckets %d", r.shards, r.bucket, r.bucketCount)
}

// result is the recommendation as a JSON line of the sweep.
func (r recommendation) result() result {
	res := result{"workload": "sweep-recommendation", "target_rate": r.want.rate, "target_p99_ms": ms(r.want.p99),
		"headroom": headroom, "met": r.met, "shards": r.shards, "bucket_s": r.bucket.Seconds(),
		"bucket_count": r.bucketCount, "lap_s": r.lap().Seconds(), "consumers": r.consumers, "batch": r.batch,
		"drain_tasks_per_s": r.drain, "lateness_p99_ms": r.p99, "command": r.command()}
	if !r.met {
		res["reason"] = r.reason
	}
	return res
}

// print writes the recommendation for a reader: the target, the layout and how to apply it.
func (r recommendation) print(w io.Writer) {
	want := "the fastest drain"
	if r.want.rate > 0 {
		want = fmt.Sprintf(">= %.0f tasks/s (%.0f with %.1fx headroom)", r.want.rate, r.want.rate*headroom, headroom)
	}
	if r.want.p99 > 0 {
		want += fmt.Sprintf(", lateness p99 <= %v", r.want.p99)
	}
	fmt.Fprintf(w, "\nsweep recommendation for %s:\n", want)
	if !r.met {
		fmt.Fprintf(w, "  NOT MET: %s; the fastest point instead:\n", r.reason)
	}
	fmt.Fprintf(w, "  %d shards, %d x %v buckets (lap %v > gc_grace_seconds %v), %d consumers taking %d tasks per AcquireTasks\n",
		r.shards, r.bucketCount, r.bucket, r.lap(), gcGrace, r.consumers, r.batch)
	fmt.Fprintf(w, "  measured: %.0f tasks/s, lateness p99 %.0f ms\n", r.drain, r.p99)
	fmt.Fprintf(w, "  apply to a live queue: %s\n", r.command())
	fmt.Fprintf(w, "  in Go: shardq.ChangeLayout(ctx, d, NAME, shardqtype.LayoutConfig{ShardCount: %d, BucketDuration: %d * time.Millisecond, BucketCount: %d})\n",
		r.shards, r.bucket.Milliseconds(), r.bucketCount)
}
