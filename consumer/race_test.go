//go:build race

package consumer_test

// raceDetector is whether the tests run under the race detector.
const raceDetector = true
