package projections_test

import (
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/projections"
)

// The frames index writes a batch's frames in one statement, in the order
// the events give them: the after frame of one action that is the before
// frame of the next is indexed once, as the after frame it was first.
func TestFrameIndexKeepsAFramesFirstRowWithinABatch(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ref := func(id string, sec int) *domain.FrameRef {
		return &domain.FrameRef{FrameID: id, ScreenHash: "h-" + id, CapturedAt: at.Add(time.Duration(sec) * time.Second)}
	}
	pool := applyInOneBatch(t, projections.FrameIndex{}, "org_f",
		domain.ActionCommitted{ActionID: "a1", DeviceID: "d1", FrameBefore: ref("f1", 0), FrameAfter: ref("f2", 1)},
		domain.ActionCommitted{ActionID: "a2", DeviceID: "d1", FrameBefore: ref("f2", 1), FrameAfter: ref("f3", 2)})
	checkRows(t, pool, `SELECT frame_id, source, coalesce(action_id, ''), to_char(captured_at AT TIME ZONE 'UTC', 'HH24:MI:SS')
		FROM public.frame_index ORDER BY frame_id`,
		`["f1","action_before","a1","12:00:00"]`, `["f2","action_after","a1","12:00:01"]`, `["f3","action_after","a2","12:00:02"]`)
}
