// Package clock is the process's wall clock: what the service stamps
// events with, judges expiries and due times against, and sends to other
// processes (call deadlines, signature times). It is time.Now shifted by an
// offset that is zero in every build but the chaos suite's (the build tag
// chaosclock; see skew.go), which runs one instance of a cluster with its
// wall clock off while the rest of the machine keeps the true time: Linux
// cannot give one process its own CLOCK_REALTIME, and a Go program reads it
// through the vDSO, past any preloaded library.
//
// Durations measured within the process (time.Since of a time.Now) do not
// go through it: only instants that are compared with another process's,
// the database's or a stored one do.
package clock

import "time"

// offset is set once, by skew.go's init in a chaosclock build, before any
// goroutine reads it.
var offset time.Duration

// Now is the process's wall clock.
func Now() time.Time {
	if offset == 0 {
		return time.Now()
	}
	return time.Now().Add(offset)
}

// Offset is how far Now runs ahead of the machine's clock (negative:
// behind). A deadline read from another process (in its clock) becomes a
// local one for timers and contexts by subtracting it.
func Offset() time.Duration { return offset }
