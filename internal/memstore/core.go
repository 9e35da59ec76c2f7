package memstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
)

// The core: tables of partitions of rows kept sorted by clustering key, each row a
// marker, a deletion and cells, with Cassandra's rules for which write wins and when a
// tombstone goes. A row is always kept merged: a deletion drops what it shadows as it
// lands, so purging the deletion later loses nothing it still hid.

// defaultGCGrace is Cassandra's default gc_grace_seconds, for tables that set none.
const defaultGCGrace = 864000

// maxTTL is Cassandra's largest TTL, in seconds (20 years).
const maxTTL = 630720000

// noDeletion is the local deletion time of a cell that neither expires nor is deleted.
const noDeletion = math.MaxInt64

type table struct {
	name       string
	gcGrace    int64 // seconds
	defaultTTL int32 // seconds; 0: none
	parts      map[string]*partition
}

func newTable(name string, gcGrace int64, defaultTTL int32) *table {
	return &table{name: name, gcGrace: gcGrace, defaultTTL: defaultTTL, parts: map[string]*partition{}}
}

// partition holds its rows sorted by clustering key (ck, encoded so that byte order is
// the table's clustering order).
type partition struct {
	rows []*row
}

type row struct {
	ck     string
	key    []any // the clustering columns' values
	marker liveness
	del    deletion
	cells  map[int]cell
	maps   map[int]map[int64]cell // a map column's entries, by key
}

// cell is one column's value, or its tombstone.
type cell struct {
	ts   int64 // write timestamp, µs
	ldt  int64 // seconds: expiry of an expiring cell, deletion time of a tombstone, else noDeletion
	ttl  int32
	tomb bool
	v    any
}

func (c cell) live(sec int64) bool { return !c.tomb && sec < c.ldt }

// wins reports whether c beats old, which holds the same column (Cassandra's
// Cells.resolveRegular): the greater timestamp; on a tie a tombstone, then an expiring
// cell, beats a live one, then the later local deletion time, then the greater value.
func (c cell) wins(old cell) bool {
	if c.ts != old.ts {
		return c.ts > old.ts
	}
	ce, oe := c.tomb || c.ttl > 0, old.tomb || old.ttl > 0
	if ce || oe {
		if ce != oe {
			return ce
		}
		if c.tomb != old.tomb {
			return c.tomb
		}
		if c.ldt != old.ldt {
			return c.ldt > old.ldt
		}
	}
	return bytes.Compare(encode(c.v), encode(old.v)) > 0
}

// liveness is a row marker: what INSERT writes and UPDATE does not.
type liveness struct {
	set bool
	ts  int64
	ttl int32
	exp int64 // seconds; noDeletion when not expiring
}

func (l liveness) live(sec int64) bool { return l.set && sec < l.exp }

// supersedes is Cassandra's LivenessInfo.supersedes.
func (l liveness) supersedes(old liveness) bool {
	if !old.set || l.ts != old.ts {
		return !old.set || l.ts > old.ts
	}
	if (l.ttl > 0) == (old.ttl > 0) {
		return l.exp > old.exp
	}
	return l.ttl > 0
}

// deletion is a row's (or a single-row partition's) deletion.
type deletion struct {
	set bool
	ts  int64
	ldt int64
}

func (d deletion) shadows(ts int64) bool { return d.set && ts <= d.ts }

// live reports whether r has live data: a live marker or a live cell.
func (r *row) live(sec int64) bool {
	if r.marker.live(sec) {
		return true
	}
	for _, c := range r.cells {
		if c.live(sec) {
			return true
		}
	}
	for _, m := range r.maps {
		for _, c := range m {
			if c.live(sec) {
				return true
			}
		}
	}
	return false
}

// tombstones counts r's tombstones as a read does (ReadCommand's metrics recording):
// each dead cell, or, for a row with no live data and no dead cell, its deletion or
// expired marker.
func (r *row) tombstones(sec int64) int {
	n := 0
	for _, c := range r.cells {
		if !c.live(sec) {
			n++
		}
	}
	for _, m := range r.maps {
		for _, c := range m {
			if !c.live(sec) {
				n++
			}
		}
	}
	if n == 0 && !r.live(sec) && (r.del.set || r.marker.set) {
		n = 1
	}
	return n
}

