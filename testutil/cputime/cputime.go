// Package cputime reads the CPU time this process has used, for
// measurements on a shared machine: the wall time of a piece of work swings
// with everyone else's load, its CPU time much less, and it counts the
// work of every goroutine the piece starts.
package cputime

import "testing"

// Report, deferred after a benchmark's setup, reports the process's CPU
// time (user + system) per iteration as cpu-ns/op.
func Report(b *testing.B) func() {
	start := Process()
	return func() { b.ReportMetric(float64(Process()-start)/float64(b.N), "cpu-ns/op") }
}
