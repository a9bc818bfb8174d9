package planner

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"phonefleet/domain"
)

// OpenAIConfig configures the OpenAI-compatible planner
// (SERVICE_PLANNER_URL, SERVICE_PLANNER_API_KEY, SERVICE_PLANNER_MODEL).
type OpenAIConfig struct {
	// BaseURL is the API's base, e.g. https://api.openai.com/v1; the
	// planner posts to BaseURL/chat/completions.
	BaseURL string
	// APIKey is sent as a bearer token when set.
	APIKey string
	Model  string
	// Client sends the requests; nil means a client with a 60 s timeout.
	Client *http.Client
	// History is how many recent steps the model is shown; zero means
	// DefaultHistory.
	History int
	// MaxTokens bounds the model's answer; zero means 512.
	MaxTokens int
}

// OpenAI asks an OpenAI-compatible chat-completions endpoint for each
// step, with one tool per action type plus needs_user and finish, and
// tool_choice required. Each request is self-contained: a system prompt,
// then one user message with the goal, the last few steps as text and the
// current screen (element list and the downscaled JPEG as a data URL), so
// its size is bounded however long the run.
type OpenAI struct {
	cfg OpenAIConfig
}

// NewOpenAI returns the planner, or an error when the configuration is
// incomplete.
func NewOpenAI(cfg OpenAIConfig) (*OpenAI, error) {
	if cfg.BaseURL == "" || cfg.Model == "" {
		return nil, fmt.Errorf("the planner needs a base URL and a model")
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 60 * time.Second}
	}
	if cfg.History <= 0 {
		cfg.History = DefaultHistory
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 512
	}
	return &OpenAI{cfg: cfg}, nil
}

