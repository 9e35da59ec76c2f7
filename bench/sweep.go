package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shardq/shardq/shardqtype"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

type point struct {
	shards, consumers, batch int
	bucket                   time.Duration
	drain, p99               float64
}

func (p point) label() string {
	return fmt.Sprintf("s%d b%v c%d n%d", p.shards, p.bucket, p.consumers, p.batch)
}

// sweep runs a burst of -sweep-tasks at every point of the grid shard count × bucket
// duration × consumers × batch size, prints the table, draws drain tasks/s and
// lateness p99 (delivery − due) against the grid, and recommends the point that meets
// -target-rate and -target-p99.
func (b *bench) sweep(ctx context.Context) error {
	if b.o.targetRate < 0 || b.o.targetP99 < 0 {
		return fmt.Errorf("-target-rate %v, -target-p99 %v: want neither negative", b.o.targetRate, b.o.targetP99)
	}
	shards, err1 := ints(b.o.sweepShards)
	buckets, err2 := durations(b.o.sweepBuckets)
	consumers, err3 := ints(b.o.sweepConsumers)
	batches, err4 := ints(b.o.sweepBatch)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return err
		}
	}
	var points []point
	for _, sh := range shards {
		for _, bd := range buckets {
			for _, c := range consumers {
				for _, n := range batches {
					p, err := b.sweepPoint(ctx, sh, bd, c, n)
					if err != nil {
						return fmt.Errorf("%s: %w", p.label(), err)
					}
					fmt.Fprintf(os.Stderr, "sweep %-24s %8.0f tasks/s  p99 %6.0f ms\n", p.label(), p.drain, p.p99)
					b.emit(result{"workload": "sweep", "shards": sh, "bucket_s": bd.Seconds(), "consumers": c, "batch": n,
						"tasks": b.o.sweepTasks, "drain_tasks_per_s": p.drain, "lateness_p99_ms": p.p99})
					points = append(points, p)
				}
			}
		}
	}
	if err := chart(points, b.o.chartPath); err != nil {
		return err
	}
	fmt.Printf("sweep chart: %s\n", b.o.chartPath)
	r, err := recommend(points, target{rate: b.o.targetRate, p99: b.o.targetP99})
	if err != nil {
		return err
	}
	b.emit(r.result())
	r.print(os.Stdout)
	return nil
}

func (b *bench) sweepPoint(ctx context.Context, shards int, bucket time.Duration, consumers, batch int) (point, error) {
	p := point{shards: shards, bucket: bucket, consumers: consumers, batch: batch}
	// Enough buckets for the lease timeout to fit in the lap.
	count := max(60, int(math.Ceil(float64(b.o.timeout)/float64(bucket)))+2)
	s, q, err := b.fresh(ctx, shardqtype.QueueConfig{Name: "sweep", ShardCount: shards, BucketDuration: bucket,
		BucketCount: count, DefaultTimeout: b.o.timeout})
	if err != nil {
		return p, err
	}
	n := b.o.sweepTasks
	ids, _, err := scheduleAll(ctx, s, q.Name, n, func(int) time.Time { return time.Time{} })
	if err != nil {
		return p, err
	}
	tr := newTracker(n)
	start := time.Now()
	d, err := b.drain(ctx, s, q, consumers, batch, n, tr, nil, 5*time.Minute)
	if err != nil {
		return p, err
	}
	if lost, dups := tr.lostAndDuplicates(ids, d.left); lost+dups > 0 {
		return p, fmt.Errorf("%d lost (%d task rows left in the queue), %d duplicated", lost, len(d.left), dups)
	}
	p.drain = float64(n) / tr.lastAck.Sub(start).Seconds()
	_, p.p99, _ = percentiles(tr.lateness)
	return p, nil
}

// chart draws two bar charts, one above the other, into a PNG.
func chart(points []point, path string) error {
	labels := make([]string, len(points))
	drains, p99s := make(plotter.Values, len(points)), make(plotter.Values, len(points))
	for i, p := range points {
		labels[i], drains[i], p99s[i] = p.label(), p.drain, p.p99
	}
	panel := func(title, ylabel string, vals plotter.Values) (*plot.Plot, error) {
		pl := plot.New()
		pl.Title.Text = title
		pl.Y.Label.Text = ylabel
		bars, err := plotter.NewBarChart(vals, vg.Points(14))
		if err != nil {
			return nil, err
		}
		pl.Add(bars)
		pl.NominalX(labels...)
		pl.X.Tick.Label.Rotation = math.Pi / 4
		pl.X.Tick.Label.XAlign = draw.XRight
		return pl, nil
	}
	top, err := panel("drain (tasks/s) by shards s, bucket b, consumers c, batch n", "tasks/s", drains)
	if err != nil {
		return err
	}
	bottom, err := panel("lateness p99 (delivery - due), all due at once", "ms", p99s)
	if err != nil {
		return err
	}
	img := vgimg.New(vg.Points(max(480, float64(60*len(points)))), vg.Points(640))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(10)}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	return err
}

func ints(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a list of positive numbers", list)
		}
		out = append(out, v)
	}
	return out, nil
}

func durations(list string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(list, ",") {
		v, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a list of positive durations", list)
		}
		out = append(out, v)
	}
	return out, nil
}
