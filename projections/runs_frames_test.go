package projections_test

import (
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// The runs read model writes the frames of consecutive action outcomes in
// one statement that finds each action's run in run_actions: in one batch,
// the actions of a run requested before their outcomes get their frames,
// an action in no run gets none.
func TestRunFramesOfABatchsOutcomes(t *testing.T) {
	pool := testutil.FreshPool(t)
	s := eventstore.New(pool)
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ref := func(id string) *domain.FrameRef { return &domain.FrameRef{FrameID: id, CapturedAt: at} }
	var evs []eventstore.NewEvent
	for _, e := range []domain.Event{
		domain.ActionRequested{ActionID: "a1", DeviceID: "d1", RunID: "r1", AgentRunID: "ar1", RequestedAt: at},
		domain.ActionRequested{ActionID: "a2", DeviceID: "d1", RunID: "r1", AgentRunID: "ar1", RequestedAt: at},
		domain.ActionRequested{ActionID: "a3", DeviceID: "d2", RequestedAt: at},
		domain.ActionCommitted{ActionID: "a1", DeviceID: "d1", FrameBefore: ref("f1"), FrameAfter: ref("f2"), StartedAt: at, FinishedAt: at},
		domain.ActionCommitted{ActionID: "a3", DeviceID: "d2", FrameBefore: ref("g1"), FrameAfter: ref("g2"), StartedAt: at, FinishedAt: at},
		domain.ActionFailed{ActionID: "a2", DeviceID: "d1", Code: domain.CodeDeviceUnavailable, FrameBefore: ref("f2"), StartedAt: at, FinishedAt: at},
	} {
		name, version, data, err := domain.Events.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, eventstore.NewEvent{Type: name, SchemaVersion: version, OrgID: "org_r", Data: data})
	}
	a, err := s.Append(testutil.Context(t), "run-frames", eventstore.NoStream, evs...)
	if err != nil {
		t.Fatal(err)
	}
	r := startRunner(t, s, []projections.Projection{projections.Runs{}})
	waitForName(t, r, projections.RunsName, a)
	rows, err := pool.Query(testutil.Context(t), `SELECT run_id, frame_id, kind, action_id FROM public.run_frames ORDER BY position, frame_id, kind`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var run, frame, kind, action string
		if err := rows.Scan(&run, &frame, &kind, &action); err != nil {
			t.Fatal(err)
		}
		got = append(got, run+" "+frame+" "+kind+" "+action)
	}
	want := []string{"r1 f1 before a1", "r1 f2 after a1", "r1 f2 before a2"}
	if len(got) != len(want) {
		t.Fatalf("run frames %q; want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("run frames %q; want %q", got, want)
		}
	}
}
