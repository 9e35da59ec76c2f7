//go:build race

package worker_test

// raceDetector is whether the tests run under the race detector, which makes the
// workers' processes several times slower.
const raceDetector = true
