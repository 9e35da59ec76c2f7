// Package fanout runs a bounded number of calls at once and gathers their errors.
package fanout

import (
	"errors"
	"sync"
)

// Each calls fn(i) for i in [0, n), at most limit at a time, and returns every error
// joined, after all calls have returned. A single call runs in the caller's goroutine:
// the common one-partition write then costs no goroutine, nor the growth of a fresh
// stack to the driver's depth.
func Each(n, limit int, fn func(i int) error) error {
	if n == 1 {
		return fn(0)
	}
	if limit < 1 {
		limit = 1
	}
	errs := make([]error, n)
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