// The chat-completions protocol, the parts used.
type (
	chatRequest struct {
		Model      string        `json:"model"`
		Messages   []chatMessage `json:"messages"`
		Tools      []chatTool    `json:"tools"`
		ToolChoice string        `json:"tool_choice"`
		MaxTokens  int           `json:"max_tokens,omitempty"`
	}
	chatMessage struct {
		Role      string         `json:"role"`
		Content   any            `json:"content"`
		ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
	}
	chatPart struct {
		Type     string        `json:"type"`
		Text     string        `json:"text,omitempty"`
		ImageURL *chatImageURL `json:"image_url,omitempty"`
	}
	chatImageURL struct {
		URL    string `json:"url"`
		Detail string `json:"detail,omitempty"`
	}
	chatTool struct {
		Type     string       `json:"type"`
		Function chatFunction `json:"function"`
	}
	chatFunction struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	chatToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	chatResponse struct {
		Choices []struct {
			Message struct {
				Content   *string        `json:"content"`
				ToolCalls []chatToolCall `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
)

// tools are the device-surface calls offered to the model: one per action
// type (arguments as domain.ParseAction reads them), needs_user and
// finish.
func tools() []chatTool {
	xy := `"x":{"type":"integer","minimum":0,"description":"screen pixels"},"y":{"type":"integer","minimum":0,"description":"screen pixels"}`
	dur := `"durationMs":{"type":"integer","minimum":0,"maximum":10000}`
	pkg := `{"type":"object","properties":{"package":{"type":"string","description":"Android package name"}},"required":["package"],"additionalProperties":false}`
	fn := func(name, desc, params string) chatTool {
		return chatTool{Type: "function", Function: chatFunction{Name: name, Description: desc, Parameters: json.RawMessage(params)}}
	}
	return []chatTool{
		fn(string(domain.ActionTap), "Tap a point (x, y in screen pixels) or an element by its ref from the element list.",
			`{"type":"object","properties":{`+xy+`,"ref":{"type":"string","description":"an element's ref; instead of x and y"}},"additionalProperties":false}`),
		fn(string(domain.ActionDoubleTap), "Double-tap a point.", `{"type":"object","properties":{`+xy+`},"required":["x","y"],"additionalProperties":false}`),
		fn(string(domain.ActionLongPress), "Press and hold a point.", `{"type":"object","properties":{`+xy+`,`+dur+`},"required":["x","y"],"additionalProperties":false}`),
		fn(string(domain.ActionSwipe), "Swipe from (x1, y1) to (x2, y2); swipe up to scroll down.",
			`{"type":"object","properties":{"x1":{"type":"integer","minimum":0},"y1":{"type":"integer","minimum":0},"x2":{"type":"integer","minimum":0},"y2":{"type":"integer","minimum":0},`+dur+`},"required":["x1","y1","x2","y2"],"additionalProperties":false}`),
		fn(string(domain.ActionTypeText), "Type text into the focused field.",
			`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
		fn(string(domain.ActionKey), "Press a key: BACK, HOME, ENTER, DEL, APP_SWITCH, VOLUME_UP, VOLUME_DOWN, POWER.",
			`{"type":"object","properties":{"key":{"type":"string"}},"required":["key"],"additionalProperties":false}`),
		fn(string(domain.ActionOpenApp), "Open an installed app by package name.", pkg),
		fn(string(domain.ActionInstallApp), "Install an app by package name.", pkg),
		fn(KindNeedsUser, "Hand the device to a person (a login, a captcha, a payment, a decision the goal leaves open).",
			`{"type":"object","properties":{"reason":{"type":"string","maxLength":200}},"required":["reason"],"additionalProperties":false}`),
		fn(KindFinish, "End the run: succeeded when the goal is reached on screen, failed when it cannot be.",
			`{"type":"object","properties":{"state":{"type":"string","enum":["succeeded","failed"]},"reason":{"type":"string","maxLength":200},"detail":{"type":"string"}},"required":["state"],"additionalProperties":false}`),
	}
}

const systemPrompt = `You operate an Android phone to reach a goal. Each turn you see the goal, your recent steps and the current screen (an element list and a picture), and you call exactly one tool: an action on the phone, needs_user when only a person can go on, or finish. Coordinates and element bounds are in screen pixels; the picture is scaled down. Prefer tapping an element by its ref. Call finish with state succeeded only when the screen shows the goal reached.`

// Next implements Planner.
func (p *OpenAI) Next(ctx context.Context, in Input) (Decision, error) {
	body, err := json.Marshal(chatRequest{
		Model:      p.cfg.Model,
		Messages:   []chatMessage{{Role: "system", Content: systemPrompt}, {Role: "user", Content: p.userParts(in)}},
		Tools:      tools(),
		ToolChoice: "required",
		MaxTokens:  p.cfg.MaxTokens,
	})
	if err != nil {
		return Decision{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.BaseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return Decision{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if p.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		return Decision{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return Decision{}, fmt.Errorf("%w: reading the answer: %v", ErrUnavailable, err)
	}
	var cr chatResponse
	jsonErr := json.Unmarshal(raw, &cr)
	if resp.StatusCode != http.StatusOK {
		msg := http.StatusText(resp.StatusCode)
		if jsonErr == nil && cr.Error != nil {
			msg = cr.Error.Message
		}
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			return Decision{}, fmt.Errorf("%w: status %d: %s", ErrUnavailable, resp.StatusCode, clip(msg, 300))
		}
		return Decision{}, fmt.Errorf("planner request refused: status %d: %s", resp.StatusCode, clip(msg, 300))
	}
	if jsonErr != nil {
		return Decision{}, fmt.Errorf("%w: the answer is not a chat completion: %v", ErrMalformed, jsonErr)
	}
	if len(cr.Choices) == 0 || len(cr.Choices[0].Message.ToolCalls) == 0 {
		return Decision{}, fmt.Errorf("%w: the model answered without a tool call", ErrMalformed)
	}
	return decide(cr.Choices[0].Message.ToolCalls[0])
}

// decide turns the model's (first) tool call into a checked decision.
func decide(call chatToolCall) (Decision, error) {
	name, args := call.Function.Name, strings.TrimSpace(call.Function.Arguments)
	if args == "" {
		args = "{}"
	}
	if !json.Valid([]byte(args)) {
		return Decision{}, fmt.Errorf("%w: tool %s: arguments are not JSON: %s", ErrMalformed, clip(name, 64), clip(args, 200))
	}
	var d Decision
	switch name {
	case KindNeedsUser:
		var a struct {
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			return d, fmt.Errorf("%w: needs_user: %v", ErrMalformed, err)
		}
		d = Decision{Kind: KindNeedsUser, Reason: a.Reason}
	case KindFinish:
		var a struct {
			State  string `json:"state"`
			Reason string `json:"reason"`
			Detail string `json:"detail"`
		}
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			return d, fmt.Errorf("%w: finish: %v", ErrMalformed, err)
		}
		d = Decision{Kind: KindFinish, State: a.State, Reason: a.Reason, Detail: a.Detail}
	default:
		known := false
		for _, t := range domain.ActionTypes {
			known = known || string(t) == name
		}
		if !known {
			return d, fmt.Errorf("%w: unknown tool %q", ErrMalformed, clip(name, 64))
		}
		d = Decision{Kind: KindAct, Action: name, Arguments: json.RawMessage(args)}
	}
	return d, d.Check()
}

// userParts is the step's one user message: the goal, the recent steps,
// the screen's elements and its picture.
func (p *OpenAI) userParts(in Input) []chatPart {
	var b strings.Builder
	fmt.Fprintf(&b, "Goal: %s\n\n", in.Goal)
	fmt.Fprintf(&b, "Actions taken: %d of at most %d.\n", in.StepSeq, in.MaxSteps)
	hist := in.History
	omitted := in.Omitted
	if len(hist) > p.cfg.History {
		omitted += len(hist) - p.cfg.History
		hist = hist[len(hist)-p.cfg.History:]
	}
	if len(hist) == 0 {
		b.WriteString("No steps yet.\n")
	} else {
		b.WriteString("Recent steps, oldest first")
		if omitted > 0 {
			fmt.Fprintf(&b, " (%d earlier left out)", omitted)
		}
		b.WriteString(":\n")
		for i, s := range hist {
			fmt.Fprintf(&b, "%d. %s\n", i+1, clip(s.Summary(), 400))
		}
	}
	o := in.Observation
	fmt.Fprintf(&b, "\nScreen: %dx%d pixels, screen %s.\n", o.Width, o.Height, map[bool]string{true: "on", false: "off"}[o.ScreenOn])
	els := o.Elements
	if len(els) > MaxElements {
		fmt.Fprintf(&b, "Elements (first %d of %d):\n", MaxElements, len(els))
		els = els[:MaxElements]
	} else {
		b.WriteString("Elements:\n")
	}
	for _, e := range els {
		e.Text, e.Desc = clip(e.Text, MaxElementText), clip(e.Desc, MaxElementText)
		line, _ := json.Marshal(e)
		b.Write(line)
		b.WriteByte('\n')
	}
	parts := []chatPart{{Type: "text", Text: b.String()}}
	// Only a budgeted picture goes to the model: a JPEG at most
	// MaxImageWidth wide. Anything else is left out rather than sent raw.
	if len(o.Image) > 0 && o.ContentType == "image/jpeg" && o.ImageWidth <= MaxImageWidth {
		parts = append(parts, chatPart{Type: "image_url", ImageURL: &chatImageURL{
			URL: "data:image/jpeg;base64," + base64.StdEncoding.EncodeToString(o.Image)}})
	}
	return parts
}

// clip shortens s to at most n runes.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
