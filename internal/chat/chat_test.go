package chat

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A streamed answer: text pieces handed over in order (all of them, in as
// few calls as the caller's pace allows), tool-call pieces joined by
// index, the usage report read; an error status, a stream cut before
// [DONE] and a chunk that is not JSON are provider failures.
func TestStream(t *testing.T) {
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, `{"error":{"message":"who are you"}}`, http.StatusUnauthorized)
			return
		}
		if strings.HasPrefix(body, "status:") {
			http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, body)
	}))
	defer srv.Close()
	c, err := New(Config{BaseURL: srv.URL + "/v1/", APIKey: "k", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	chunk := func(s string) string { return "data: " + s + "\n\n" }
	body = chunk(`{"choices":[{"index":0,"delta":{"content":"Hel"}}]}`) + ": comment\n\n" +
		chunk(`{"choices":[{"index":0,"delta":{"content":"lo"}}]}`) +
		chunk(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"key","arguments":"{\"key\":"}}]}}]}`) +
		chunk(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"observe","arguments":"{}"}}]}}]}`) +
		chunk(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"HOME\"}"}}]}}]}`) +
		chunk(`{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`) +
		chunk(`{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7}}`) + "data: [DONE]\n\n"
	var pieces []string
	got, err := c.Stream(context.Background(), []Message{{Role: "user", Content: "hi"}}, nil, func(s string) error {
		pieces = append(pieces, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Text != "Hello" || strings.Join(pieces, "") != "Hello" || got.Usage != (Usage{12, 7}) || got.FinishReason != "tool_calls" {
		t.Errorf("got %+v (pieces %q)", got, pieces)
	}
	if len(got.ToolCalls) != 2 || got.ToolCalls[0].ID != "a" || got.ToolCalls[0].Function.Name != "observe" ||
		got.ToolCalls[1].ID != "b" || got.ToolCalls[1].Function.Arguments != `{"key":"HOME"}` {
		t.Errorf("tool calls %+v", got.ToolCalls)
	}

	for name, b := range map[string]string{
		"error status": "status:",
		"cut short":    chunk(`{"choices":[{"index":0,"delta":{"content":"Hel"}}]}`),
		"not JSON":     chunk(`{"choices":`) + "data: [DONE]\n\n",
		"error chunk":  chunk(`{"error":{"message":"boom"}}`) + "data: [DONE]\n\n",
	} {
		body = b
		if _, err := c.Stream(context.Background(), nil, nil, nil); !errors.Is(err, ErrProvider) {
			t.Errorf("%s: got %v; want a provider failure", name, err)
		}
	}
}
