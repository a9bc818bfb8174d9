//go:build !race

package httpapi

// raceDetector reports whether the tests run under -race (see
// stream_race_test.go).
const raceDetector = false
