package wire

import (
	"encoding/json"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/projections"
)

// TestRunShapes pins the run shapes to the byte: every member of a run is
// present, null when the run has no value; page cursors are absent on the
// last page.
func TestRunShapes(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 891234000, time.FixedZone("X", 3600))
	end, reason := at.Add(time.Hour), "deadline_exceeded"
	base := projections.RunView{RunID: "run_1", AgentRunID: "arun_1", DeviceID: "dev_1", Goal: "g", Executor: "builtin", State: "queued",
		MaxSteps: 50, DeadlineAt: at, Starter: domain.ReceiptActor{APIKeyID: "key_1"}, CreatedAt: at, UpdatedAt: at}
	parked := base
	parked.State, parked.ParkReason, parked.ParkDeadlineAt = "awaiting_user", "captcha", &end
	ended := base
	ended.State, ended.Reason, ended.EndedAt, ended.ScheduleID, ended.ParkReason = "failed", &reason, &end, "sch_1", "left over"
	ended.SuccessCheck, ended.HasScript = &domain.SuccessCheck{App: "com.x"}, true
	const head = `{"agentRunId":"arun_1","runId":"run_1",`
	const times = `"deadlineAt":"2026-03-04T04:06:07.891234Z","createdAt":"2026-03-04T04:06:07.891234Z","updatedAt":"2026-03-04T04:06:07.891234Z",`
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"queued", NewRun(base), head + `"state":"queued","deviceId":"dev_1","goal":"g","executor":"builtin","stepSeq":0,"maxSteps":50,` + times +
			`"endedAt":null,"reason":null,"detail":null,"starter":{"apiKeyId":"key_1"},"scheduleId":null,"successCheck":null,"hasScript":false,` +
			`"parkedReason":null,"parkDeadlineAt":null}`},
		{"parked", NewRun(parked), head + `"state":"awaiting_user","deviceId":"dev_1","goal":"g","executor":"builtin","stepSeq":0,"maxSteps":50,` + times +
			`"endedAt":null,"reason":null,"detail":null,"starter":{"apiKeyId":"key_1"},"scheduleId":null,"successCheck":null,"hasScript":false,` +
			`"parkedReason":"captcha","parkDeadlineAt":"2026-03-04T05:06:07.891234Z"}`},
		{"ended", NewRun(ended), head + `"state":"failed","deviceId":"dev_1","goal":"g","executor":"builtin","stepSeq":0,"maxSteps":50,` + times +
			`"endedAt":"2026-03-04T05:06:07.891234Z","reason":"deadline_exceeded","detail":null,"starter":{"apiKeyId":"key_1"},"scheduleId":"sch_1",` +
			`"successCheck":{"app":"com.x"},"hasScript":true,"parkedReason":null,"parkDeadlineAt":null}`},
		{"empty run page", NewRunPage(projections.RunPage{}), `{"runs":[]}`},
		{"frame page", NewRunFramePage(projections.RunFramePage{NextAfter: 9, Frames: []projections.RunFrame{
			{FrameID: "frm_1", Kind: "observed", At: at, Position: 3}, {FrameID: "frm_2", Kind: "after", ActionID: "act_1", At: at, Position: 9}}}),
			`{"frames":[{"frameId":"frm_1","kind":"observed","actionId":null,"at":"2026-03-04T04:06:07.891234Z"},` +
				`{"frameId":"frm_2","kind":"after","actionId":"act_1","at":"2026-03-04T04:06:07.891234Z"}],"nextAfter":"9"}`},
		{"last frame page", NewRunFramePage(projections.RunFramePage{}), `{"frames":[]}`},
		{"script without steps", NewRunScript(domain.RunScript{Version: 1}), `{"version":1,"steps":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("got  %s\nwant %s", b, tt.want)
			}
		})
	}
}

func TestRunFrameCursor(t *testing.T) {
	for _, tc := range []struct {
		in    string
		after int64
		ok    bool
	}{{"", 0, true}, {"42", 42, true}, {"-1", 0, false}, {"x", 0, false}, {"1e3", 0, false}} {
		if after, ok := ParseRunFrameCursor(tc.in); after != tc.after || ok != tc.ok {
			t.Errorf("ParseRunFrameCursor(%q): got %d, %v; want %d, %v", tc.in, after, ok, tc.after, tc.ok)
		}
	}
}
