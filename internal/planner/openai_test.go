package planner

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"phonefleet/domain"
	"strings"
	"sync"
	"testing"
)

// fakeChat is an in-process OpenAI-compatible chat-completions server: it
// answers each request with the next scripted tool call and keeps the
// requests it got.
type fakeChat struct {
	mu       sync.Mutex
	answers  []string // tool name + " " + arguments, or "!status" / "!text"
	requests []map[string]any
	srv      *httptest.Server
}

func startFakeChat(t *testing.T, answers ...string) *fakeChat {
	t.Helper()
	f := &fakeChat{answers: answers}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-test" {
			http.Error(w, `{"error":{"message":"wrong path or key"}}`, http.StatusUnauthorized)
			return
		}
		var req map[string]any
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.requests = append(f.requests, req)
		answer := "finish {\"state\":\"succeeded\"}"
		if len(f.answers) > 0 {
			answer, f.answers = f.answers[0], f.answers[1:]
		}
		f.mu.Unlock()
		switch answer {
		case "!503":
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		case "!text":
			_, _ = w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":"I think I should tap."},"finish_reason":"stop"}]}`))
			return
		}
		name, args, _ := strings.Cut(answer, " ")
		resp := map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "choices": []any{map[string]any{
			"index": 0, "finish_reason": "tool_calls",
			"message": map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
				"id": "call_1", "type": "function", "function": map[string]any{"name": name, "arguments": args}}}}}}}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeChat) lastRequest() map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[len(f.requests)-1]
}

func testInput(history int) Input {
	in := Input{RunID: "run_1", Goal: "turn on wifi", MaxSteps: 50, StepSeq: history,
		Observation: Observation{FrameID: "frm_1", ScreenHash: "h", Width: 1080, Height: 2400, ScreenOn: true,
			ContentType: "image/jpeg", Image: []byte{0xff, 0xd8, 0xff}, ImageWidth: 768, ImageHeight: 1707,
			Elements: []domain.Element{{Ref: "e1", Class: "Switch", Text: strings.Repeat("Wi-Fi ", 40), Bounds: [4]int{0, 100, 1080, 200}, Clickable: true}}}}
	for i := range history {
		in.History = append(in.History, Step{Kind: KindAct, Action: "tap", Arguments: json.RawMessage(`{"x":1,"y":` + string(rune('0'+i%10)) + `}`), Result: "tapped"})
	}
	return in
}

func TestOpenAIPlannerDecisions(t *testing.T) {
	tests := []struct {
		name    string
		answer  string
		want    Decision
		wantErr error
		errHas  string
	}{
		{"tap by coordinates", `tap {"x":540,"y":1200}`, Decision{Kind: KindAct, Action: "tap", Arguments: json.RawMessage(`{"x":540,"y":1200}`)}, nil, ""},
		{"tap by ref", `tap {"ref":"e1"}`, Decision{Kind: KindAct, Action: "tap", Arguments: json.RawMessage(`{"ref":"e1"}`)}, nil, ""},
		{"type text", `type_text {"text":"hello"}`, Decision{Kind: KindAct, Action: "type_text", Arguments: json.RawMessage(`{"text":"hello"}`)}, nil, ""},
		{"needs user", `needs_user {"reason":"captcha"}`, Decision{Kind: KindNeedsUser, Reason: "captcha"}, nil, ""},
		{"finish", `finish {"state":"failed","reason":"no_wifi","detail":"the switch is missing"}`,
			Decision{Kind: KindFinish, State: "failed", Reason: "no_wifi", Detail: "the switch is missing"}, nil, ""},
		{"unknown tool", `teleport {"x":1}`, Decision{}, ErrMalformed, `unknown tool "teleport"`},
		{"arguments not JSON", `tap {"x":540,`, Decision{}, ErrMalformed, "not JSON"},
		{"arguments failing validation", `tap {"x":"left","y":2}`, Decision{}, ErrMalformed, "must be an integer"},
		{"unknown argument", `swipe {"x1":1,"y1":2,"x2":3,"y2":4,"speed":9}`, Decision{}, ErrMalformed, "speed"},
		{"finish with a bad state", `finish {"state":"done"}`, Decision{}, ErrMalformed, "not succeeded or failed"},
		{"needs user without reason", `needs_user {}`, Decision{}, ErrMalformed, "without a reason"},
		{"no tool call", "!text", Decision{}, ErrMalformed, "without a tool call"},
		{"server overloaded", "!503", Decision{}, ErrUnavailable, "overloaded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chat := startFakeChat(t, tt.answer)
			p, err := NewOpenAI(OpenAIConfig{BaseURL: chat.srv.URL + "/v1/", APIKey: "sk-test", Model: "test-model"})
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Next(context.Background(), testInput(1))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("got %+v, %v; want %v containing %q", got, err, tt.wantErr, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w := tt.want
			if got.Kind != w.Kind || got.Action != w.Action || string(got.Arguments) != string(w.Arguments) ||
				got.State != w.State || got.Reason != w.Reason || got.Detail != w.Detail {
				t.Errorf("got %+v; want %+v", got, w)
			}
		})
	}
}