// purge drops what is dead and older than gcBefore (seconds), as compaction does once
// gc_grace_seconds have passed, and reports whether r is left empty. An expired cell
// or marker counts from its expiry.
func (r *row) purge(sec, gcBefore int64) bool {
	for col, c := range r.cells {
		if !c.live(sec) && c.ldt < gcBefore {
			delete(r.cells, col)
		}
	}
	for col, m := range r.maps {
		for k, c := range m {
			if !c.live(sec) && c.ldt < gcBefore {
				delete(m, k)
			}
		}
		if len(m) == 0 {
			delete(r.maps, col)
		}
	}
	if r.marker.set && !r.marker.live(sec) && r.marker.exp < gcBefore {
		r.marker = liveness{}
	}
	if r.del.set && r.del.ldt < gcBefore {
		r.del = deletion{}
	}
	return len(r.cells) == 0 && len(r.maps) == 0 && !r.marker.set && !r.del.set
}

// value is column col's live value, nil when it has none.
func (r *row) value(col int, sec int64) any {
	if r == nil {
		return nil
	}
	if c, ok := r.cells[col]; ok && c.live(sec) {
		return c.v
	}
	return nil
}

// stamp is column col's write timestamp while it is live.
func (r *row) stamp(col int, sec int64) (int64, bool) {
	if c, ok := r.cells[col]; ok && c.live(sec) {
		return c.ts, true
	}
	return 0, false
}

// cellTTL is what TTL(col) reads: the seconds left of a live expiring cell.
func (r *row) cellTTL(col int, sec int64) (int64, bool) {
	if c, ok := r.cells[col]; ok && c.live(sec) && c.ttl > 0 {
		return c.ldt - sec, true
	}
	return 0, false
}

// entry is one live entry of a map column.
type entry struct {
	k  int64
	v  any
	ts int64
}

