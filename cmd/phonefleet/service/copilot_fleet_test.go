package service

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// addSimPhone registers one more sim phone for orgID and waits until it
// shows.
func (s *copilotService) addSimPhone(orgID, userID string) string {
	s.t.Helper()
	ids, err := s.a.app.Fleet.RegisterDevices.Handle(testutil.Context(s.t), fleet.RegisterDevices{OrgID: orgID, Backend: "sim", Count: 1})
	if err != nil || len(ids) != 1 {
		s.t.Fatalf("register a sim phone for %s: %v (%v)", orgID, err, ids)
	}
	auth := domain.Auth{OrgID: orgID, Kind: domain.PrincipalConsole, UserID: userID, Role: domain.RoleAdmin, Scopes: domain.AllScopes}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := s.a.app.Fleet.GetDevice.Handle(testutil.Context(s.t), fleet.GetDevice{Auth: auth, DeviceID: ids[0]}); err == nil {
			return ids[0]
		} else if time.Now().After(deadline) {
			s.t.Fatalf("the sim phone never showed: %v", err)
		}
	}
}

// listedDevices reads the device ids of a list_devices result.
func listedDevices(res map[string]any) []string {
	var out []string
	devs, _ := res["devices"].([]any)
	for _, d := range devs {
		if m, _ := d.(map[string]any); m != nil {
			out = append(out, fmt.Sprint(m["deviceId"]))
		}
	}
	return out
}

