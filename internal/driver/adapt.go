package driver

import "strings"

// What follows is shared by the adapters, whose drivers differ in their types but not in
// these.

// IsRead reports whether cql is a SELECT: the one kind of plain statement an adapter may
// send to a second node while the first still has it.
func IsRead(cql string) bool {
	s := strings.TrimSpace(cql)
	return len(s) >= 6 && strings.EqualFold(s[:6], "SELECT")
}

// TimeoutText reports whether a driver's error text says its request timed out: both
// drivers give some errors (a session's, a connection's) their cause as text only.
func TimeoutText(msg string) bool {
	return strings.Contains(msg, "within timeout") || strings.Contains(msg, "i/o timeout")
}

// Rows is what the drivers' iterators offer: Iter but Node, whose host type differs.
type Rows interface {
	Scan(dest ...any) bool
	MapScan(m map[string]any) bool
	PageState() []byte
	Close() error
}

// AdaptIter returns a driver's rows as an Iter: destinations and values of uuid.UUID go
// through the driver's own UUID type U, Close's error through wrap, and Node asks node.
func AdaptIter[U ~[16]byte](rows Rows, node func() string, wrap func(error) error) Iter {
	return adapted[U]{rows: rows, node: node, wrap: wrap}
}

type adapted[U ~[16]byte] struct {
	rows Rows
	node func() string
	wrap func(error) error
}

func (a adapted[U]) Scan(dest ...any) bool {
	d, copyBack := Dests[U](dest)
	ok := a.rows.Scan(d...)
	if ok {
		copyBack()
	}
	return ok
}

func (a adapted[U]) MapScan(m map[string]any) bool {
	ok := a.rows.MapScan(m)
	Row[U](m)
	return ok
}

func (a adapted[U]) PageState() []byte { return a.rows.PageState() }
func (a adapted[U]) Node() string      { return a.node() }
func (a adapted[U]) Close() error      { return a.wrap(a.rows.Close()) }
