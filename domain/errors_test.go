package domain

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
)

func TestErrorBuildersLeaveTheReceiverUnchanged(t *testing.T) {
	cause := errors.New("cause")
	orig := Errorf(CodeDeviceBusy, "busy").With("reason", "already_leased")

	got := orig.With("deviceId", "dev_1").WithRetryable(true).Wrap(cause)

	if got == orig {
		t.Fatal("builders returned the receiver itself")
	}
	if len(orig.Extra) != 1 || orig.Extra["reason"] != "already_leased" {
		t.Fatalf("receiver's Extra changed: %v", orig.Extra)
	}
	if orig.Retryable != nil || orig.Err != nil {
		t.Fatalf("receiver changed: retryable %v, err %v", orig.Retryable, orig.Err)
	}
	if got.Code != CodeDeviceBusy || got.Message != "busy" {
		t.Fatalf("copy lost code or message: %+v", got)
	}
	if got.Extra["reason"] != "already_leased" || got.Extra["deviceId"] != "dev_1" || len(got.Extra) != 2 {
		t.Fatalf("copy's Extra = %v", got.Extra)
	}
	if got.Retryable == nil || !*got.Retryable || !errors.Is(got, cause) {
		t.Fatalf("copy's retryable %v, err %v", got.Retryable, got.Err)
	}

	// Two builders on one receiver do not see each other's fields.
	a, b := orig.With("k", "a"), orig.With("k", "b")
	if a.Extra["k"] != "a" || b.Extra["k"] != "b" {
		t.Fatalf("siblings share Extra: a %v, b %v", a.Extra, b.Extra)
	}

	// With on an error with no Extra yet leaves its Extra nil.
	bare := &Error{Code: CodeInternal, Message: "x"}
	_ = bare.With("k", 1)
	if bare.Extra != nil {
		t.Fatalf("bare error's Extra = %v, want nil", bare.Extra)
	}
}

// A shared error value (a sentinel) gets builder calls from many goroutines
// at once; run with -race.
func TestErrorBuildersOnASharedErrorAreRaceFree(t *testing.T) {
	shared := Errorf(CodeDeviceUnavailable, "unavailable").With("reason", "offline")
	const n = 32
	out := make([]*Error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := shared.With("deviceId", fmt.Sprintf("dev_%d", i)).With("attempt", i)
			if i%2 == 0 {
				e = e.WithRetryable(true)
			}
			out[i] = e.Wrap(fmt.Errorf("cause %d", i))
			_ = shared.Error() // concurrent reads of the receiver
			_ = shared.Extra["reason"]
		}()
	}
	wg.Wait()
	if len(shared.Extra) != 1 || shared.Retryable != nil || shared.Err != nil {
		t.Fatalf("shared error changed: %+v", shared)
	}
	for i, e := range out {
		if e.Extra["deviceId"] != fmt.Sprintf("dev_%d", i) || e.Extra["attempt"] != i || e.Extra["reason"] != "offline" {
			t.Fatalf("error %d: Extra = %v", i, e.Extra)
		}
		if (e.Retryable != nil) != (i%2 == 0) {
			t.Fatalf("error %d: retryable %v", i, e.Retryable)
		}
	}
}

// TestMCPCodes pins the 18 codes marked MCP in spec 7.2, spelled as the spec
// spells them, and checks that the list is its own (not a view of RESTCodes).
func TestMCPCodes(t *testing.T) {
	want := []string{
		"backend_resolution_failed", "backend_not_implemented", "device_unavailable",
		"device_disconnected", "lease_mismatch", "lease_required", "capability_unsupported",
		"invalid_argument", "backend_command_failed", "idempotency_conflict",
		"action_outcome_unknown", "stale_frame", "internal_error", "unauthorized",
		"permission_denied", "run_not_found", "frame_not_found", "device_busy",
	}
	if len(MCPCodes) != len(want) {
		t.Fatalf("got %d MCP codes; want %d", len(MCPCodes), len(want))
	}
	seen := map[Code]bool{}
	for i, c := range MCPCodes {
		if string(c) != want[i] {
			t.Errorf("MCPCodes[%d] = %s; want %s", i, c, want[i])
		}
		if seen[c] {
			t.Errorf("MCP code %s listed twice", c)
		}
		seen[c] = true
		if !slices.Contains(RESTCodes, c) {
			t.Errorf("MCP code %s is not a control-surface code", c)
		}
	}
	if &MCPCodes[0] == &RESTCodes[0] {
		t.Error("MCPCodes is a slice of RESTCodes; appending to it would overwrite RESTCodes")
	}
}
