package service

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"phonefleet/commands/cqrs"
	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/apitest"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// copilotService is a hosted service whose copilot asks a scripted model,
// with one sim phone for organisation org_a.
type copilotService struct {
	t      *testing.T
	a      *App
	base   string
	model  *scriptedModel
	idp    *identitytest.IdP
	aud    string
	person string // user_a's console token
	device string
	call   func(token, method, path, body string, want int) map[string]any
}

// Organisation org_a has one live subscription, so its copilot has the
// price list's allowance (the embedded one: 2,000,000 tokens) to spend.
func startCopilotService(t *testing.T) *copilotService {
	t.Helper()
	s := startCopilotServiceWith(t, nil)
	recordFulfilment(t, s.a, "org_a", domain.BillingSubscription, time.Now())
	return s
}

// startCopilotServiceWith is startCopilotService with more settings, and
// no subscription recorded (nothing included: a chat message is answered
// in command mode).
func startCopilotServiceWith(t *testing.T, more map[string]string) *copilotService {
	t.Helper()
	idp := identitytest.New(t)
	model := newScriptedModel(t)
	env := map[string]string{
		"SERVICE_MODE":                     "hosted",
		"SERVICE_ADDR":                     "127.0.0.1:0",
		"DATABASE_URL":                     testutil.DatabaseURL(t),
		"SERVICE_DATA_DIR":                 t.TempDir(),
		"SERVICE_PUBLIC_URL":               "http://copilot.test",
		"SERVICE_OAUTH_ISSUER":             idp.Issuer,
		"SERVICE_OAUTH_JWKS_URL":           idp.JWKSURL,
		"SERVICE_OAUTH_ROLE_URL":           idp.RoleURL,
		"SERVICE_RATE_LIMIT_AUTHENTICATED": "100000",
		"SERVICE_RATE_LIMIT_ANONYMOUS":     "100000",
		"SERVICE_SIM_DEVICES":              "0",
		"SERVICE_PLANNER_URL":              model.URL(),
		"SERVICE_PLANNER_API_KEY":          "sk-copilot-e2e",
		"SERVICE_PLANNER_MODEL":            "scripted-1",
	}
	maps.Copy(env, more)
	a, base := startApp(t, env)
	aud := "http://copilot.test/mcp"
	ids, err := a.app.Fleet.RegisterDevices.Handle(testutil.Context(t), fleet.RegisterDevices{OrgID: "org_a", Backend: "sim", Count: 1})
	if err != nil || len(ids) != 1 {
		t.Fatalf("register a sim phone: %v (%v)", err, ids)
	}
	s := &copilotService{t: t, a: a, base: base, model: model, idp: idp, aud: aud,
		person: idp.Console(t, aud, "user_a", "org_a", "admin"), device: ids[0],
		call: checkedCaller(t, apitest.FromHandler(t, a.server.Handler()), base)}
	auth := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "user_a", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := a.app.Fleet.GetDevice.Handle(testutil.Context(t), fleet.GetDevice{Auth: auth, DeviceID: s.device}); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the sim phone never showed: %v", err)
		}
	}
	return s
}

// settled waits until no turn of the thread runs in the service and
// returns the thread as GET /v1/copilot/threads/{id} answers it.
func (s *copilotService) settled(threadID string) map[string]any {
	s.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); s.a.capabilities.Copilot.Running(threadID); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			s.t.Fatalf("the turn of thread %s never ended", threadID)
		}
	}
	// The read model shows the turn's end shortly after.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		th := s.call(s.person, "GET", "/v1/copilot/threads/"+threadID, "", http.StatusOK)
		if th["thread"].(map[string]any)["state"] == "idle" {
			return th
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("thread %s never showed its turn's end", threadID)
		}
	}
}

// items returns a thread's items of kind.
func items(thread map[string]any, kind string) []map[string]any {
	var out []map[string]any
	all, _ := thread["items"].([]any)
	for _, it := range all {
		if m, _ := it.(map[string]any); m != nil && m["kind"] == kind {
			out = append(out, m)
		}
	}
	return out
}

