//go:build !race

package consumer_test

const raceDetector = false
