package consumer

// SetBeforeSwap makes c call f between its locked read of a partition and its swap, so
// tests can put another consumer's move exactly there.
func SetBeforeSwap(c *Consumer, f func()) { c.beforeSwap = f }
