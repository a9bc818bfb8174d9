package eventstore

import "time"

// SetRelayCoalesce sets the least time between two NOTIFYs of a relay for
// a test, and returns how to restore it. Call it before any relay starts
// and restore it once they have ended.
func SetRelayCoalesce(d time.Duration) (restore func()) {
	old := relayCoalesce
	relayCoalesce = d
	return func() { relayCoalesce = old }
}
