// Package chat is a small client of an OpenAI-compatible chat-completions
// endpoint that streams (server-sent events) and calls tools: the
// copilot's model. It speaks the protocol only; what the tools do and
// what is recorded is the caller's.
package chat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Config names the endpoint (SERVICE_COPILOT_*, or the planner's).
type Config struct {
	// BaseURL is the API's base, e.g. https://api.openai.com/v1; requests
	// go to BaseURL/chat/completions.
	BaseURL string
	// APIKey is sent as a bearer token when set.
	APIKey string
	Model  string
	// Client sends the requests; nil means a client without a total
	// timeout (a stream lasts as long as the model writes), bounded by
	// the caller's context.
	Client *http.Client
	// MaxTokens bounds each answer; zero means 1024.
	MaxTokens int
}

// Client asks the endpoint for one completion at a time.
type Client struct{ cfg Config }

// New returns a client, or an error when the configuration is incomplete.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" || cfg.Model == "" {
		return nil, errors.New("the chat client needs a base URL and a model")
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 60 * time.Second, Proxy: http.ProxyFromEnvironment}}
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 1024
	}
	return &Client{cfg: cfg}, nil
}

// Message is one message of the conversation sent to the model.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is a call the model asked for; Arguments is the JSON text the
// model wrote (not checked here).
type ToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Tool is a function offered to the model; Parameters is its JSON Schema.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// Usage is the provider's token count for one completion.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
}

// Completion is what one streamed answer came to.
type Completion struct {
	Text      string
	ToolCalls []ToolCall
	Usage     Usage
	// FinishReason is the provider's (stop, tool_calls, length, …).
	FinishReason string
}

// ErrProvider marks a failure of the provider: unreachable, refused, an
// error status, or a stream that is not a chat completion.
var ErrProvider = errors.New("the model provider failed")

type wireTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	} `json:"function"`
}

type request struct {
	Model         string     `json:"model"`
	Messages      []Message  `json:"messages"`
	Tools         []wireTool `json:"tools,omitempty"`
	Stream        bool       `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens int `json:"max_tokens,omitempty"`
}

type chunk struct {
	Choices []struct {
		Delta struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Stream asks for one completion of messages with tools, streamed: text is
// called with each piece of the answer's text as it arrives (in order,
// from the caller's goroutine). It returns the whole answer, with the
// usage the provider reported (zero when it reported none). Failures of
// the provider wrap ErrProvider; a cancelled ctx returns its error.
func (c *Client) Stream(ctx context.Context, messages []Message, tools []Tool, text func(string) error) (Completion, error) {
	req := request{Model: c.cfg.Model, Messages: messages, Stream: true, MaxTokens: c.cfg.MaxTokens}
	req.StreamOptions.IncludeUsage = true
	for _, t := range tools {
		var w wireTool
		w.Type = "function"
		w.Function.Name, w.Function.Description, w.Function.Parameters = t.Name, t.Description, t.Parameters
		req.Tools = append(req.Tools, w)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Completion{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.BaseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return Completion{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	if c.cfg.APIKey != "" {
		hr.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	resp, err := c.cfg.Client.Do(hr)
	if err != nil {
		if ctx.Err() != nil {
			return Completion{}, ctx.Err()
		}
		return Completion{}, fmt.Errorf("%w: %v", ErrProvider, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		msg := http.StatusText(resp.StatusCode)
		var e chunk
		if json.Unmarshal(raw, &e) == nil && e.Error != nil && e.Error.Message != "" {
			msg = e.Error.Message
		}
		return Completion{}, fmt.Errorf("%w: status %d: %s", ErrProvider, resp.StatusCode, clip(msg, 300))
	}
	// The body is read in its own goroutine, so that while the caller
	// records one piece of text the next pieces gather; the caller is
	// then handed all that arrived meanwhile at once (text is called
	// fewer times the slower it is, never later than it can take it).
	type item struct {
		ch   chunk
		done bool
		err  error
	}
	items := make(chan item, 4096)
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	go func() {
		defer close(items)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		put := func(it item) bool {
			select {
			case items <- it:
				return true
			case <-rctx.Done():
				return false
			}
		}
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data:")
			if !ok {
				continue // blank lines, comments, event: and id: fields
			}
			data = strings.TrimSpace(data)
			if data == "[DONE]" {
				put(item{done: true})
				return
			}
			var ch chunk
			if err := json.Unmarshal([]byte(data), &ch); err != nil {
				put(item{err: fmt.Errorf("%w: a streamed chunk is not JSON: %s", ErrProvider, clip(data, 200))})
				return
			}
			if !put(item{ch: ch}) {
				return
			}
		}
		if err := sc.Err(); err != nil {
			put(item{err: fmt.Errorf("%w: reading the stream: %v", ErrProvider, err)})
		}
	}()
	var out Completion
	var sb strings.Builder
	calls := map[int]*ToolCall{}
	done := false
	var pending strings.Builder
	apply := func(ch chunk) error {
		if ch.Error != nil {
			return fmt.Errorf("%w: %s", ErrProvider, clip(ch.Error.Message, 300))
		}
		if ch.Usage != nil {
			out.Usage = Usage{InputTokens: ch.Usage.PromptTokens, OutputTokens: ch.Usage.CompletionTokens}
		}
		for _, choice := range ch.Choices {
			if choice.Delta.Content != nil && *choice.Delta.Content != "" {
				sb.WriteString(*choice.Delta.Content)
				pending.WriteString(*choice.Delta.Content)
			}
			for _, d := range choice.Delta.ToolCalls {
				tc := calls[d.Index]
				if tc == nil {
					tc = &ToolCall{Type: "function"}
					calls[d.Index] = tc
				}
				if d.ID != "" {
					tc.ID = d.ID
				}
				if d.Function.Name != "" {
					tc.Function.Name += d.Function.Name
				}
				tc.Function.Arguments += d.Function.Arguments
			}
			if choice.FinishReason != nil {
				out.FinishReason = *choice.FinishReason
			}
		}
		return nil
	}
	for !done {
		it, ok := <-items
		for {
			if !ok {
				if ctx.Err() != nil {
					return Completion{}, ctx.Err()
				}
				return Completion{}, fmt.Errorf("%w: the stream ended before [DONE]", ErrProvider)
			}
			if it.err != nil {
				if ctx.Err() != nil {
					return Completion{}, ctx.Err()
				}
				return Completion{}, it.err
			}
			if it.done {
				done = true
				break
			}
			if err := apply(it.ch); err != nil {
				return Completion{}, err
			}
			// Take whatever else has arrived, then hand the text over.
			select {
			case it, ok = <-items:
				continue
			default:
			}
			break
		}
		if pending.Len() > 0 && text != nil {
			if err := text(pending.String()); err != nil {
				return Completion{}, err
			}
		}
		pending.Reset()
	}
	out.Text = sb.String()
	idx := make([]int, 0, len(calls))
	for i := range calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		out.ToolCalls = append(out.ToolCalls, *calls[i])
	}
	return out, nil
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
