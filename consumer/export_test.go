package consumer

import "github.com/google/uuid"

// SetBeforeSwap makes c call f between its locked read of a partition and its swap, so
// tests can put another consumer's move exactly there.
func SetBeforeSwap(c *Consumer, f func()) { c.beforeSwap = f }

// SetAfterSwap makes c pass the error its swap LWT returned through f, and go on with
// what f returns, so tests can make an applied swap look unsettled.
func SetAfterSwap(c *Consumer, f func(error) error) { c.afterSwap = f }

// SetAfterAck makes c pass the error its ack batch LWT returned through f, and go on with
// what f returns, so tests can make an applied batch look unsettled.
func SetAfterAck(c *Consumer, f func(error) error) { c.afterAck = f }

// SetFailRead makes c's reads of a partition fail with f's error when f returns one.
func SetFailRead(c *Consumer, f func(key string) error) { c.failRead = f }

// SetCrash makes c stop, as if its process died, at the steps for which f returns true:
// "swap" (after writing markers and index entries, before the swap), "swapped" (once the
// swap applied), "relocate" (after writing a lease move's index entry and new marker,
// before deleting the old marker) and "finish" (after an ack or dead letter, before
// recording it in the index). f may block, to pause c at a step while a test acts.
func SetCrash(c *Consumer, f func(step string) bool) { c.crash = f }

// SetFailLookup makes c's index reads of the tasks of rows delivered before (which it
// makes before leasing them) fail with f's error when f returns one.
func SetFailLookup(c *Consumer, f func(id uuid.UUID) error) { c.failLookup = f }
