//go:build race

package httpapi

// raceDetector reports whether the tests run under -race, which slows the
// stream (and its reader) several times over: the stream test then checks
// frames and content only, and make bench measures the rate.
const raceDetector = true