// receiptCount is how many receipts the device has.
func (s *copilotService) receiptCount() int {
	// Every receipt recorded so far, once the receipts read model has it.
	if err := cqrs.AwaitAll(testutil.Context(s.t), s.a.store, s.a.runner, projections.ReceiptsName); err != nil {
		s.t.Fatal(err)
	}
	page := s.call(s.person, "GET", "/v1/receipts?deviceId="+s.device+"&limit=100", "", http.StatusOK)
	rs, _ := page["receipts"].([]any)
	return len(rs)
}

// TestCopilotOpensNotesAndTypesANote: a person asks the copilot to write a
// note; the scripted model opens Notes, looks, taps the field and types.
// Each action is the fleet's own (a receipt per idempotency key, attributed
// to the person, decided on the frame the model saw); the thread shows the
// streamed text, each tool call with its receipt and frames, the tokens
// the provider reported, and rebuilds to the same rows. The thread's
// stream sends every event and resumes after Last-Event-ID.
func TestCopilotOpensNotesAndTypesANote(t *testing.T) {
	s := startCopilotService(t)
	s.model.play(func(req modelRequest, w *modelStream) {
		switch req.toolResults() {
		case 0:
			w.text("Opening ")
			w.text("Notes.")
			w.call("open_app", `{"package":"com.example.notes"}`)
		case 1:
			w.call("observe", `{}`)
		case 2:
			ref := elementRef(req.lastToolResult(t), "com.example.notes:id/input")
			if ref == "" {
				t.Errorf("the observation has no note field: %v", req.lastToolResult(t))
			}
			w.call("tap", fmt.Sprintf(`{"ref":%q}`, ref))
		case 3:
			w.call("type_text", `{"text":"buy milk"}`)
		default:
			w.text("Your note says ")
			w.text("“buy milk”.")
		}
		w.done(120, 30)
	})
	posted := s.call(s.person, "POST", "/v1/copilot", `{"deviceId":"`+s.device+`","message":"write a note: buy milk"}`, http.StatusAccepted)
	threadID := posted["threadId"].(string)
	thread := s.settled(threadID)

	head := thread["thread"].(map[string]any)
	if head["state"] != "idle" || head["lastOutcome"] != "completed" || head["deviceId"] != s.device {
		t.Fatalf("thread %v; want idle, completed, on the phone\n%v", head, thread["items"])
	}
	if u := head["usage"].(map[string]any); u["inputTokens"] != float64(5*120) || u["outputTokens"] != float64(5*30) {
		t.Errorf("usage %v; want the five answers' tokens (600 in, 150 out)", u)
	}
	msgs := items(thread, "message")
	var texts []string
	for _, m := range msgs {
		texts = append(texts, fmt.Sprint(m["role"], ": ", m["text"]))
	}
	if want := []string{"user: write a note: buy milk", "assistant: Opening Notes.", "assistant: Your note says “buy milk”."}; !slices.Equal(texts, want) {
		t.Errorf("messages %q; want %q", texts, want)
	}
	calls := items(thread, "tool_call")
	var tools []string
	for _, c := range calls {
		tools = append(tools, c["tool"].(string)+":"+c["state"].(string))
	}
	if want := []string{"open_app:succeeded", "observe:succeeded", "tap:succeeded", "type_text:succeeded"}; !slices.Equal(tools, want) {
		t.Fatalf("tool calls %v; want %v", tools, want)
	}
	// Each action's receipt is the fleet's, attributed to the person.
	for _, c := range calls {
		res := c["result"].(map[string]any)
		if c["tool"] == "observe" {
			if !strings.HasPrefix(fmt.Sprint(res["frameId"]), "frm_") {
				t.Errorf("observe result %v; want the frame it stored", res)
			}
			continue
		}
		key := c["idempotencyKey"].(string)
		if res["idempotencyKey"] != key || res["receiptState"] != "committed" || res["frameAfter"] == nil {
			t.Errorf("%s result %v; want the committed receipt of %s with its frames", c["tool"], res, key)
		}
		rc := s.call(s.person, "GET", "/v1/receipts/"+key, "", http.StatusOK)
		actor, _ := rc["actor"].(map[string]any)
		if rc["state"] != "committed" || actor["userId"] != "user_a" || actor["apiKeyId"] != nil || rc["action"] != c["tool"] {
			t.Errorf("receipt %s: %v; want committed, %s, by user_a", key, rc, c["tool"])
		}
		if c["tool"] == "tap" || c["tool"] == "type_text" {
			if rc["observedFrame"] == nil || rc["observedFrame"] != c["observedFrame"] {
				t.Errorf("receipt %s was decided on %v; want the frame the model saw (%v)", key, rc["observedFrame"], c["observedFrame"])
			}
		}
	}
	// The phone shows the note typed.
	auth := domain.Auth{OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "user_a", Role: domain.RoleAdmin, Scopes: domain.AllScopes}
	obs, err := s.a.app.Fleet.ObserveDevice.Handle(testutil.Context(t), fleet.ObserveDevice{Auth: auth, DeviceID: s.device, Elements: domain.ElementsAll})
	if err != nil {
		t.Fatal(err)
	}
	typed := false
	for _, e := range obs.Elements {
		typed = typed || e.ID == "com.example.notes:id/input" && e.Text == "buy milk"
	}
	if !typed {
		t.Errorf("the note field does not hold the note: %+v", obs.Elements)
	}
	// Usage reports the copilot's tokens beside device time.
	usage := s.call(s.person, "GET", "/v1/usage", "", http.StatusOK)["copilot"].(map[string]any)
	if usage["inputTokens"] != float64(600) || usage["outputTokens"] != float64(150) || usage["totalTokens"] != float64(750) {
		t.Errorf("usage copilot %v; want 600 in, 150 out, 750 in all", usage)
	}
	if other := s.call(s.person, "GET", "/v1/usage?deviceId="+domain.NewID(domain.PrefixDevice), "", http.StatusOK)["copilot"].(map[string]any); other["totalTokens"] != float64(0) {
		t.Errorf("usage copilot on another device %v; want none", other)
	}
	// The lease the turn took was given back.
	if ls := s.call(s.person, "GET", "/v1/leases", "", http.StatusOK)["leases"].([]any); len(ls) != 0 {
		t.Errorf("leases after the turn: %v; want none", ls)
	}

	// What the model was asked: streamed, with usage, the person's tools,
	// the provider's key; and it saw each tool's result.
	asked := s.model.asked()
	if len(asked) != 5 {
		t.Fatalf("the model was asked %d times; want 5", len(asked))
	}
	var offered []string
	for _, tl := range asked[0].Tools {
		offered = append(offered, tl.Function.Name)
	}
	for _, want := range []string{"observe", "tap", "type_text", "key", "swipe", "open_app"} {
		if !slices.Contains(offered, want) {
			t.Errorf("tools offered %v; want %s among them", offered, want)
		}
	}
	if !asked[0].Stream || !asked[0].StreamOptions.IncludeUsage || asked[0].Model != "scripted-1" ||
		asked[0].Header.Get("Authorization") != "Bearer sk-copilot-e2e" {
		t.Errorf("first request: stream %v, usage %v, model %q, auth %q", asked[0].Stream, asked[0].StreamOptions.IncludeUsage,
			asked[0].Model, asked[0].Header.Get("Authorization"))
	}
	if got := asked[4].toolResults(); got != 4 {
		t.Errorf("the last request carried %d tool results; want 4", got)
	}

	// The stream: every event from the start, then resumed after the third.
	all := readCopilotStream(t, s.base, s.person, threadID, "", "copilot.turn_ended")
	if len(all) < 10 || all[0].event != "copilot.thread_started" || all[len(all)-1].event != "copilot.turn_ended" {
		t.Fatalf("stream: %v; want thread_started … turn_ended", all)
	}
	for i, e := range all {
		if e.id != int64(i+1) {
			t.Fatalf("stream event %d has id %d; want %d", i, e.id, i+1)
		}
	}
	var streamed strings.Builder
	for _, e := range all {
		if e.event == "copilot.text_streamed" {
			var d struct{ Text string }
			_ = json.Unmarshal([]byte(e.data), &d)
			streamed.WriteString(d.Text)
		}
	}
	if streamed.String() != "Opening Notes.Your note says “buy milk”." {
		t.Errorf("streamed text %q", streamed.String())
	}
	resumed := readCopilotStream(t, s.base, s.person, threadID, "3", "copilot.turn_ended")
	if len(resumed) != len(all)-3 || resumed[0].id != 4 || resumed[0].data != all[3].data {
		t.Fatalf("resumed after 3: %d events from id %d; want %d from 4", len(resumed), resumed[0].id, len(all)-3)
	}

	// Threads are a projection: a rebuild gives the same rows.
	before := copilotRows(t, s.a)
	if err := s.a.runner.Rebuild(testutil.Context(t), projections.CopilotName, nil); err != nil {
		t.Fatal(err)
	}
	if after := copilotRows(t, s.a); after != before {
		t.Fatalf("rebuild changed the rows:\nbefore %s\nafter  %s", before, after)
	}
	list := s.call(s.person, "GET", "/v1/copilot/threads", "", http.StatusOK)["threads"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["threadId"] != threadID {
		t.Errorf("threads %v; want the one thread", list)
	}
}

// copilotRows renders the copilot read model's rows.
func copilotRows(t *testing.T, a *App) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT thread_id, org_id, user_id, device_id, title, created_at, updated_at, turn_id, last_outcome, input_tokens, output_tokens, version FROM copilot_threads ORDER BY thread_id`,
		`SELECT thread_id, item_key, seq, kind, turn_id, data::text FROM copilot_items ORDER BY thread_id, seq`,
		`SELECT event_id, org_id, user_id, thread_id, input_tokens, output_tokens, at FROM copilot_tokens ORDER BY event_id`,
	} {
		rows, err := a.db.Pool.Query(testutil.Context(t), q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&b, vals...)
		}
		rows.Close()
	}
	return b.String()
}

type sseEvent struct {
	id          int64
	event, data string
}

// readCopilotStream reads a thread's stream (after lastID when not empty)
// until an event named until, and returns the events read.
func readCopilotStream(t *testing.T, base, token, threadID, lastID, until string) []sseEvent {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/copilot/threads/"+threadID+"/stream", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" {
				out = append(out, cur)
				if cur.event == until {
					return out
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.id, _ = strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
	t.Fatalf("the stream ended before %s: %v (%v)", until, out, sc.Err())
	return nil
}

// TestCopilotStopsMidTurn: a stop while the model is answering ends the
// turn at once, and nothing the model asks for afterwards is carried out:
// neither when the stop is made here (the model's stream is abandoned) nor
// when it was recorded by another instance (the tool call's record, made
// with the action's request at the version the turn saw, is refused, so
// the action is never sent).
func TestCopilotStopsMidTurn(t *testing.T) {
	s := startCopilotService(t)

	// Stopped through the route while the model streams.
	streaming, release := make(chan struct{}), make(chan struct{})
	abandoned := make(chan struct{})
	s.model.play(func(req modelRequest, w *modelStream) {
		w.text("Pressing Home")
		close(streaming)
		select {
		case <-release:
		case <-w.r.Context().Done():
			close(abandoned)
			return
		}
		w.call("key", `{"key":"HOME"}`)
		w.done(10, 5)
	})
	before := s.receiptCount()
	threadID := s.call(s.person, "POST", "/v1/copilot", `{"deviceId":"`+s.device+`","message":"go home"}`, http.StatusAccepted)["threadId"].(string)
	<-streaming
	stopped := s.call(s.person, "POST", "/v1/copilot/threads/"+threadID+"/stop", "", http.StatusOK)["thread"].(map[string]any)
	if stopped["state"] != "idle" || stopped["lastOutcome"] != "stopped" {
		t.Fatalf("after stop: %v; want idle, stopped", stopped)
	}
	select {
	case <-abandoned:
	case <-time.After(30 * time.Second):
		close(release)
		t.Fatal("the model's stream was not abandoned after the stop")
	}
	thread := s.settled(threadID)
	if c := items(thread, "tool_call"); len(c) != 0 {
		t.Errorf("tool calls after the stop: %v; want none", c)
	}
	if ends := items(thread, "turn_ended"); len(ends) != 1 || ends[0]["outcome"] != "stopped" {
		t.Errorf("turn ends %v; want one, stopped", ends)
	}
	// Stopping again changes nothing.
	s.call(s.person, "POST", "/v1/copilot/threads/"+threadID+"/stop", "", http.StatusOK)

	// Stopped by another instance: recorded in the thread's stream while
	// this one waits for the model, which then asks for an action.
	answered := make(chan struct{})
	proceed := make(chan struct{})
	s.model.play(func(req modelRequest, w *modelStream) {
		w.text("Pressing Home")
		close(answered)
		<-proceed
		w.call("key", `{"key":"HOME"}`)
		w.done(10, 5)
	})
	s.call(s.person, "POST", "/v1/copilot", `{"threadId":"`+threadID+`","message":"go home now"}`, http.StatusAccepted)
	<-answered
	// Once the thread shows the text, the turn waits for the rest of the answer.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		th := s.call(s.person, "GET", "/v1/copilot/threads/"+threadID, "", http.StatusOK)
		if m := items(th, "message"); len(m) == 4 && m[3]["text"] == "Pressing Home" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second answer's text never showed")
		}
	}
	stopElsewhere(t, s.a, threadID)
	close(proceed)
	thread = s.settled(threadID)
	if c := items(thread, "tool_call"); len(c) != 0 {
		t.Errorf("tool calls after the other instance's stop: %v; want none", c)
	}
	if got := s.receiptCount(); got != before {
		t.Errorf("the device has %d receipts; want %d (nothing acted after a stop)", got, before)
	}
	head := thread["thread"].(map[string]any)
	if head["lastOutcome"] != "stopped" || head["state"] != "idle" {
		t.Errorf("thread %v; want idle, stopped", head)
	}
	// The abandoned answer reported no tokens; the one that came after the
	// other instance's stop did, and they are recorded: the provider spent
	// them.
	// (Recorded after the turn's end, they reach the read model last.)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		u := head["usage"].(map[string]any)
		if u["inputTokens"] == float64(10) && u["outputTokens"] == float64(5) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage %v; want the second answer's 10 in, 5 out", u)
		}
		head = s.call(s.person, "GET", "/v1/copilot/threads/"+threadID, "", http.StatusOK)["thread"].(map[string]any)
	}
}

// stopElsewhere records a stop of the thread's turn in its stream, as
// another instance's stop route would: without cancelling anything here.
func stopElsewhere(t *testing.T, a *App, threadID string) {
	t.Helper()
	ctx := testutil.Context(t)
	evs, err := a.store.Load(ctx, domain.CopilotThreadStream(threadID), 1)
	if err != nil {
		t.Fatal(err)
	}
	th := domain.NewCopilotThread(threadID)
	for _, e := range evs {
		ev, err := domain.Events.Decode(e.Type, e.SchemaVersion, e.Data)
		if err != nil {
			t.Fatal(err)
		}
		th.Apply(ev)
	}
	stop := th.Stop(domain.Auth{OrgID: "org_a", Kind: domain.PrincipalConsole, UserID: "user_a"}, time.Now())
	if len(stop) == 0 {
		t.Fatal("no turn in flight to stop")
	}
	news, err := eventstore.Encode(domain.Events, "org_a", stop...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.Append(ctx, domain.CopilotThreadStream(threadID), evs[len(evs)-1].StreamVersion, news...); err != nil {
		t.Fatal(err)
	}
}

// TestCopilotSaysWhenTheModelFails: a malformed tool call (arguments that
// are not JSON, a tool it was not given) and a provider error each end the
// turn failed with the reason in the thread; nothing acts.
func TestCopilotSaysWhenTheModelFails(t *testing.T) {
	s := startCopilotService(t)
	before := s.receiptCount()
	cases := []struct {
		name, reason, detail string
		script               func(req modelRequest, w *modelStream)
	}{
		{"arguments not JSON", "malformed_tool_call", "not a JSON object", func(req modelRequest, w *modelStream) {
			w.call("key", `{"key":"HOME"}`)
			w.call("tap", `{"x": 10, "y":`)
			w.done(10, 5)
		}},
		{"unknown tool", "malformed_tool_call", "not one of its tools", func(req modelRequest, w *modelStream) {
			w.call("factory_reset", `{}`)
			w.done(10, 5)
		}},
		{"invalid action", "malformed_tool_call", "not a valid action", func(req modelRequest, w *modelStream) {
			w.call("tap", `{"ref":"e1","x":3,"y":4}`)
			w.done(10, 5)
		}},
		{"provider error", "provider_error", "model overloaded", func(req modelRequest, w *modelStream) {
			w.fail(http.StatusInternalServerError, "model overloaded")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s.t = t
			s.model.play(c.script)
			threadID := s.call(s.person, "POST", "/v1/copilot", `{"deviceId":"`+s.device+`","message":"do it"}`, http.StatusAccepted)["threadId"].(string)
			thread := s.settled(threadID)
			ends := items(thread, "turn_ended")
			if len(ends) != 1 || ends[0]["outcome"] != "failed" || ends[0]["reason"] != c.reason ||
				!strings.Contains(fmt.Sprint(ends[0]["detail"]), c.detail) || !strings.Contains(fmt.Sprint(ends[0]["detail"]), "nothing") {
				t.Errorf("turn ends %v; want failed, %s, saying %q and that nothing was done", ends, c.reason, c.detail)
			}
			if calls := items(thread, "tool_call"); len(calls) != 0 {
				t.Errorf("tool calls %v; want none", calls)
			}
		})
	}
	s.t = t
	if got := s.receiptCount(); got != before {
		t.Errorf("the device has %d receipts; want %d (nothing acted)", got, before)
	}
}

// TestCopilotIsForPeople: an API key cannot reach any copilot route; an
// OAuth app is told to use the console; another organisation's (or
// another person's) thread answers exactly as a missing one; a thread that
// is still answering refuses a second message.
func TestCopilotIsForPeople(t *testing.T) {
	s := startCopilotService(t)
	hold, held := make(chan struct{}), make(chan struct{})
	s.model.play(func(req modelRequest, w *modelStream) {
		w.text("Thinking")
		close(held)
		<-hold
		w.done(1, 1)
	})
	threadID := s.call(s.person, "POST", "/v1/copilot", `{"deviceId":"`+s.device+`","message":"hello"}`, http.StatusAccepted)["threadId"].(string)
	<-held
	busy := s.call(s.person, "POST", "/v1/copilot", `{"threadId":"`+threadID+`","message":"again"}`, http.StatusConflict)["error"].(map[string]any)
	if busy["code"] != "wrong_state" || busy["state"] != "working" {
		t.Errorf("a second message while answering: %v; want wrong_state, working", busy)
	}
	close(hold)
	s.settled(threadID)

	key := s.call(s.person, "POST", "/v1/api-keys", `{"name":"copilot","scopes":["devices:read","devices:act","devices:lease"]}`, http.StatusCreated)["token"].(string)
	s.idp.SetRole("user_a", "org_a", "admin")
	app := s.idp.App(t, s.aud, "user_a", "org_a", "third-party")
	otherOrg := s.idp.Console(t, s.aud, "user_b", "org_b", "admin")
	otherPerson := s.idp.Console(t, s.aud, "user_c", "org_a", "admin")
	missing := domain.NewID(domain.PrefixCopilotThread)
	routes := []struct{ method, path, body string }{
		{"POST", "/v1/copilot", `{"deviceId":"` + s.device + `","message":"hi"}`},
		{"GET", "/v1/copilot/threads", ""},
		{"GET", "/v1/copilot/threads/" + threadID, ""},
		{"GET", "/v1/copilot/threads/" + threadID + "/stream", ""},
		{"POST", "/v1/copilot/threads/" + threadID + "/stop", ""},
	}
	for _, r := range routes {
		e := s.call(key, r.method, r.path, r.body, http.StatusForbidden)["error"].(map[string]any)
		if e["code"] != "permission_denied" || !strings.Contains(fmt.Sprint(e["message"]), "API key") {
			t.Errorf("API key, %s %s: %v; want permission_denied saying a key cannot", r.method, r.path, e)
		}
		e = s.call(app, r.method, r.path, r.body, http.StatusForbidden)["error"].(map[string]any)
		if e["code"] != "permission_denied" || !strings.Contains(fmt.Sprint(e["message"]), "console") {
			t.Errorf("OAuth app, %s %s: %v; want permission_denied naming the console", r.method, r.path, e)
		}
	}
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/copilot/approvals", ""},
		{"POST", "/v1/copilot/approvals", `{"approvalId":"` + domain.NewID(domain.PrefixCopilotApproval) + `","decision":"deny"}`},
		{"POST", "/v1/copilot/commands", `{"deviceId":"` + s.device + `","command":"home"}`},
	} {
		for _, tok := range []string{key, app} {
			if e := s.call(tok, r.method, r.path, r.body, http.StatusForbidden)["error"].(map[string]any); e["code"] != "permission_denied" {
				t.Errorf("%s %s: %v; want permission_denied", r.method, r.path, e)
			}
		}
	}
	for _, who := range []string{otherOrg, otherPerson} {
		for _, r := range routes[2:] {
			got := s.call(who, r.method, r.path, r.body, http.StatusNotFound)["error"].(map[string]any)
			want := s.call(who, r.method, strings.Replace(r.path, threadID, missing, 1), r.body, http.StatusNotFound)["error"].(map[string]any)
			if got["code"] != "not_found" || strings.Replace(fmt.Sprint(got), threadID, missing, -1) != fmt.Sprint(want) {
				t.Errorf("%s %s for another: %v; want exactly as a missing thread: %v", r.method, r.path, got, want)
			}
		}
		if l := s.call(who, "GET", "/v1/copilot/threads", "", http.StatusOK)["threads"].([]any); len(l) != 0 {
			t.Errorf("another's thread list: %v; want empty", l)
		}
		// Another organisation's device is not there to talk about.
		e := s.call(otherOrg, "POST", "/v1/copilot", `{"deviceId":"`+s.device+`","message":"hi"}`, http.StatusConflict)["error"].(map[string]any)
		if e["code"] != "device_unavailable" || e["reason"] != "not_found" {
			t.Errorf("another organisation's device: %v; want device_unavailable, not_found", e)
		}
	}
}

// TestCopilotWithoutAModel: a deployment with no model answers the chat
// routes 503 service_unavailable without Retry-After, still reads threads,
// and still carries out direct commands (command mode), parsed without a
// model, each action the fleet's own as the person.
func TestCopilotWithoutAModel(t *testing.T) {
	a, base := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_DATA_DIR": t.TempDir(), "SERVICE_SIM_DEVICES": "1",
	})
	v := apitest.FromHandler(t, a.server.Handler())
	thread := domain.NewID(domain.PrefixCopilotThread)
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/copilot", `{"deviceId":"dev_0","message":"hi"}`},
		{"GET", "/v1/copilot/threads/" + thread + "/stream", ""},
		{"POST", "/v1/copilot/threads/" + thread + "/stop", ""},
	} {
		req, _ := http.NewRequest(r.method, base+r.path, strings.NewReader(r.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var body struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(raw, &body)
		if resp.StatusCode != http.StatusServiceUnavailable || body.Error.Code != "service_unavailable" || resp.Header.Get("Retry-After") != "" {
			t.Errorf("%s %s: %d %s (Retry-After %q); want 503 service_unavailable without Retry-After", r.method, r.path,
				resp.StatusCode, raw, resp.Header.Get("Retry-After"))
		}
		v.Check(t, req, resp, raw)
	}
	// Command mode.
	auth := domain.LocalOperator(a.orgID)
	var device string
	for deadline := time.Now().Add(30 * time.Second); device == ""; time.Sleep(20 * time.Millisecond) {
		page, err := a.app.Fleet.ListDevices.Handle(testutil.Context(t), fleet.ListDevices{Auth: auth})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Devices) > 0 {
			device = page.Devices[0].DeviceID
		} else if time.Now().After(deadline) {
			t.Fatal("the sim phone never showed")
		}
	}
	command := func(cmd string, want int) map[string]any {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"deviceId": device, "command": cmd})
		req, _ := http.NewRequest("POST", base+"/v1/copilot/commands", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s: %d %s; want %d", cmd, resp.StatusCode, raw, want)
		}
		v.Check(t, httptest.NewRequest("POST", "/v1/copilot/commands", strings.NewReader(string(body))), resp, raw)
		var out map[string]any
		_ = json.Unmarshal(raw, &out)
		return out
	}
	actions := func(out map[string]any) []string {
		var got []string
		for _, r := range out["receipts"].([]any) {
			rc := r.(map[string]any)
			if rc["state"] != "committed" || rc["actor"].(map[string]any)["userId"] != auth.UserID {
				t.Errorf("receipt %v; want committed, by the person", rc)
			}
			got = append(got, rc["action"].(string))
		}
		return got
	}
	if got := actions(command("open Notes", http.StatusOK)); !slices.Equal(got, []string{"key", "tap"}) {
		t.Errorf("open Notes took %v; want key (HOME), tap (the icon)", got)
	}
	obs, err := a.app.Fleet.ObserveDevice.Handle(testutil.Context(t), fleet.ObserveDevice{Auth: auth, DeviceID: device, Elements: domain.ElementsAll})
	if err != nil {
		t.Fatal(err)
	}
	if findRef := func(id string) bool {
		for _, e := range obs.Elements {
			if e.ID == id {
				return true
			}
		}
		return false
	}; !findRef("com.example.notes:id/input") {
		t.Errorf("after open Notes the screen shows %+v; want Notes", obs.Elements)
	}
	for _, c := range []struct {
		cmd  string
		want []string
	}{{`tap "Save"`, []string{"tap"}}, {"back", []string{"key"}}, {"home", []string{"key"}}, {"swipe up", []string{"swipe"}}} {
		if got := actions(command(c.cmd, http.StatusOK)); !slices.Equal(got, c.want) {
			t.Errorf("%s took %v; want %v", c.cmd, got, c.want)
		}
	}
	shot := command("screenshot", http.StatusOK)
	if len(shot["receipts"].([]any)) != 0 || !strings.HasPrefix(fmt.Sprint(shot["frameId"]), "frm_") {
		t.Errorf("screenshot: %v; want a frame and no action", shot)
	}
	for _, bad := range []string{"reboot", `tap "No such button"`, "open Nothing"} {
		e := command(bad, http.StatusBadRequest)["error"].(map[string]any)
		if e["code"] != "invalid_argument" || e["field"] != "command" || !strings.Contains(fmt.Sprint(e["message"]), `tap "Save"`) {
			t.Errorf("%s: %v; want invalid_argument on command, saying how commands are written", bad, e)
		}
	}

	resp, err := http.Get(base + "/v1/copilot/threads")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(raw) != `{"threads":[]}`+"\n" && string(raw) != `{"threads":[]}` {
		t.Errorf("threads: %d %s; want 200, none", resp.StatusCode, raw)
	}
}
