package sim

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// A process's clock steps its wall time forward, and its Elapsed runs on at the drifting
// rate across the step, from readings taken before it and after it, and from a time
// derived within the step.
func TestClockStepsWallTimeOnly(t *testing.T) {
	t.Parallel()
	for _, step := range []time.Duration{3 * time.Second, time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			c := &clock{start: start, skew: 700 * time.Millisecond, drift: 150e-6, stepAt: start.Add(10 * time.Second), step: step}
			before := c.Now()
			time.Sleep(9 * time.Second)
			justBefore := c.Now()
			time.Sleep(2 * time.Second)
			after := c.Now()
			require.InDelta(t, float64(11*time.Second)*(1+c.drift), float64(c.Elapsed(before)), 10, "step %v", step)
			require.InDelta(t, float64(2*time.Second)*(1+c.drift), float64(c.Elapsed(justBefore)), 10, "step %v", step)
			require.InDelta(t, 0, float64(c.Elapsed(after)), 10, "step %v", step)
			require.InDelta(t, float64(2*time.Second)*(1+c.drift)+float64(step), float64(after.Sub(justBefore)), 10, "the wall time took the step %v", step)
			within := justBefore.Add(time.Second + step/2) // no reading falls in the step
			require.InDelta(t, float64(time.Second)*(1+c.drift), float64(c.Elapsed(within)), 10, "step %v", step)
		})
	}
}