// TestCopilotFleetThread: a message without a device starts a thread about
// the person's fleet (deviceId null). Its model lists the person's phones
// (both of organisation A's, not B's), presses HOME on each, naming it by
// deviceId; each action is the fleet's own on that phone (a lease taken
// per phone and given back at the turn's end, receipts by the person). A
// call naming organisation B's phone is refused as a missing device and
// nothing acts there; a call naming no device is malformed. Organisation
// B's person cannot read the thread. On a fleet thread that approves every
// action, the approval names the phone, and the yes runs there.
func TestCopilotFleetThread(t *testing.T) {
	s := startCopilotService(t)
	second := s.addSimPhone("org_a", "user_a")
	foreign := s.addSimPhone("org_b", "user_b")
	var listed []string
	s.model.play(func(req modelRequest, w *modelStream) {
		switch req.toolResults() {
		case 0:
			w.text("Looking at your phones.")
			w.call("list_devices", `{}`)
		case 1:
			listed = listedDevices(req.lastToolResult(t))
			for _, id := range listed {
				w.call("key", fmt.Sprintf(`{"deviceId":%q,"key":"HOME"}`, id))
			}
			w.call("observe", fmt.Sprintf(`{"deviceId":%q}`, foreign))
		default:
			w.text("Both phones are on their home screens.")
		}
		w.done(50, 10)
	})
	posted := s.call(s.person, "POST", "/v1/copilot", `{"message":"send every phone home"}`, http.StatusAccepted)
	threadID := posted["threadId"].(string)
	thread := s.settled(threadID)
	head := thread["thread"].(map[string]any)
	if _, ok := head["deviceId"]; !ok || head["deviceId"] != nil || head["lastOutcome"] != "completed" {
		t.Fatalf("thread %v; want deviceId null (the fleet), completed\n%v", head, thread["items"])
	}
	want := []string{s.device, second}
	slices.Sort(want)
	got := slices.Clone(listed)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("list_devices gave %v; want organisation A's phones %v", listed, want)
	}
	var tools []string
	for _, c := range items(thread, "tool_call") {
		tools = append(tools, fmt.Sprint(c["tool"], ":", c["deviceId"], ":", c["state"]))
		if c["tool"] != "key" {
			continue
		}
		key := c["idempotencyKey"].(string)
		rc := s.call(s.person, "GET", "/v1/receipts/"+key, "", http.StatusOK)
		if rc["state"] != "committed" || rc["deviceId"] != c["deviceId"] || rc["actor"].(map[string]any)["userId"] != "user_a" {
			t.Errorf("receipt %s: %v; want committed on %v, by user_a", key, rc, c["deviceId"])
		}
	}
	wantTools := []string{"list_devices:<nil>:succeeded", "key:" + listed[0] + ":succeeded", "key:" + listed[1] + ":succeeded",
		"observe:" + foreign + ":failed"}
	if !slices.Equal(tools, wantTools) {
		t.Fatalf("tool calls %v; want %v", tools, wantTools)
	}
	refused := items(thread, "tool_call")[3]["result"].(map[string]any)["error"].(map[string]any)
	if refused["code"] != "device_unavailable" && refused["code"] != "not_found" {
		t.Errorf("observing organisation B's phone: %v; want the answer for a missing device", refused)
	}
	// A lease per phone acted on, each taken for the turn and given back.
	var taken []string
	for _, e := range readCopilotStream(t, s.base, s.person, threadID, "", "copilot.turn_ended") {
		if e.event == "copilot.lease_taken" {
			taken = append(taken, e.data)
		}
	}
	if len(taken) != 2 {
		t.Errorf("leases taken %v; want one per phone acted on", taken)
	}
	if ls := s.call(s.person, "GET", "/v1/leases", "", http.StatusOK)["leases"].([]any); len(ls) != 0 {
		t.Errorf("leases after the turn: %v; want none", ls)
	}
	// Each tool is offered with deviceId; list_devices without.
	asked := s.model.asked()
	if len(asked[0].Tools) == 0 || asked[0].Tools[0].Function.Name != "list_devices" || !asked[0].offers("key") {
		t.Errorf("tools offered to a fleet thread: %+v", asked[0].Tools)
	}

	// Organisation B's person sees no such thread.
	other := s.idp.Console(t, s.aud, "user_b", "org_b", "admin")
	s.call(other, "GET", "/v1/copilot/threads/"+threadID, "", http.StatusNotFound)
	if list := s.call(other, "GET", "/v1/copilot/threads", "", http.StatusOK)["threads"].([]any); len(list) != 0 {
		t.Errorf("organisation B's threads %v; want none", list)
	}
	// The thread stays about the fleet.
	s.call(s.person, "POST", "/v1/copilot", `{"threadId":"`+threadID+`","deviceId":"`+s.device+`","message":"now this one"}`, http.StatusBadRequest)

	// A call that names no device is malformed: nothing acts.
	s.model.play(func(req modelRequest, w *modelStream) {
		w.call("key", `{"key":"BACK"}`)
		w.done(5, 1)
	})
	before := s.receiptCount()
	s.call(s.person, "POST", "/v1/copilot", `{"threadId":"`+threadID+`","message":"go back"}`, http.StatusAccepted)
	if ends := items(s.settled(threadID), "turn_ended"); ends[len(ends)-1]["reason"] != "malformed_tool_call" {
		t.Errorf("turn ends %v; want the last malformed_tool_call", ends)
	}
	if n := s.receiptCount(); n != before {
		t.Errorf("receipts %d; want %d", n, before)
	}

	// Approvals on a fleet thread name the phone the action is for.
	s.model.play(func(req modelRequest, w *modelStream) {
		w.call("key", fmt.Sprintf(`{"deviceId":%q,"key":"HOME"}`, second))
		w.done(5, 1)
	})
	posted = s.call(s.person, "POST", "/v1/copilot", `{"message":"home on the second phone","approveEveryAction":true}`, http.StatusAccepted)
	if head := s.settled(posted["threadId"].(string))["thread"].(map[string]any); head["lastOutcome"] != "awaiting_approval" {
		t.Fatalf("thread %v; want awaiting approval", head)
	}
	pending := s.call(s.person, "GET", "/v1/copilot/approvals?state=pending", "", http.StatusOK)["approvals"].([]any)
	if len(pending) != 1 || pending[0].(map[string]any)["deviceId"] != second {
		t.Fatalf("pending approvals %v; want one on %s", pending, second)
	}
	ap := pending[0].(map[string]any)
	out := s.call(s.person, "POST", "/v1/copilot/approvals",
		`{"approvalId":"`+ap["approvalId"].(string)+`","decision":"approve","digest":"`+ap["digest"].(string)+`"}`, http.StatusOK)
	if rc := out["receipt"].(map[string]any); out["state"] != "granted" || rc["state"] != "committed" || rc["deviceId"] != second {
		t.Errorf("decision %v; want granted, committed on %s", out, second)
	}

	// The read model rebuilds to the same rows.
	rows := copilotRows(t, s.a)
	if err := s.a.runner.Rebuild(testutil.Context(t), projections.CopilotName, nil); err != nil {
		t.Fatal(err)
	}
	if after := copilotRows(t, s.a); after != rows {
		t.Fatalf("rebuild changed the rows:\nbefore %s\nafter  %s", rows, after)
	}
}
