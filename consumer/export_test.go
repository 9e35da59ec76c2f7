package consumer

// SetBeforeSwap makes c call f between its locked read of a partition and its swap, so
// tests can put another consumer's move exactly there.
func SetBeforeSwap(c *Consumer, f func()) { c.beforeSwap = f }

// SetFailRead makes c's reads of a partition fail with f's error when f returns one.
func SetFailRead(c *Consumer, f func(key string) error) { c.failRead = f }