// TestOpenAIPlannerRequest: the request offers one tool per action type
// plus needs_user and finish, requires a tool call, sends the picture as
// a JPEG data URL and bounds what it shows (the last History steps,
// clipped element texts).
func TestOpenAIPlannerRequest(t *testing.T) {
	chat := startFakeChat(t, `tap {"x":1,"y":2}`)
	p, err := NewOpenAI(OpenAIConfig{BaseURL: chat.srv.URL + "/v1", APIKey: "sk-test", Model: "test-model", History: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Next(context.Background(), testInput(10)); err != nil {
		t.Fatal(err)
	}
	req := chat.lastRequest()
	if req["model"] != "test-model" || req["tool_choice"] != "required" {
		t.Errorf("got model %v, tool_choice %v; want test-model, required", req["model"], req["tool_choice"])
	}
	var names []string
	for _, tool := range req["tools"].([]any) {
		names = append(names, tool.(map[string]any)["function"].(map[string]any)["name"].(string))
	}
	want := "tap double_tap long_press swipe type_text key open_app install_app needs_user finish"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("got tools %s; want %s", got, want)
	}
	msgs := req["messages"].([]any)
	parts := msgs[len(msgs)-1].(map[string]any)["content"].([]any)
	text := parts[0].(map[string]any)["text"].(string)
	if !strings.Contains(text, "7 earlier left out") || strings.Count(text, "\n") > 20 {
		t.Errorf("got prompt text %q; want the last 3 of 10 steps", text)
	}
	if strings.Contains(text, strings.Repeat("Wi-Fi ", 20)) {
		t.Errorf("got an element text longer than %d characters in the prompt", MaxElementText)
	}
	if len(parts) != 2 {
		t.Fatalf("got %d content parts; want text and image", len(parts))
	}
	url := parts[1].(map[string]any)["image_url"].(map[string]any)["url"].(string)
	if !strings.HasPrefix(url, "data:image/jpeg;base64,") {
		t.Errorf("got image url %.40q; want a JPEG data URL", url)
	}

	// A picture over budget (a full-size PNG) is never sent.
	in := testInput(0)
	in.Observation.ContentType, in.Observation.ImageWidth = "image/png", 1080
	chat.mu.Lock()
	chat.answers = []string{`tap {"x":1,"y":2}`}
	chat.mu.Unlock()
	if _, err := p.Next(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	req = chat.lastRequest()
	msgs = req["messages"].([]any)
	if parts := msgs[len(msgs)-1].(map[string]any)["content"].([]any); len(parts) != 1 {
		t.Errorf("got %d content parts for a full-size PNG; want the text alone", len(parts))
	}
}
