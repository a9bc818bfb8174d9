package eventstore_test

import (
	"context"
	"testing"

	"phonefleet/eventstore"
	"phonefleet/testutil"
)

// In a shared batch, adjacent single-event appends to distinct streams
// are one statement; anything else, a stream or an event met again in the
// run, and every op of a unit written alone keep a statement of their own.
func TestSharedBatchWritesAdjacentSingleEventAppendsAsOneStatement(t *testing.T) {
	ctx := context.Background()
	s := eventstore.New(nil)
	same := ev("x", `{}`)
	same.ID = [16]byte{1}
	for _, c := range []struct {
		name  string
		units []*eventstore.Unit
		want  string
	}{
		{"units of one single-event append each", []*eventstore.Unit{
			(&eventstore.Unit{}).Append("a", eventstore.NoStream, ev("x", `{}`)),
			(&eventstore.Unit{}).Append("b", 3, ev("x", `{}`)),
			(&eventstore.Unit{}).Append("c", eventstore.AnyVersion, ev("x", `{}`)),
		}, "0.0+1.0+2.0"},
		{"a run spans units and ends at anything else", []*eventstore.Unit{
			(&eventstore.Unit{}).Append("a", eventstore.NoStream, ev("x", `{}`)).Append("b", eventstore.AnyVersion, ev("x", `{}`)),
			(&eventstore.Unit{}).Append("c", eventstore.AnyVersion, ev("x", `{}`)).Exec(`SELECT 1`).Append("d", eventstore.AnyVersion, ev("x", `{}`)),
			(&eventstore.Unit{}).Expect("a", 1).Append("e", eventstore.NoStream, ev("x", `{}`)),
			(&eventstore.Unit{}).Append("f", eventstore.AnyVersion, ev("x", `{}`), ev("x", `{}`)),
			(&eventstore.Unit{}).Append("g", eventstore.AnyVersion, ev("x", `{}`)),
		}, "0.0+0.1+1.0 1.1 1.2 2.0 2.1 3.0 4.0"},
		{"a stream met again starts a new run", []*eventstore.Unit{
			(&eventstore.Unit{}).Append("a", eventstore.AnyVersion, ev("x", `{}`)),
			(&eventstore.Unit{}).Append("b", eventstore.AnyVersion, ev("x", `{}`)),
			(&eventstore.Unit{}).Append("a", eventstore.AnyVersion, ev("x", `{}`)),
		}, "0.0+1.0 2.0"},
		{"an event id met again starts a new run", []*eventstore.Unit{
			(&eventstore.Unit{}).Append("a", eventstore.AnyVersion, same),
			(&eventstore.Unit{}).Append("b", eventstore.AnyVersion, same),
		}, "0.0 1.0"},
		{"a unit alone", []*eventstore.Unit{
			(&eventstore.Unit{}).Append("a", eventstore.NoStream, ev("x", `{}`)).Append("b", eventstore.NoStream, ev("x", `{}`)),
		}, "0.0 0.1"},
	} {
		got, err := eventstore.SharedStatements(ctx, s, c.units...)
		if err != nil {
			t.Fatal(err)
		}
		if got != c.want {
			t.Errorf("%s: statements %q; want %q", c.name, got, c.want)
		}
	}
}

// A run written as one statement appends what its appends would one by
// one: each stream at its own expectation, in the units' order, in one
// transaction; and a failed expectation fails the whole batch, leaving
// nothing behind.
func TestSharedRunAppendsAsItsAppendsWould(t *testing.T) {
	ctx := context.Background()
	s := eventstore.New(testutil.FreshPool(t))
	if _, err := s.Append(ctx, "exact", eventstore.NoStream, ev("x", `{"n":1}`), ev("x", `{"n":2}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "end", eventstore.NoStream, ev("x", `{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	units := []*eventstore.Unit{
		(&eventstore.Unit{}).Append("new", eventstore.NoStream, ev("y", `{"n":1}`)),
		(&eventstore.Unit{}).Append("exact", 2, ev("y", `{"n":3}`)),
		(&eventstore.Unit{}).Append("end", eventstore.AnyVersion, ev("y", `{"n":2}`)),
		(&eventstore.Unit{}).Append("absent", eventstore.AnyVersion, ev("y", `{"n":1}`)),
	}
	if got, err := eventstore.SharedStatements(ctx, s, units...); err != nil || got != "0.0+1.0+2.0+3.0" {
		t.Fatalf("statements %q (%v); want one", got, err)
	}
	cs, err := eventstore.SendShared(ctx, s, units...)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		stream  string
		version int64
	}{{"new", 1}, {"exact", 3}, {"end", 2}, {"absent", 1}}
	var last int64
	for i, c := range cs {
		if len(c.Appends) != 1 {
			t.Fatalf("unit %d: %d appends; want 1", i, len(c.Appends))
		}
		a := c.Appends[0]
		if a.Version != want[i].version || a.FirstPosition != a.LastPosition || a.FirstPosition <= last {
			t.Errorf("unit %d: %+v; want version %d at a position after %d", i, a, want[i].version, last)
		}
		if a.TransactionID == 0 || a.TransactionID != cs[0].Appends[0].TransactionID {
			t.Errorf("unit %d: transaction %d; want the batch's one (%d)", i, a.TransactionID, cs[0].Appends[0].TransactionID)
		}
		last = a.FirstPosition
		evs, err := s.Load(ctx, want[i].stream, want[i].version)
		if err != nil || len(evs) != 1 || evs[0].Position != a.FirstPosition || evs[0].Type != "y" {
			t.Errorf("unit %d: stream %s at %d holds %+v (%v); want the event appended at %d", i, want[i].stream, want[i].version, evs, err, a.FirstPosition)
		}
	}

	// A stale expectation in the run fails the batch: nothing of it stays.
	if _, err := eventstore.SendShared(ctx, s,
		(&eventstore.Unit{}).Append("fresh", eventstore.NoStream, ev("y", `{}`)),
		(&eventstore.Unit{}).Append("exact", 2, ev("y", `{}`)),
	); err == nil {
		t.Fatal("a shared run with a stale exact expectation was written; want the batch refused")
	}
	if _, err := eventstore.SendShared(ctx, s,
		(&eventstore.Unit{}).Append("fresh", eventstore.NoStream, ev("y", `{}`)),
		(&eventstore.Unit{}).Append("new", eventstore.NoStream, ev("y", `{}`)),
	); err == nil {
		t.Fatal("a shared run appending to an existing stream as new was written; want the batch refused")
	}
	if evs, err := s.Load(ctx, "fresh", 1); err != nil || len(evs) != 0 {
		t.Fatalf("stream fresh holds %d events (%v) after two refused batches; want none", len(evs), err)
	}
}
