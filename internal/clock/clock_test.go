package clock

import (
	"testing"
	"time"
)

func TestNowIsTheMachineClockWithoutAnOffset(t *testing.T) {
	if Offset() != 0 {
		t.Skip("built with a skew")
	}
	before := time.Now()
	now := Now()
	after := time.Now()
	if now.Before(before) || now.After(after) {
		t.Fatalf("Now() = %s, want between %s and %s", now, before, after)
	}
}

func TestNowRunsOffsetFromTheMachineClock(t *testing.T) {
	saved := offset
	defer func() { offset = saved }()
	for _, off := range []time.Duration{4 * time.Second, -4 * time.Second} {
		offset = off
		before := time.Now().Add(off)
		now := Now()
		after := time.Now().Add(off)
		if now.Before(before) || now.After(after) {
			t.Fatalf("offset %s: Now() = %s, want between %s and %s", off, now, before, after)
		}
		if got := now.Round(0).Sub(time.Now().Round(0)); got < off-time.Second || got > off+time.Second {
			t.Fatalf("offset %s: the wall clock is %s from the machine's", off, got)
		}
	}
}
