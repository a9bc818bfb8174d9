package projections_test

import (
	"encoding/json"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/projections"
)

// The receipts read model writes a run of consecutive requests as one
// statement and a run of consecutive commits as another; events of other
// kinds between them keep their place. One batch holding requests, commits,
// a failure, an unknown outcome and a review in an interleaved order gives
// each receipt what the events, applied one by one, would.
func TestReceiptsApplyRunsOfRequestsAndCommitsInOrder(t *testing.T) {
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	req := func(id string) domain.ActionRequested {
		return domain.ActionRequested{ActionID: id, DeviceID: "d1", IdempotencyKey: "k-" + id, Action: "tap",
			Arguments: json.RawMessage(`{"x":1}`), Actor: domain.Actor{Kind: "api_key", ID: "key1"}, RequestedAt: at}
	}
	commit := func(id string) domain.ActionCommitted {
		return domain.ActionCommitted{ActionID: id, DeviceID: "d1", Result: domain.ActionResult{Description: "tapped " + id},
			FrameAfter: &domain.FrameRef{FrameID: "f-" + id, CapturedAt: at}, StartedAt: at, FinishedAt: at.Add(time.Second)}
	}
	pool := applyInOneBatch(t, projections.Receipts{}, "org_r",
		req("a1"), req("a2"), commit("a1"), commit("a2"), req("a3"),
		domain.ActionFailed{ActionID: "a3", DeviceID: "d1", Code: domain.CodeDeviceUnavailable, Message: "refused", StartedAt: at, FinishedAt: at},
		req("a4"), domain.ActionOutcomeUnknown{ActionID: "a4", Reason: "lost"}, req("a5"), commit("a4"), commit("a5"),
		domain.ReceiptReviewed{ActionID: "a5", At: at, Reviewer: domain.Actor{Kind: "user", ID: "u1"}, Note: "fine"},
	)
	checkRows(t, pool, `SELECT action_id, state, outcome_unknown, coalesce(result->>'description', ''),
		coalesce(frame_after, ''), coalesce(error_code, ''), coalesce(review_note, '') FROM public.receipts ORDER BY action_id`,
		`["a1","committed",false,"tapped a1","f-a1","",""]`,
		`["a2","committed",false,"tapped a2","f-a2","",""]`,
		`["a3","failed",false,"","","device_unavailable",""]`,
		`["a4","committed",true,"tapped a4","f-a4","action_outcome_unknown",""]`,
		`["a5","committed",false,"tapped a5","f-a5","","fine"]`)
}
