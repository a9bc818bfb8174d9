package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/internal/config"
)

func init() {
	addSection("copilot", 90, func(ctx context.Context, b *bench, o options) error { return b.copilot(ctx) })
}

// Copilot measurement sizes: turns × tool calls per turn, and the text
// chunks of the stream-latency turn.
const (
	copilotTurns        = 10
	copilotCallsPerTurn = 10
	copilotChunks       = 300
)

// benchModel is an OpenAI-compatible streaming endpoint in the bench's
// process: each answer is a key press until the turn has had
// copilotCallsPerTurn, then a short text; a message starting "stream"
// gets copilotChunks text pieces, each carrying the time it was sent.
func benchModel() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		results, last := 0, ""
		for _, m := range req.Messages {
			switch m.Role {
			case "user":
				results, last = 0, m.Content
			case "tool":
				results++
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		send := func(v any) {
			b, _ := json.Marshal(v)
			fmt.Fprintf(w, "data: %s\n\n", b)
			_ = rc.Flush()
		}
		text := func(s string) {
			send(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": s}}}})
		}
		switch {
		case strings.HasPrefix(last, "stream"):
			for range copilotChunks {
				text(fmt.Sprintf("t=%d;", time.Now().UnixNano()))
				time.Sleep(2 * time.Millisecond)
			}
		case results < copilotCallsPerTurn:
			key := []string{"VOLUME_UP", "VOLUME_DOWN"}[results%2]
			send(map[string]any{"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"tool_calls": []any{
				map[string]any{"index": 0, "id": fmt.Sprintf("call_%d", results), "type": "function",
					"function": map[string]any{"name": "key", "arguments": `{"key":"` + key + `"}`}}}}}}})
		default:
			text("Done.")
		}
		send(map[string]any{"choices": []any{}, "usage": map[string]any{"prompt_tokens": 100, "completion_tokens": 10}})
		fmt.Fprint(w, "data: [DONE]\n\n")
		_ = rc.Flush()
	}))
}

