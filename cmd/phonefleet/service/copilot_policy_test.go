package service

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/testutil"
)

// playCheckout scripts a turn on the sim's browser: open it, tap the
// address bar, type a shop's checkout address (the focused field is no
// password field), press ENTER, look at the page (its title shows
// "Checkout"), then press BACK.
func playCheckout(t *testing.T, s *copilotService) {
	s.model.play(func(req modelRequest, w *modelStream) {
		switch req.toolResults() {
		case 0:
			w.call("open_app", `{"package":"com.example.browser"}`)
		case 1:
			w.call("observe", `{}`)
		case 2:
			ref := elementRef(req.lastToolResult(t), "com.example.browser:id/url_bar")
			if ref == "" {
				t.Errorf("the observation has no address bar: %v", req.lastToolResult(t))
			}
			w.call("tap", fmt.Sprintf(`{"ref":%q}`, ref))
		case 3:
			w.call("type_text", `{"text":"https://shop.example/checkout"}`)
		case 4:
			w.call("key", `{"key":"ENTER"}`)
		case 5:
			w.call("observe", `{"elements":"all"}`)
		case 6:
			w.call("key", `{"key":"BACK"}`)
		default:
			w.text("Done.")
		}
		w.done(10, 2)
	})
}

// TestCopilotAsksAfterAPaymentScreen: under the default deployment policy
// (install, sensitive, payment) the copilot acts freely until the turn
// has seen a payment screen (a browser page titled "Checkout — Shop" on
// the sim); the next action waits for the person's yes, with reason
// payment_screen. Typing the address was not typing into a sensitive
// field, so it ran. With SERVICE_COPILOT_APPROVE=none the same turn runs
// to its end.
func TestCopilotAsksAfterAPaymentScreen(t *testing.T) {
	s := startCopilotService(t)
	playCheckout(t, s)
	posted := s.call(s.person, "POST", "/v1/copilot", `{"deviceId":"`+s.device+`","message":"go to the checkout"}`, http.StatusAccepted)
	thread := s.settled(posted["threadId"].(string))
	head := thread["thread"].(map[string]any)
	if head["lastOutcome"] != "awaiting_approval" {
		t.Fatalf("thread %v; want its turn awaiting approval\n%v", head, thread["items"])
	}
	var tools []string
	for _, c := range items(thread, "tool_call") {
		tools = append(tools, c["tool"].(string)+":"+c["state"].(string))
	}
	want := []string{"open_app:succeeded", "observe:succeeded", "tap:succeeded", "type_text:succeeded", "key:succeeded",
		"observe:succeeded", "key:awaiting_approval"}
	if fmt.Sprint(tools) != fmt.Sprint(want) {
		t.Fatalf("tool calls %v; want %v", tools, want)
	}
	pending := s.call(s.person, "GET", "/v1/copilot/approvals?state=pending", "", http.StatusOK)["approvals"].([]any)
	if len(pending) != 1 {
		t.Fatalf("pending approvals %v; want one", pending)
	}
	ap := pending[0].(map[string]any)
	if ap["reason"] != "payment_screen" || ap["action"] != "key" || ap["arguments"].(map[string]any)["key"] != "BACK" {
		t.Errorf("approval %v; want key BACK, asked for after the payment screen", ap)
	}

	// The deployment asks for nothing: the same turn runs through.
	s2 := startCopilotServiceWith(t, map[string]string{"SERVICE_COPILOT_APPROVE": "none"})
	playCheckout(t, s2)
	posted = s2.call(s2.person, "POST", "/v1/copilot", `{"deviceId":"`+s2.device+`","message":"go to the checkout"}`, http.StatusAccepted)
	thread = s2.settled(posted["threadId"].(string))
	if head := thread["thread"].(map[string]any); head["lastOutcome"] != "completed" {
		t.Fatalf("thread %v; want completed with no approval asked\n%v", head, thread["items"])
	}
	if n := len(items(thread, "approval")); n != 0 {
		t.Errorf("%d approvals asked under policy none", n)
	}
}

// textCenter finds the element showing text (or with resource id text) in
// an observation's result and returns the centre of its bounds.
func textCenter(obs map[string]any, text string) (x, y int, found bool) {
	els, _ := obs["elements"].([]any)
	for _, e := range els {
		m, _ := e.(map[string]any)
		if m == nil || m["text"] != text && m["id"] != text {
			continue
		}
		b, _ := m["bounds"].([]any)
		if len(b) != 4 {
			continue
		}
		return int((b[0].(float64) + b[2].(float64)) / 2), int((b[1].(float64) + b[3].(float64)) / 2), true
	}
	return 0, 0, false
}

