//go:build !race

package cassandratest

// RaceDetector is whether the tests run under the race detector, which makes the
// processes of heavy tests several times slower.
const RaceDetector = false