// copilot measures (1) the copilot's time per tool call — a model answer
// over a local streaming endpoint, the tool call's events, the action
// through the fleet's PerformAction — against the same key press over REST
// (POST /v1/devices/{id}/actions), one sim phone, sequential, a copilot
// turn and a round of the same presses over REST taking turns; target
// ≤ 1.2×; and (2) the latency from the endpoint sending a text chunk to a
// client of GET /v1/copilot/threads/{id}/stream reading its event; target
// p99 ≤ 50 ms.
func (b *bench) copilot(ctx context.Context) error {
	header("Copilot: time per tool call vs the same action over REST; provider chunk → stream event latency (1 sim phone)")
	model := benchModel()
	defer model.Close()
	db, err := b.newDB(ctx)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "pfbench-copilot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env := map[string]string{"DATABASE_URL": db.url, "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_MODE": "local",
		"SERVICE_DATA_DIR": dir, "SERVICE_SIM_DEVICES": "1", "SERVICE_LOG_LEVEL": "error",
		"SERVICE_PLANNER_URL": model.URL + "/v1", "SERVICE_PLANNER_MODEL": "bench"}
	cfg, err := config.Load(flag.NewFlagSet("pfbench", flag.ContinueOnError), nil, func(k string) string { return env[k] })
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	a, err := service.New(sctx, cfg, quiet)
	if err != nil {
		stop()
		return err
	}
	served := make(chan error, 1)
	go func() { served <- a.Run(sctx) }()
	defer func() { stop(); <-served }()
	base := "http://" + a.Addr()
	c := &http.Client{Timeout: time.Minute}

	var device string
	for wait := time.Now().Add(30 * time.Second); device == "" && time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
		var page struct {
			Devices []struct {
				DeviceID string `json:"deviceId"`
			} `json:"devices"`
		}
		if err := restCall(ctx, c, "GET", base+"/v1/devices", nil, &page); err != nil {
			return err
		}
		if len(page.Devices) > 0 {
			device = page.Devices[0].DeviceID
		}
	}
	if device == "" {
		return fmt.Errorf("the sim phone never showed")
	}

	type thread struct {
		Thread struct {
			State       string `json:"state"`
			LastOutcome string `json:"lastOutcome"`
		} `json:"thread"`
	}
	var threadID string
	turn := func(message string) error {
		body := map[string]any{"message": message}
		if threadID == "" {
			body["deviceId"] = device
		} else {
			body["threadId"] = threadID
		}
		var posted struct {
			ThreadID string `json:"threadId"`
		}
		if err := restCall(ctx, c, "POST", base+"/v1/copilot", body, &posted); err != nil {
			return err
		}
		threadID = posted.ThreadID
		for wait := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			var t thread
			if err := restCall(ctx, c, "GET", base+"/v1/copilot/threads/"+threadID, nil, &t); err != nil {
				return err
			}
			if t.Thread.State == "idle" {
				if t.Thread.LastOutcome != "completed" {
					return fmt.Errorf("a copilot turn ended %s", t.Thread.LastOutcome)
				}
				return nil
			}
			if time.Now().After(wait) {
				return fmt.Errorf("a copilot turn did not end")
			}
		}
	}
	if err := turn("warm up"); err != nil {
		return err
	}
	// restRound presses the keys of one turn over REST, under a lease of
	// its own, taken once the turn has given its lease back (just after
	// the thread shows idle) and given back after.
	calls := copilotTurns * copilotCallsPerTurn
	rest := make([]time.Duration, 0, calls)
	var turnsTime, restTime time.Duration
	restRound := func(round int) error {
		var lease struct {
			LeaseID string `json:"leaseId"`
		}
		for wait := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			err := restCall(ctx, c, "POST", base+"/v1/devices/"+device+"/lease", map[string]any{"ttlSeconds": 600}, &lease)
			if err == nil {
				break
			}
			if time.Now().After(wait) {
				return err
			}
		}
		for i := range copilotCallsPerTurn {
			start := time.Now()
			if err := restCall(ctx, c, "POST", base+"/v1/devices/"+device+"/actions", map[string]any{"action": "key",
				"arguments":      map[string]string{"key": []string{"VOLUME_UP", "VOLUME_DOWN"}[i%2]},
				"idempotencyKey": fmt.Sprintf("bench-copilot-rest-%d-%d", round, i), "leaseId": lease.LeaseID}, nil); err != nil {
				return err
			}
			d := time.Since(start)
			rest, restTime = append(rest, d), restTime+d
		}
		return restCall(ctx, c, "DELETE", base+"/v1/devices/"+device+"/lease?leaseId="+lease.LeaseID, nil, nil)
	}
	// A copilot turn and the same key presses over REST take turns, so
	// that both see the same moments of a shared machine.
	measured := time.Now()
	for round := range copilotTurns {
		start := time.Now()
		if err := turn("press the volume keys"); err != nil {
			return err
		}
		turnsTime += time.Since(start)
		if err := restRound(round); err != nil {
			return err
		}
	}
	perCall, perREST := turnsTime/time.Duration(calls), restTime/time.Duration(calls)
	// The copilot's own part of each call: from the model's tool call
	// parsed (copilot.tool_called) to the action's receipt in hand
	// (copilot.tool_completed), read back from the events; the model's
	// round trip is the provider's time, not the copilot's.
	var spans []time.Duration
	rows, err := db.pool.Query(ctx, `SELECT (extract(epoch FROM (d.data->>'at')::timestamptz - (c.data->>'at')::timestamptz) * 1e6)::bigint
		FROM events c JOIN events d ON d.event_type = 'copilot.tool_completed' AND d.data->>'callId' = c.data->>'callId'
		WHERE c.event_type = 'copilot.tool_called' AND (c.data->>'at')::timestamptz >= $1`, measured)
	if err != nil {
		return err
	}
	for rows.Next() {
		var us int64
		if err := rows.Scan(&us); err != nil {
			rows.Close()
			return err
		}
		spans = append(spans, time.Duration(us)*time.Microsecond)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	restP50, spanP50 := percentile(rest, 0.5), percentile(spans, 0.5)
	ratio := float64(spanP50) / float64(restP50)
	line("%-52s %12s %10s", "", "per call", "vs REST")
	line("%-52s %12s %9.2f×  %s (target ≤ 1.2×)", fmt.Sprintf("copilot's own part, p50 of %d calls (tool call → receipt)", len(spans)),
		spanP50.Round(10*time.Microsecond), ratio, verdict(ratio <= 1.2))
	line("%-52s %12s %9.2f×  %s", fmt.Sprintf("end to end (%d turns × %d calls, mean)", copilotTurns, copilotCallsPerTurn),
		perCall.Round(10*time.Microsecond), float64(perCall)/float64(perREST), "with the model's round trip, history and the client's polling")
	line("%-52s %12s %9s  mean %s", fmt.Sprintf("REST action, p50 of %d sequential (baseline)", calls), restP50.Round(10*time.Microsecond), "1.00×",
		perREST.Round(10*time.Microsecond))

	// Stream latency: a client follows the thread; the endpoint streams
	// timestamped chunks.
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/copilot/threads/"+threadID+"/stream", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var mu sync.Mutex
	var lat []time.Duration
	done := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		event, caughtUp := "", false
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "event: "):
				event = strings.TrimPrefix(l, "event: ")
			case strings.HasPrefix(l, "data: ") && event == "copilot.message_posted" && !caughtUp:
				if strings.Contains(l, `"stream me some text"`) {
					caughtUp = true
				}
			case strings.HasPrefix(l, "data: ") && event == "copilot.text_streamed" && caughtUp:
				at := time.Now()
				var d struct{ Text string }
				_ = json.Unmarshal([]byte(strings.TrimPrefix(l, "data: ")), &d)
				for _, part := range strings.Split(d.Text, ";") {
					if ns, err := strconv.ParseInt(strings.TrimPrefix(part, "t="), 10, 64); err == nil && part != "" {
						mu.Lock()
						lat = append(lat, at.Sub(time.Unix(0, ns)))
						mu.Unlock()
					}
				}
			case strings.HasPrefix(l, "data: ") && event == "copilot.turn_ended" && caughtUp:
				done <- nil
				return
			}
		}
		done <- fmt.Errorf("the stream ended: %v", sc.Err())
	}()
	if err := turn("stream me some text"); err != nil {
		return err
	}
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-time.After(time.Minute):
		return fmt.Errorf("the stream did not show the turn's end")
	}
	mu.Lock()
	defer mu.Unlock()
	p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
	line("%-46s %12s %10s", "", "p50", "p99")
	line("%-46s %12s %10s  %s (target p99 ≤ 50 ms)", fmt.Sprintf("provider chunk → stream event (%d chunks)", len(lat)),
		p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), verdict(p99 <= 50*time.Millisecond))
	return nil
}