// playScreenLock scripts a turn that opens Settings, scrolls to Security &
// privacy, opens Screen lock, taps its password field and types password
// there (each action followed by a look at the whole screen).
func playScreenLock(t *testing.T, s *copilotService, password string) {
	const look = `{"elements":"all"}`
	s.model.play(func(req modelRequest, w *modelStream) {
		defer w.done(10, 2)
		if req.toolResults() == 0 {
			w.call("open_app", `{"package":"com.android.settings"}`)
			w.call("observe", look)
			return
		}
		obs := req.lastToolResult(t)
		tap := func(text string) bool {
			x, y, ok := textCenter(obs, text)
			if ok {
				w.call("tap", fmt.Sprintf(`{"x":%d,"y":%d}`, x, y))
			}
			return ok
		}
		switch {
		case tap("com.android.settings:id/password_entry"):
			w.call("type_text", fmt.Sprintf(`{"text":%q}`, password))
			return
		case tap("Screen lock"), tap("Security & privacy"):
		default:
			wd, ht := int(obs["width"].(float64)), int(obs["height"].(float64))
			w.call("swipe", fmt.Sprintf(`{"x1":%d,"y1":%d,"x2":%d,"y2":%d,"durationMs":300}`, wd/2, ht*4/5, wd/2, ht/3))
		}
		w.call("observe", look)
	})
}

// TestCopilotAsksBeforeTypingAPassword: on a sim phone, the copilot opens
// Settings → Security & privacy → Screen lock, whose field is marked
// password in the UI tree, taps it and types: typing waits for the
// person's yes (reason sensitive_field), bound to the frame the focus was
// read on; nothing is typed before the yes, and the yes types it. Asked
// again, the person leaves the page before deciding: the yes is refused as
// stale (screen_changed) and nothing is typed.
func TestCopilotAsksBeforeTypingAPassword(t *testing.T) {
	s := startCopilotService(t)
	auth := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "user_a", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
	field := func() (string, bool) {
		t.Helper()
		obs, err := s.a.app.Fleet.ObserveDevice.Handle(testutil.Context(t), fleet.ObserveDevice{Auth: auth, DeviceID: s.device, Elements: domain.ElementsAll})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range obs.Elements {
			if e.ID == "com.android.settings:id/password_entry" {
				return e.Text, true
			}
		}
		return "", false
	}
	ask := func(message, password string) map[string]any {
		t.Helper()
		playScreenLock(t, s, password)
		posted := s.call(s.person, "POST", "/v1/copilot", `{"deviceId":"`+s.device+`","message":"`+message+`"}`, http.StatusAccepted)
		thread := s.settled(posted["threadId"].(string))
		if head := thread["thread"].(map[string]any); head["lastOutcome"] != "awaiting_approval" {
			t.Fatalf("thread %v; want its turn awaiting approval\n%v", head, thread["items"])
		}
		pending := s.call(s.person, "GET", "/v1/copilot/approvals?state=pending", "", http.StatusOK)["approvals"].([]any)
		if len(pending) != 1 {
			t.Fatalf("pending approvals %v; want one", pending)
		}
		ap := pending[0].(map[string]any)
		if ap["reason"] != "sensitive_field" || ap["action"] != "type_text" || ap["arguments"].(map[string]any)["text"] != password {
			t.Fatalf("approval %v; want type_text %q, asked for because the field is a password field", ap, password)
		}
		return ap
	}
	decide := func(ap map[string]any, want int) map[string]any {
		t.Helper()
		return s.call(s.person, "POST", "/v1/copilot/approvals",
			`{"approvalId":"`+ap["approvalId"].(string)+`","decision":"approve","digest":"`+ap["digest"].(string)+`"}`, want)
	}

	ap := ask("set a screen lock password", "2468")
	if text, ok := field(); !ok || strings.Contains(text, "•") {
		t.Fatalf("the password field before the yes: %q (shown %v); want it empty (its hint)", text, ok)
	}
	out := decide(ap, http.StatusOK)
	if rc := out["receipt"].(map[string]any); out["state"] != "granted" || rc["state"] != "committed" || rc["action"] != "type_text" ||
		rc["observedFrame"] != ap["frame"] || rc["actor"].(map[string]any)["userId"] != "user_a" {
		t.Fatalf("the yes: %v; want granted, type_text committed by user_a on the approved frame", out)
	}
	if text, _ := field(); text != "••••" {
		t.Errorf("the password field after the yes shows %q; want four dots", text)
	}

	// Asked again; the person leaves the page before saying yes.
	ap = ask("type it once more", "1357")
	ls := s.call(s.person, "GET", "/v1/leases?deviceId="+s.device, "", http.StatusOK)["leases"].([]any)
	if len(ls) != 1 {
		t.Fatalf("leases %v; want the one kept for the approval", ls)
	}
	s.call(s.person, "POST", "/v1/devices/"+s.device+"/actions",
		`{"action":"key","arguments":{"key":"BACK"},"idempotencyKey":"person-leaves-the-page","leaseId":"`+ls[0].(map[string]any)["leaseId"].(string)+`"}`, http.StatusOK)
	e := decide(ap, http.StatusConflict)["error"].(map[string]any)
	if e["code"] != "wrong_state" || e["state"] != "refused" || e["reason"] != "screen_changed" {
		t.Errorf("the yes after the screen changed: %v; want wrong_state, refused, screen_changed", e)
	}
	rc := s.call(s.person, "GET", "/v1/receipts/copilot-"+ap["approvalId"].(string), "", http.StatusOK)
	if rc["state"] != "failed" || rc["error"].(map[string]any)["code"] != "stale_frame" {
		t.Errorf("the stale yes's receipt: %v; want failed, stale_frame (nothing typed)", rc)
	}
	if _, shown := field(); shown {
		t.Errorf("the password page is still shown after BACK")
	}
}
