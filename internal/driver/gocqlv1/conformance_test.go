package gocqlv1_test

import (
	"testing"

	"github.com/shardq/shardq/internal/cassandratest"
	"github.com/shardq/shardq/internal/driver"
	"github.com/shardq/shardq/internal/driver/drivertest"
	"github.com/shardq/shardq/internal/driver/gocqlv1"
)

// The adapter meets the expectations every driver's adapter is held to. Its session has
// the timeout of sessions that change the schema: the suite creates a table per case.
func TestConformance(t *testing.T) {
	t.Parallel()
	drivertest.Run(t, func(t *testing.T) driver.Session { return gocqlv1.New(cassandratest.DDLSession(t)) })
}
