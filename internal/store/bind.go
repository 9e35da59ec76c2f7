package store

import (
	"sync"
	"weak"

	"github.com/gocql/gocql"
)

// bound holds the Store that Bind gave a session.
var bound sync.Map // weak.Pointer[gocql.Session] -> Store

// For returns the Store that Bind gave session, or else session's Cassandra tables: the
// public calls that take a session and keep no state (CreateQueue, PauseQueue) act on
// the store the simulator binds to its placeholder sessions, as the parts built on
// sessionstate do.
func For(session *gocql.Session) Store {
	if st, ok := bound.Load(weak.Make(session)); ok {
		return st.(Store)
	}
	return Cassandra(session)
}

// Bind makes For(session) return st until unbind is called.
func Bind(session *gocql.Session, st Store) (unbind func()) {
	key := weak.Make(session)
	bound.Store(key, st)
	return func() { bound.CompareAndDelete(key, st) }
}
