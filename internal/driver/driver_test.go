package driver_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/shardq/shardq/internal/driver"
)

// theirs stands for a driver's own UUID type.
type theirs [16]byte

// Values of uuid.UUID go to a driver as its own type, alone or in slices, maps and
// pointers; the caller's args are left as they were.
func TestArgs(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	args := []any{"k", id, &id, []uuid.UUID{id}, map[int8]uuid.UUID{1: id}, map[int]uuid.UUID{2: id}, 7}
	got := driver.Args[theirs](args)
	require.Equal(t, theirs(id), got[1])
	require.Equal(t, theirs(id), *got[2].(*theirs))
	require.Equal(t, []theirs{theirs(id)}, got[3])
	require.Equal(t, map[int8]theirs{1: theirs(id)}, got[4])
	require.Equal(t, map[int]theirs{2: theirs(id)}, got[5])
	require.Equal(t, "k", got[0])
	require.Equal(t, 7, got[6])
	require.Equal(t, id, args[1], "the caller's args are untouched")

	plain := []any{"k", 1}
	require.Equal(t, &plain[0], &driver.Args[theirs](plain)[0], "args without UUIDs are passed as they are")
}

// A scan into the driver's types lands in the caller's uuid.UUID destinations.
func TestDests(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	var one uuid.UUID
	var opt *uuid.UUID
	var list []uuid.UUID
	var floors map[int8]uuid.UUID
	var cells map[int]uuid.UUID
	var n int
	dest, copyBack := driver.Dests[theirs]([]any{&one, &opt, &list, &floors, &cells, &n})
	*dest[0].(*theirs) = theirs(id)
	*dest[1].(**theirs) = (*theirs)(&id)
	*dest[2].(*[]theirs) = []theirs{theirs(id)}
	*dest[3].(*map[int8]theirs) = map[int8]theirs{3: theirs(id)}
	*dest[4].(*map[int]theirs) = map[int]theirs{4: theirs(id)}
	*dest[5].(*int) = 5
	copyBack()
	require.Equal(t, id, one)
	require.Equal(t, id, *opt)
	require.Equal(t, []uuid.UUID{id}, list)
	require.Equal(t, map[int8]uuid.UUID{3: id}, floors)
	require.Equal(t, map[int]uuid.UUID{4: id}, cells)
	require.Equal(t, 5, n)
}

// A row scanned by column name holds uuid.UUID where the driver gave its own type.
func TestRow(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	row := map[string]any{"a": theirs(id), "b": map[int8]theirs{1: theirs(id)}, "c": map[int]theirs{2: theirs(id)}, "d": "x"}
	driver.Row[theirs](row)
	require.Equal(t, map[string]any{"a": id, "b": map[int8]uuid.UUID{1: id}, "c": map[int]uuid.UUID{2: id}, "d": "x"}, row)
}

// A refusal says nothing applied; a timeout, or an error no node sent, says nothing.
func TestErrorClasses(t *testing.T) {
	t.Parallel()
	invalid := driver.NewError(driver.CodeInvalid, false, "bad")
	require.True(t, driver.Refused(fmt.Errorf("touching: %w", invalid)))
	require.True(t, driver.NotApplied(invalid))
	require.False(t, driver.TimedOut(invalid))

	for _, code := range []int{driver.CodeUnavailable, driver.CodeOverloaded} {
		err := driver.NewError(code, false, "refused")
		require.False(t, driver.Refused(err), "sent again, it may pass")
		require.True(t, driver.NotApplied(err))
	}
	for _, err := range []error{driver.NewError(driver.CodeWriteTimeout, true, "timed out"), context.DeadlineExceeded,
		driver.Wrap(context.DeadlineExceeded, driver.Error{TimedOut: true})} {
		require.True(t, driver.TimedOut(err), "%v", err)
		require.False(t, driver.NotApplied(err))
	}
	closed := errors.New("closed")
	require.False(t, driver.NotApplied(closed))
	require.False(t, driver.Refused(nil))

	wrapped := driver.Wrap(context.Canceled, driver.Error{Unanswered: true})
	require.ErrorIs(t, wrapped, context.Canceled, "the driver's error stays its cause")
	require.True(t, driver.Unanswered(wrapped))
	require.Same(t, wrapped, driver.Wrap(wrapped, driver.Error{Code: driver.CodeInvalid}), "wrapped once")
	require.Equal(t, driver.ErrNotFound, driver.Wrap(driver.ErrNotFound, driver.Error{}))
}

// Only SELECTs are reads, however they are spelled.
func TestIsRead(t *testing.T) {
	t.Parallel()
	for _, cql := range []string{"SELECT * FROM tasks", "  select x FROM t", "\nSeLeCt 1"} {
		require.True(t, driver.IsRead(cql), cql)
	}
	for _, cql := range []string{"", "SELEC", "INSERT INTO t (a) VALUES (1)", "UPDATE t SET a = 1", "DELETE FROM t", "BEGIN BATCH SELECT"} {
		require.False(t, driver.IsRead(cql), cql)
	}
}
