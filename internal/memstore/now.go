package memstore

import (
	"context"
	"time"
)

// Now reads the servers' clock, as SELECT now() FROM system.local does. The simulated
// cluster keeps one clock, so no node is named.
func (cl *client) Now(ctx context.Context) (time.Time, string, error) {
	var at time.Time
	err := cl.exec(ctx, Request{Table: "system.local", Op: "Now"}, func(s *state) error {
		at = s.c.now()
		return nil
	})
	return at, "", err
}
