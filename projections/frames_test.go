package projections_test

import (
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// The frames index writes a batch's frames in one statement, in the order
// the events give them: the after frame of one action that is the before
// frame of the next is indexed once, as the after frame it was first.
func TestFrameIndexKeepsAFramesFirstRowWithinABatch(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ref := func(id string, sec int) *domain.FrameRef {
		return &domain.FrameRef{FrameID: id, ScreenHash: "h-" + id, CapturedAt: at.Add(time.Duration(sec) * time.Second)}
	}
	var evs []eventstore.NewEvent
	for _, c := range []domain.ActionCommitted{
		{ActionID: "a1", DeviceID: "d1", FrameBefore: ref("f1", 0), FrameAfter: ref("f2", 1)},
		{ActionID: "a2", DeviceID: "d1", FrameBefore: ref("f2", 1), FrameAfter: ref("f3", 2)},
	} {
		name, version, data, err := domain.Events.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, eventstore.NewEvent{Type: name, SchemaVersion: version, OrgID: "org_f", Data: data})
	}
	a, err := s.Append(testutil.Context(t), "frames-test", eventstore.NoStream, evs...)
	if err != nil {
		t.Fatal(err)
	}
	r := startRunner(t, s, []projections.Projection{projections.FrameIndex{}})
	waitForName(t, r, projections.FrameIndexName, a)
	rows, err := pool.Query(testutil.Context(t), `SELECT frame_id, source, coalesce(action_id, ''), captured_at FROM public.frame_index ORDER BY frame_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id, source, action string
		var captured time.Time
		if err := rows.Scan(&id, &source, &action, &captured); err != nil {
			t.Fatal(err)
		}
		got = append(got, id+" "+source+" "+action+" "+captured.UTC().Format("15:04:05"))
	}
	want := []string{"f1 action_before a1 12:00:00", "f2 action_after a1 12:00:01", "f3 action_after a2 12:00:02"}
	if len(got) != len(want) {
		t.Fatalf("frame index %q; want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("frame index %q; want %q", got, want)
		}
	}
}
