package service

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/copilot"
	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// TestCopilotApprovalsBindTheExactAction: on a thread where every action
// waits for the person's yes, the copilot asks (the turn ends awaiting
// approval) with a digest of the action, its arguments, the frame and the
// lease's fencing token. An approved action runs as the person, its
// receipt named after the approval. A yes after the screen changed, after
// the lease ended and was taken again, or for another digest is refused as
// stale and nothing runs; a no and an expiry (injected clock) are recorded.
func TestCopilotApprovalsBindTheExactAction(t *testing.T) {
	s := startCopilotService(t)
	s.model.play(func(req modelRequest, w *modelStream) {
		if req.toolResults() > 0 {
			t.Errorf("the model was asked again after an approval was requested: %+v", req.Messages)
		}
		w.text("Pressing Home.")
		w.call("key", `{"key":"HOME"}`)
		w.done(20, 4)
	})
	posted := s.call(s.person, "POST", "/v1/copilot", `{"deviceId":"`+s.device+`","message":"go home","approveEveryAction":true}`, http.StatusAccepted)
	threadID := posted["threadId"].(string)
	// ask sends a message (the first was sent) and returns the approval the
	// turn asked for.
	ask := func(message string) map[string]any {
		t.Helper()
		if message != "" {
			s.call(s.person, "POST", "/v1/copilot", `{"threadId":"`+threadID+`","message":"`+message+`"}`, http.StatusAccepted)
		}
		thread := s.settled(threadID)
		head := thread["thread"].(map[string]any)
		if head["lastOutcome"] != "awaiting_approval" {
			t.Fatalf("thread %v; want its turn awaiting approval\n%v", head, thread["items"])
		}
		pending := s.call(s.person, "GET", "/v1/copilot/approvals?state=pending", "", http.StatusOK)["approvals"].([]any)
		if len(pending) != 1 {
			t.Fatalf("pending approvals %v; want one", pending)
		}
		ap := pending[0].(map[string]any)
		if ap["action"] != "key" || ap["arguments"].(map[string]any)["key"] != "HOME" || ap["reason"] != "every_action" ||
			!strings.HasPrefix(ap["frame"].(string), "frm_") || !strings.HasPrefix(ap["digest"].(string), "sha256:") {
			t.Fatalf("approval %v; want key HOME on a frame, bound by a digest", ap)
		}
		return ap
	}
	decide := func(ap map[string]any, decision, digest string, want int) map[string]any {
		t.Helper()
		return s.call(s.person, "POST", "/v1/copilot/approvals",
			`{"approvalId":"`+ap["approvalId"].(string)+`","decision":"`+decision+`","digest":"`+digest+`"}`, want)
	}
	refused := func(out map[string]any, reason string) {
		t.Helper()
		e := out["error"].(map[string]any)
		if e["code"] != "wrong_state" || e["state"] != "refused" || e["reason"] != reason {
			t.Errorf("got %v; want wrong_state, refused, %s", e, reason)
		}
	}
	before := s.receiptCount()

	// Approved: it runs as the person, its receipt named after the approval.
	ap := ask("")
	if n := s.receiptCount(); n != before {
		t.Fatalf("receipts before the yes: %d; want %d (nothing ran)", n, before)
	}
	out := decide(ap, "approve", ap["digest"].(string), http.StatusOK)
	rc := out["receipt"].(map[string]any)
	if out["state"] != "granted" || rc["state"] != "committed" || rc["idempotencyKey"] != "copilot-"+ap["approvalId"].(string) ||
		rc["actor"].(map[string]any)["userId"] != "user_a" || rc["observedFrame"] != ap["frame"] {
		t.Fatalf("approve: %v; want granted, the committed receipt by user_a decided on the approved frame", out)
	}
	thread := s.call(s.person, "GET", "/v1/copilot/threads/"+threadID, "", http.StatusOK)
	calls := items(thread, "tool_call")
	if len(calls) != 1 || calls[0]["state"] != "succeeded" || calls[0]["result"].(map[string]any)["approvalId"] != ap["approvalId"] {
		t.Errorf("tool calls %v; want the one call, succeeded under the approval", calls)
	}
	if aps := items(thread, "approval"); len(aps) != 1 || aps[0]["state"] != "granted" {
		t.Errorf("approval items %v; want one, granted", aps)
	}
	// Approving again answers its state.
	if e := decide(ap, "approve", ap["digest"].(string), http.StatusConflict)["error"].(map[string]any); e["state"] != "granted" {
		t.Errorf("a second yes: %v; want wrong_state, granted", e)
	}

	// The person's lease, as REST shows it.
	lease := func() string {
		ls := s.call(s.person, "GET", "/v1/leases?deviceId="+s.device, "", http.StatusOK)["leases"].([]any)
		if len(ls) != 1 {
			t.Fatalf("leases %v; want the person's one", ls)
		}
		return ls[0].(map[string]any)["leaseId"].(string)
	}

	// The screen changed after the request: refused, nothing ran.
	ap = ask("again")
	s.call(s.person, "POST", "/v1/devices/"+s.device+"/actions",
		`{"action":"open_app","arguments":{"package":"com.example.notes"},"idempotencyKey":"person-opens-notes","leaseId":"`+lease()+`"}`, http.StatusOK)
	n := s.receiptCount()
	refused(decide(ap, "approve", ap["digest"].(string), http.StatusConflict), "screen_changed")
	// The device checked the screen when the action's turn came: its
	// receipt records the refusal, and nothing was done.
	rc = s.call(s.person, "GET", "/v1/receipts/copilot-"+ap["approvalId"].(string), "", http.StatusOK)
	if rc["state"] != "failed" || rc["error"].(map[string]any)["code"] != "stale_frame" || s.receiptCount() != n+1 {
		t.Errorf("receipt of the stale yes: %v; want failed, stale_frame", rc)
	}

	// The lease ended and was taken again (a new fencing token): refused
	// before anything is sent.
	ap = ask("once more")
	s.call(s.person, "DELETE", "/v1/devices/"+s.device+"/lease?leaseId="+lease(), "", http.StatusNoContent)
	s.call(s.person, "POST", "/v1/devices/"+s.device+"/lease", `{}`, http.StatusCreated)
	n = s.receiptCount()
	refused(decide(ap, "approve", ap["digest"].(string), http.StatusConflict), "lease_changed")

	// A yes for another digest (other arguments, frame or lease): refused.
	ap = ask("and again")
	refused(decide(ap, "approve", "sha256:"+strings.Repeat("0", 64), http.StatusConflict), "digest_mismatch")

	// A no.
	ap = ask("one more")
	if out := decide(ap, "deny", "", http.StatusOK); out["state"] != "denied" {
		t.Errorf("deny: %v; want denied", out)
	}
	if e := decide(ap, "approve", ap["digest"].(string), http.StatusConflict)["error"].(map[string]any); e["state"] != "denied" {
		t.Errorf("a yes after the no: %v; want wrong_state, denied", e)
	}
	if got := s.receiptCount(); got != n {
		t.Errorf("receipts %d; want %d (no refused or denied approval ran)", got, n)
	}

	// Expiry, on a clock past the approval's time.
	ap = ask("last one")
	expires, err := time.Parse(time.RFC3339Nano, ap["expiresAt"].(string))
	if err != nil {
		t.Fatal(err)
	}
	clock := testutil.NewClock(expires.Add(time.Second))
	late := copilot.New(copilot.Config{Store: s.a.store, ReadModels: s.a.runner, Queries: projections.CopilotQueries{DB: s.a.db.Pool}, Now: clock.Now})
	f := s.a.app.Fleet
	h := late.Handlers(cqrs.Decorator{}, copilot.Devices{GetDevice: f.GetDevice, ListLeases: f.ListLeases, AcquireLease: f.AcquireLease,
		ReleaseLease: f.ReleaseLease, Observe: f.ObserveDevice, Act: f.PerformAction})
	auth := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "user_a", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
	_, err = h.DecideApproval.Handle(testutil.Context(t), copilot.DecideApproval{Auth: auth, ApprovalID: ap["approvalId"].(string),
		Decision: copilot.DecisionApprove, Digest: ap["digest"].(string)})
	if de, ok := err.(*domain.Error); !ok || de.Code != domain.CodeWrongState || de.Extra["state"] != domain.ApprovalExpired {
		t.Fatalf("a yes after the expiry: %v; want wrong_state, expired", err)
	}
	if got := s.receiptCount(); got != n {
		t.Errorf("receipts %d; want %d (the expired approval did not run)", got, n)
	}
	var states []string
	for _, a := range s.call(s.person, "GET", "/v1/copilot/approvals", "", http.StatusOK)["approvals"].([]any) {
		m := a.(map[string]any)
		reason, _ := m["refusedReason"].(string)
		states = append(states, m["state"].(string)+"/"+reason)
	}
	t.Logf("approvals, newest first: %v", states)
	want := "[expired/ denied/ refused/digest_mismatch refused/lease_changed refused/screen_changed granted/]"
	if got := "[" + strings.Join(states, " ") + "]"; got != want {
		t.Errorf("approvals %s; want %s", got, want)
	}

	// The read model rebuilds to the same rows, approvals included.
	beforeRows := copilotRows(t, s.a)
	if err := s.a.runner.Rebuild(testutil.Context(t), projections.CopilotName, nil); err != nil {
		t.Fatal(err)
	}
	if after := copilotRows(t, s.a); after != beforeRows {
		t.Fatalf("rebuild changed the rows:\nbefore %s\nafter  %s", beforeRows, after)
	}
}
