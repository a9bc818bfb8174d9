package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// scriptedModel is an OpenAI-compatible chat-completions server that
// streams what the test scripts: the one fake of the copilot's tests (no
// model provider can run here). Each request is decoded and kept; the
// current script writes the answer.
type scriptedModel struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	requests []modelRequest
	script   func(req modelRequest, w *modelStream)
}

// modelRequest is a chat-completions request as the copilot sent it.
type modelRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages []struct {
		Role       string         `json:"role"`
		Content    messageContent `json:"content"`
		ToolCallID string         `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	// Header is the request's header (the bearer token).
	Header http.Header `json:"-"`
}

// messageContent is a message's content as the provider's API takes it: a
// string, or an array of parts (a run's planner sends the screen as an
// image part beside its text), read as its text parts joined.
type messageContent string

func (c *messageContent) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = messageContent(s)
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return err
	}
	var text []string
	for _, p := range parts {
		if p.Type == "text" {
			text = append(text, p.Text)
		}
	}
	*c = messageContent(strings.Join(text, "\n"))
	return nil
}

// toolResults counts the tool messages after the last user message: how
// far the turn has gone.
func (r modelRequest) toolResults() int {
	n := 0
	for _, m := range r.Messages {
		switch m.Role {
		case "user":
			n = 0
		case "tool":
			n++
		}
	}
	return n
}

// lastToolResult decodes the newest tool message.
func (r modelRequest) lastToolResult(t *testing.T) map[string]any {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "tool" {
			var out map[string]any
			if err := json.Unmarshal([]byte(r.Messages[i].Content), &out); err != nil {
				t.Errorf("a tool result is not JSON: %s", r.Messages[i].Content)
			}
			return out
		}
	}
	return nil
}

// modelStream writes one streamed answer.
type modelStream struct {
	w       http.ResponseWriter
	r       *http.Request
	calls   int
	written bool
}

func (s *modelStream) chunk(v any) {
	if !s.written {
		s.w.Header().Set("Content-Type", "text/event-stream")
		s.w.WriteHeader(http.StatusOK)
		s.written = true
	}
	b, _ := json.Marshal(v)
	fmt.Fprintf(s.w, "data: %s\n\n", b)
	http.NewResponseController(s.w).Flush()
}

// text streams a piece of the answer's text.
func (s *modelStream) text(t string) {
	s.chunk(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": t}}}})
}

// call streams a tool call, its arguments in two pieces as providers do.
func (s *modelStream) call(name, args string) {
	i := s.calls
	s.calls++
	id := fmt.Sprintf("call_%d", i)
	half := len(args) / 2
	s.chunk(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"tool_calls": []any{
		map[string]any{"index": i, "id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args[:half]}}}}}}})
	s.chunk(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"tool_calls": []any{
		map[string]any{"index": i, "function": map[string]any{"arguments": args[half:]}}}}}}})
}

// done ends the answer with the usage report.
func (s *modelStream) done(in, out int) {
	reason := "stop"
	if s.calls > 0 {
		reason = "tool_calls"
	}
	s.chunk(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": reason}}})
	s.chunk(map[string]any{"choices": []any{}, "usage": map[string]any{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}})
	fmt.Fprint(s.w, "data: [DONE]\n\n")
	http.NewResponseController(s.w).Flush()
}

// fail answers an error status as a provider does.
func (s *modelStream) fail(status int, message string) {
	s.w.Header().Set("Content-Type", "application/json")
	s.w.WriteHeader(status)
	fmt.Fprintf(s.w, `{"error":{"message":%q,"type":"server_error"}}`, message)
	s.written = true
}

func newScriptedModel(t *testing.T) *scriptedModel {
	m := &scriptedModel{t: t}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		var req modelRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("the copilot's request is not JSON: %v", err)
			http.Error(w, "bad json", http.StatusBadRequest)
			return
		}
		req.Header = r.Header.Clone()
		m.mu.Lock()
		m.requests = append(m.requests, req)
		script := m.script
		m.mu.Unlock()
		if script == nil {
			t.Errorf("the model was asked with no script: %+v", req)
			http.Error(w, "no script", http.StatusInternalServerError)
			return
		}
		script(req, &modelStream{w: w, r: r})
	}))
	t.Cleanup(m.srv.Close)
	return m
}

// URL is the base URL the copilot is configured with.
func (m *scriptedModel) URL() string { return m.srv.URL + "/v1" }

// play sets the script for the next requests and forgets earlier ones.
func (m *scriptedModel) play(script func(req modelRequest, w *modelStream)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.script, m.requests = script, nil
}

// asked returns the requests since the script was set.
func (m *scriptedModel) asked() []modelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]modelRequest(nil), m.requests...)
}

// elementRef finds the ref of the element with resource id id in an
// observation's result.
func elementRef(obs map[string]any, id string) string {
	els, _ := obs["elements"].([]any)
	for _, e := range els {
		if m, _ := e.(map[string]any); m != nil && m["id"] == id {
			ref, _ := m["ref"].(string)
			return ref
		}
	}
	return ""
}
