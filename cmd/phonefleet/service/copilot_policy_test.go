package service

import (
	"fmt"
	"net/http"
	"testing"
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