// entries are map column col's live entries, in key order.
func (r *row) entries(col int, sec int64) []entry {
	var out []entry
	for k, c := range r.maps[col] {
		if c.live(sec) {
			out = append(out, entry{k, c.v, c.ts})
		}
	}
	slices.SortFunc(out, func(a, b entry) int { return cmpInt(a.k, b.k) })
	return out
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// op is one statement's change to one row.
type op struct {
	ck     string
	key    []any
	insert bool // INSERT: writes the row marker
	delete bool // DELETE of the row
	sets   []set
	adds   []add
	ttl    int32 // seconds; 0: none
}

// set writes a column; a nil value writes its tombstone, as binding null does.
type set struct {
	col int
	v   any
}

// add writes an entry of a map column (m = m + {k: v}).
type add struct {
	col int
	k   int64
	v   any
}

// at returns the partition pk of t, made when make is set.
func (t *table) at(pk string, make bool) *partition {
	p := t.parts[pk]
	if p == nil && make {
		p = &partition{}
		t.parts[pk] = p
	}
	return p
}

// find returns the index of the first row whose ck is not below ck.
func (p *partition) find(ck string) int {
	return sort.Search(len(p.rows), func(i int) bool { return p.rows[i].ck >= ck })
}

// get returns p's row at ck after purging it, or nil.
func (s *state) get(t *table, pk, ck string) *row {
	p := t.parts[pk]
	if p == nil {
		return nil
	}
	i := p.find(ck)
	if i == len(p.rows) || p.rows[i].ck != ck {
		return nil
	}
	r := p.rows[i]
	if r.purge(s.sec, s.sec-t.gcGrace) {
		p.rows = slices.Delete(p.rows, i, i+1)
		return nil
	}
	return r
}

// apply writes o to partition pk of t at write timestamp ts.
func (s *state) apply(t *table, pk string, o op, ts int64) {
	p := t.at(pk, true)
	i := p.find(o.ck)
	if i == len(p.rows) || p.rows[i].ck != o.ck {
		p.rows = slices.Insert(p.rows, i, &row{ck: o.ck, key: o.key})
	}
	r := p.rows[i]
	r.purge(s.sec, s.sec-t.gcGrace) // a purged tombstone no longer shadows a late write
	if o.delete {
		if d := (deletion{set: true, ts: ts, ldt: s.sec}); !r.del.set || d.ts > r.del.ts || (d.ts == r.del.ts && d.ldt > r.del.ldt) {
			r.del = d
		}
		r.shadow()
	}
	exp := int64(noDeletion)
	if o.ttl > 0 {
		exp = s.sec + int64(o.ttl)
	}
	if o.insert && !r.del.shadows(ts) {
		if m := (liveness{set: true, ts: ts, ttl: o.ttl, exp: exp}); m.supersedes(r.marker) {
			r.marker = m
		}
	}
	mk := func(v any) cell {
		if v == nil {
			return cell{ts: ts, ldt: s.sec, tomb: true}
		}
		return cell{ts: ts, ldt: exp, ttl: o.ttl, v: v}
	}
	for _, w := range o.sets {
		c := mk(w.v)
		if r.del.shadows(ts) {
			continue
		}
		if old, ok := r.cells[w.col]; !ok || c.wins(old) {
			if r.cells == nil {
				r.cells = map[int]cell{}
			}
			r.cells[w.col] = c
		}
	}
	for _, w := range o.adds {
		c := mk(w.v)
		if r.del.shadows(ts) {
			continue
		}
		if r.maps == nil {
			r.maps = map[int]map[int64]cell{}
		}
		m := r.maps[w.col]
		if m == nil {
			m = map[int64]cell{}
			r.maps[w.col] = m
		}
		if old, ok := m[w.k]; !ok || c.wins(old) {
			m[w.k] = c
		}
	}
}

// shadow drops what r's deletion shadows.
func (r *row) shadow() {
	if r.del.shadows(r.marker.ts) {
		r.marker = liveness{}
	}
	for col, c := range r.cells {
		if r.del.shadows(c.ts) {
			delete(r.cells, col)
		}
	}
	for col, m := range r.maps {
		for k, c := range m {
			if r.del.shadows(c.ts) {
				delete(m, k)
			}
		}
		if len(m) == 0 {
			delete(r.maps, col)
		}
	}
}

// slice is a range of clustering keys: from lo (or the partition's start when lo is ""
// and loIn), to hi (or its end when open).
type slice struct {
	lo, hi     string
	loIn, hiIn bool
	open       bool
}

// point is the slice of the one row at ck.
func point(ck string) slice { return slice{lo: ck, hi: ck, loIn: true, hiIn: true} }

// whole is the slice of every row of a partition.
var whole = slice{loIn: true, open: true}

func (sl slice) below(ck string) bool { return ck < sl.lo || (ck == sl.lo && !sl.loIn) }
func (sl slice) above(ck string) bool {
	return !sl.open && (ck > sl.hi || (ck == sl.hi && !sl.hiIn))
}

// normalize sorts slices in clustering order and drops repeats, as a read of a
// clustering IN list does.
func normalize(sls []slice) []slice {
	sls = slices.Clone(sls)
	slices.SortFunc(sls, func(a, b slice) int { return bytes.Compare([]byte(a.lo), []byte(b.lo)) })
	return slices.CompactFunc(sls, func(a, b slice) bool { return a == b })
}

// read walks partition pk of t within sls (normalized), past the row at after (""
// none), and passes up to limit rows with live data to emit, purging what it passes and
// counting tombstones: more than the threshold fails the read. It returns the rows
// emitted and the ck of the last.
func (s *state) read(t *table, pk string, sls []slice, after string, limit int, serial bool, emit func(*row)) (int, string, error) {
	p := t.parts[pk]
	if p == nil {
		return 0, after, nil
	}
	n, dead, emptied := 0, 0, false
	last := after
	defer func() {
		if emptied {
			p.rows = slices.DeleteFunc(p.rows, func(r *row) bool { return r.purge(s.sec, s.sec-t.gcGrace) })
		}
	}()
	for _, sl := range sls {
		start := sl.lo
		if after > start {
			start = after
		}
		for i := p.find(start); i < len(p.rows) && n < limit; i++ {
			r := p.rows[i]
			if sl.below(r.ck) || (after != "" && r.ck <= after) {
				continue
			}
			if sl.above(r.ck) {
				break
			}
			if r.purge(s.sec, s.sec-t.gcGrace) {
				emptied = true
				continue
			}
			if dead += r.tombstones(s.sec); dead > s.c.threshold {
				return n, last, tooManyTombstones(serial)
			}
			if r.live(s.sec) {
				emit(r)
				n++
				last = r.ck
			}
		}
	}
	return n, last, nil
}

// Values as stored: the Go types the driver reads back (int8 tinyint, int32 int, int64
// bigint, bool, string text, []byte blob, uuid.UUID (time)uuid, time.Time timestamp to
// the millisecond in UTC, the zero time being the empty value the driver writes for it,
// map[string]string frozen<map<text, text>>).

// encode is v serialized as CQL does, for comparing values as Cassandra does.
func encode(v any) []byte {
	switch x := v.(type) {
	case int8:
		return []byte{byte(x)}
	case int32:
		return binary.BigEndian.AppendUint32(nil, uint32(x))
	case int64:
		return binary.BigEndian.AppendUint64(nil, uint64(x))
	case bool:
		if x {
			return []byte{1}
		}
		return []byte{0}
	case string:
		return []byte(x)
	case []byte:
		return x
	case uuid.UUID:
		return x[:]
	case time.Time:
		if x.IsZero() {
			return nil
		}
		return binary.BigEndian.AppendUint64(nil, uint64(millis(x)))
	case map[string]string:
		// A frozen map serializes its entries in key order.
		var b []byte
		for _, k := range slices.Sorted(maps.Keys(x)) {
			b = binary.BigEndian.AppendUint32(b, uint32(len(k)))
			b = append(b, k...)
			b = binary.BigEndian.AppendUint32(b, uint32(len(x[k])))
			b = append(b, x[k]...)
		}
		return b
	}
	return nil
}

// equal reports whether a condition's value v (nil: null) holds of stored (nil: none).
func equal(stored, v any) bool {
	if stored == nil || v == nil {
		return stored == nil && v == nil
	}
	return bytes.Equal(encode(stored), encode(v))
}

// millis is t as gocql sends a timestamp.
func millis(t time.Time) int64 { return t.UTC().Unix()*1e3 + int64(t.UTC().Nanosecond()/1e6) }

// timestamp is t as stored and read back through gocql.
func timestamp(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	x := millis(t)
	sec := x / 1000
	return time.Unix(sec, (x-sec*1000)*1000000).In(time.UTC)
}

// blob is b as stored: a copy, nil (null, a tombstone) for a nil slice.
func blob(b []byte) any {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}

// readBlob is a stored blob as the driver reads it: an empty one reads as nil.
func readBlob(v any) []byte {
	b, _ := v.([]byte)
	if len(b) == 0 {
		return nil
	}
	return bytes.Clone(b)
}

// Clustering keys, encoded so that byte order is clustering order.

func ckInt8(v int8, desc bool) string {
	b := byte(v) ^ 0x80
	if desc {
		b = ^b
	}
	return string([]byte{b})
}

func ckInt64(v int64) string {
	return string(binary.BigEndian.AppendUint64(nil, uint64(v)^1<<63))
}

// ckUUID orders timeuuids as Cassandra's TimeUUIDType: by version and time, then by
// the last eight bytes compared as signed bytes.
func ckUUID(u uuid.UUID, desc bool) string {
	b := []byte{u[6], u[7], u[4], u[5], u[0], u[1], u[2], u[3]}
	for _, x := range u[8:] {
		b = append(b, x^0x80)
	}
	if desc {
		for i := range b {
			b[i] = ^b[i]
		}
	}
	return string(b)
}

// validTimeUUID reports whether Cassandra accepts u in a timeuuid column: a version 1
// UUID.
func validTimeUUID(u uuid.UUID) bool { return u[6]&0xf0 == 0x10 }

// ttlSeconds checks a bound TTL as a node does.
func ttlSeconds(ttl int64) (int32, error) {
	switch {
	case ttl < 0:
		return 0, invalid(fmt.Sprintf("A TTL must be greater or equal to 0, but was %d", ttl))
	case ttl > maxTTL:
		return 0, invalid(fmt.Sprintf("ttl is too large. requested (%d) maximum (%d)", ttl, maxTTL))
	}
	return int32(ttl), nil
}
