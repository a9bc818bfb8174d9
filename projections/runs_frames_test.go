package projections_test

import (
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/projections"
)

// The runs read model writes the frames of consecutive action outcomes in
// one statement that finds each action's run in run_actions: in one batch,
// the actions of a run requested before their outcomes get their frames,
// an action in no run gets none.
func TestRunFramesOfABatchsOutcomes(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ref := func(id string) *domain.FrameRef { return &domain.FrameRef{FrameID: id, CapturedAt: at} }
	pool := applyInOneBatch(t, projections.Runs{}, "org_r",
		domain.ActionRequested{ActionID: "a1", DeviceID: "d1", RunID: "r1", AgentRunID: "ar1", RequestedAt: at},
		domain.ActionRequested{ActionID: "a2", DeviceID: "d1", RunID: "r1", AgentRunID: "ar1", RequestedAt: at},
		domain.ActionRequested{ActionID: "a3", DeviceID: "d2", RequestedAt: at},
		domain.ActionCommitted{ActionID: "a1", DeviceID: "d1", FrameBefore: ref("f1"), FrameAfter: ref("f2"), StartedAt: at, FinishedAt: at},
		domain.ActionCommitted{ActionID: "a3", DeviceID: "d2", FrameBefore: ref("g1"), FrameAfter: ref("g2"), StartedAt: at, FinishedAt: at},
		domain.ActionFailed{ActionID: "a2", DeviceID: "d1", Code: domain.CodeDeviceUnavailable, FrameBefore: ref("f2"), StartedAt: at, FinishedAt: at})
	checkRows(t, pool, `SELECT run_id, frame_id, kind, action_id FROM public.run_frames ORDER BY position, frame_id, kind`,
		`["r1","f1","before","a1"]`, `["r1","f2","after","a1"]`, `["r1","f2","before","a2"]`)
}
