//go:build linux

package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"phonefleet/testutil"
)

// receipt is one receipt as GET /v1/receipts lists it.
type receipt struct {
	IdempotencyKey string `json:"idempotencyKey"`
	Action         string `json:"action"`
	State          string `json:"state"`
	OutcomeUnknown bool   `json:"outcomeUnknown"`
	Error          *struct {
		Code string `json:"code"`
	} `json:"error"`
}

// receipts pages through a device's receipts (through instance 0).
func (w *world) receipts(dev string) ([]receipt, error) {
	var all []receipt
	q := url.Values{"deviceId": {dev}, "limit": {"200"}}
	for {
		status, b, err := w.c.do(w.ctx, "GET", w.base[0]+"/v1/receipts?"+q.Encode(), "")
		if err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("GET /v1/receipts: %d %.300s (%v)", status, b, err)
		}
		var page struct {
			Receipts      []receipt `json:"receipts"`
			NextBefore    string    `json:"nextBefore"`
			NextBeforeKey string    `json:"nextBeforeKey"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Receipts...)
		if page.NextBefore == "" {
			return all, nil
		}
		q.Set("before", page.NextBefore)
		q.Set("beforeKey", page.NextBeforeKey)
	}
}

// delivery is one row of GET /v1/webhooks/{id}/deliveries.
type delivery struct {
	DeliveryID string `json:"deliveryId"`
	Event      string `json:"event"`
	Status     string `json:"status"`
	Attempts   int    `json:"attempts"`
}

func (w *world) deliveries() ([]delivery, error) {
	var all []delivery
	q := url.Values{"limit": {"100"}}
	for {
		status, b, err := w.c.do(w.ctx, "GET", w.base[0]+"/v1/webhooks/"+w.webhook+"/deliveries?"+q.Encode(), "")
		if err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("GET deliveries: %d %.300s (%v)", status, b, err)
		}
		var page struct {
			Deliveries []delivery `json:"deliveries"`
			NextBefore string     `json:"nextBefore"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Deliveries...)
		if page.NextBefore == "" {
			return all, nil
		}
		q.Set("nextBefore", page.NextBefore)
	}
}

// receiptsLag is the receipts read model's lag as /healthz reports it
// (-1 when unknown).
func (w *world) receiptsLag() int64 {
	status, b, err := w.c.do(w.ctx, "GET", w.base[0]+"/healthz", "")
	if err != nil || status != http.StatusOK {
		return -1
	}
	return testutil.HealthzLag(b, "receipts")
}

// settled reports what still moves: receipts in flight, deliveries
// pending, runs not ended, the receipts read model's lag.
func (w *world) unsettled(l *load) (string, error) {
	var moving []string
	devs := []string{l.runDev}
	for _, tg := range l.targets {
		devs = append(devs, tg.dev.DeviceID)
	}
	for _, dev := range devs {
		rs, err := w.receipts(dev)
		if err != nil {
			return "", err
		}
		for _, r := range rs {
			if r.State == "pending" && !r.OutcomeUnknown {
				moving = append(moving, "receipt "+r.IdempotencyKey+" in flight")
			}
		}
	}
	ds, err := w.deliveries()
	if err != nil {
		return "", err
	}
	for _, d := range ds {
		if d.Status == "pending" {
			moving = append(moving, "delivery "+d.DeliveryID+" pending")
		}
	}
	for _, id := range l.runs {
		if st := w.runState(id); !terminalRun(st) {
			moving = append(moving, "run "+id+" "+st)
		}
	}
	if lag := w.receiptsLag(); lag != 0 {
		moving = append(moving, fmt.Sprintf("receipts lag %d", lag))
	}
	return strings.Join(moving[:min(len(moving), 8)], "; "), nil
}

// check waits for everything to settle, then checks the invariants and
// prints the counts.
func (w *world) check(l *load, passes int, took time.Duration) {
	t := w.t
	settleStart := time.Now()
	// The last receipts are signed within the checkpoint interval (5 s):
	// give that checkpoint time to be made before waiting for its delivery.
	time.Sleep(6 * time.Second)
	for {
		moving, err := w.unsettled(l)
		if err == nil && moving == "" {
			break
		}
		if time.Since(settleStart) > settleMax {
			t.Errorf("not settled %s after the load stopped: %s (%v)", settleMax, moving, err)
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("settled in %s", time.Since(settleStart).Round(time.Millisecond))

	l.mu.Lock()
	answers, keyDev := l.answers, l.keyDev
	l.mu.Unlock()
	clientSaw := map[string]int{}
	var on500 []string
	for key, a := range answers {
		// Issue 27 item 3: a retried key answers its recorded outcome,
		// never internal_error for as long as the client kept asking.
		if strings.HasPrefix(a, "gave_up:") && strings.Contains(a, "internal_error") {
			on500 = append(on500, key)
		}
		if len(a) > 60 {
			a = a[:60]
		}
		clientSaw[a]++
	}
	sort.Strings(on500)
	if len(on500) > 0 {
		t.Errorf("%d keys answered internal_error on every retry until the client gave up, e.g. %s", len(on500), strings.Join(on500[:min(5, len(on500))], ", "))
	}

	// Actions: every acknowledged one committed exactly once, none
	// pending, and each phone's count equal to its committed taps.
	var acknowledged, committedTotal, unknownTotal, failedTotal, phoneTotal int
	for _, tg := range l.targets {
		if tg.lease == "" {
			continue
		}
		rs, err := w.receipts(tg.dev.DeviceID)
		if err != nil {
			t.Fatal(err)
		}
		byKey := map[string]receipt{}
		committed, unknown, failed, dup := 0, 0, 0, 0
		for _, r := range rs {
			if r.Action != "tap" {
				continue
			}
			if _, seen := byKey[r.IdempotencyKey]; seen {
				dup++
			}
			byKey[r.IdempotencyKey] = r
			switch {
			case r.OutcomeUnknown:
				unknown++
			case r.State == "committed":
				committed++
			case r.State == "failed":
				failed++
			}
		}
		if dup > 0 {
			t.Errorf("%s: %d idempotency keys have two receipts", tg.dev.Name, dup)
		}
		var lost []string
		for key, a := range answers {
			if keyDev[key] != tg.dev.DeviceID {
				continue
			}
			if strings.HasPrefix(a, "gave_up:") {
				r, ok := byKey[key]
				t.Logf("%s: key %s given up (%s); its receipt: %v %+v", tg.dev.Name, key, a, ok, r)
			}
			if a == "committed" {
				acknowledged++
				if r, ok := byKey[key]; !ok || r.State != "committed" {
					lost = append(lost, fmt.Sprintf("%s (receipt %+v)", key, r))
				}
			}
		}
		sort.Strings(lost)
		if len(lost) > 0 {
			t.Errorf("%s: %d acknowledged taps have no committed receipt (lost), e.g. %s", tg.dev.Name, len(lost), strings.Join(lost[:min(5, len(lost))], ", "))
		}
		var phone int
		eventually(t, time.Minute, "the Counter app read", func() error {
			var err error
			phone, _, _, err = w.counter(0, tg.dev.DeviceID)
			return err
		})
		t.Logf("%s (%s): phone count %d; tap receipts committed %d, failed %d, outcome unknown %d", tg.dev.Name, tg.dev.Backend, phone, committed, failed, unknown)
		// A tap whose holder died while the phone acted is recorded
		// outcome unknown (no process knows whether the phone acted);
		// the phone may count it or not. Anything outside that is a tap
		// lost or performed twice.
		switch {
		case phone < committed:
			t.Errorf("%s: the phone counted %d taps but %d tap receipts are committed: %d committed taps are not on the phone (lost)",
				tg.dev.Name, phone, committed, committed-phone)
		case phone > committed+unknown:
			t.Errorf("%s: the phone counted %d taps but only %d tap receipts are committed and %d outcome unknown: %d taps performed without a committed receipt (or twice)",
				tg.dev.Name, phone, committed, unknown, phone-committed-unknown)
		}
		committedTotal += committed
		phoneTotal += phone
		unknownTotal += unknown
		failedTotal += failed
	}

	// Runs: every run of the runs' device ended.
	runStates := map[string]int{}
	for _, id := range l.runs {
		st, reason := w.runEnd(id)
		if !terminalRun(st) {
			t.Errorf("run %s is %q after settling; want every run ended", id, st)
		}
		runStates[st+":"+reason]++
	}

	// Webhooks: every delivery the service lists as delivered reached the
	// receiver, under one id, with one body; none failed.
	ds, err := w.deliveries()
	if err != nil {
		t.Fatal(err)
	}
	w.rcv.mu.Lock()
	bodies := make(map[string][]string, len(w.rcv.bodies))
	for id, b := range w.rcv.bodies {
		bodies[id] = slices.Clone(b)
	}
	refused, accepted := w.rcv.refused, w.rcv.accepted
	w.rcv.mu.Unlock()
	listed := map[string]bool{}
	byEvent := map[string]int{}
	resent := 0
	for _, d := range ds {
		listed[d.DeliveryID] = true
		byEvent[d.Event]++
		got := bodies[d.DeliveryID]
		switch {
		case d.Status != "delivered":
			t.Errorf("delivery %s (%s) is %s after %d attempts; want delivered", d.DeliveryID, d.Event, d.Status, d.Attempts)
		case len(got) == 0:
			t.Errorf("delivery %s (%s) is listed delivered but never reached the receiver", d.DeliveryID, d.Event)
		}
		if len(got) > 1 {
			resent++
		}
		for _, b := range got[1:] {
			if !sameJSON(b, got[0]) {
				t.Errorf("delivery %s was sent with two bodies:\n%s\n%s", d.DeliveryID, got[0], b)
				break
			}
		}
	}
	for id := range bodies {
		if !listed[id] {
			t.Errorf("the receiver got delivery id %q, which the service does not list", id)
		}
	}
	signed := 0
	for before := ""; ; {
		var page struct {
			Checkpoints []struct {
				Entries int `json:"entries"`
			} `json:"checkpoints"`
			NextBefore json.Number `json:"nextBefore"`
		}
		w.mustJSON(0, "GET", "/v1/receipts/checkpoints?limit=200"+before, "", &page)
		signed += len(page.Checkpoints)
		if page.NextBefore == "" {
			break
		}
		before = "&before=" + page.NextBefore.String()
	}
	if n := byEvent["receipt.checkpoint_signed"]; n != signed {
		t.Errorf("%d checkpoints signed but %d receipt.checkpoint_signed deliveries", signed, n)
	}

	// Checkpoints: the export verifies against the published keys, each
	// checkpoint in it matching the chain.
	export := filepath.Join(w.dir, "export.ndjson")
	status, b, err := w.c.do(w.ctx, "GET", w.base[1]+"/v1/receipts/export", "")
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /v1/receipts/export: %d %.300s (%v)", status, b, err)
	}
	if err := os.WriteFile(export, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cpLines := strings.Count(string(b), `"checkpoint"`)
	// Every checkpoint the receiver was sent is held apart, as an auditor
	// keeps them: the export must reach each one's entry and hash to it.
	args := []string{"receipts", "verify", "--file", export, "--keys", w.base[0] + "/v1/receipts/signing-keys"}
	held := 0
	for _, d := range ds {
		if got := bodies[d.DeliveryID]; d.Event == "receipt.checkpoint_signed" && len(got) > 0 {
			f := filepath.Join(w.dir, d.DeliveryID+".json")
			if err := os.WriteFile(f, []byte(got[0]), 0o600); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--checkpoint", f)
			held++
		}
	}
	out, err := exec.Command(w.bin, args...).CombinedOutput()
	if err != nil {
		t.Errorf("phonefleet receipts verify on the export (%d bytes, %d checkpoints listed): %v\n%s", len(b), signed, err, out)
	} else {
		t.Logf("phonefleet receipts verify: %s", strings.TrimSpace(string(out)))
	}

	// Holders.
	l.mu.Lock()
	violations := slices.Clone(l.violations)
	l.mu.Unlock()
	if len(violations) > 0 {
		t.Errorf("%d holder samples show a lock with two holders, e.g. %s", len(violations), strings.Join(violations[:min(5, len(violations))], "; "))
	}

	w.faultsMu.Lock()
	faultNames := make([]string, 0, len(w.faults))
	faultTotal := 0
	for name, n := range w.faults {
		faultNames = append(faultNames, fmt.Sprintf("%s ×%d", name, n))
		faultTotal += n
	}
	w.faultsMu.Unlock()
	sort.Strings(faultNames)
	skew := fmt.Sprintf("instance 1's wall clock ±%s (alternating by start, %d starts)", wallSkew, w.starts[1])
	if w.skewed != "" {
		skew += "; its " + w.skewed
	} else {
		skew += "; monotonic clocks unskewed (no time namespace)"
	}
	fmt.Printf(`chaos counts (%d pass(es), %s of faults):
  actions handed out      %d (REST and MCP; clients saw %v; %d REST retries, %d MCP calls, %d MCP retries)
  actions acknowledged    %d
  actions performed       %d (the phones' counts; committed tap receipts %d, failed %d, outcome unknown %d)
  runs                    %d started, ended %v; %d starts refused or lost
  webhooks                %d deliveries listed %v; %d delivered to the receiver (%d answers 200, %d answers 500), %d re-sent under the same id
  checkpoints             %d signed, %d in the export, %d held apart (their webhook deliveries), verified by phonefleet receipts verify: %v
  holder samples          %d (%d unreadable; %d host locks seen held by one instance), %d with two holders; sim host taken over %v; gateway tunnel connected %v
  faults injected         %d: %s; clock skew of instance-1: %s
`, passes, took.Round(time.Second),
		len(answers), clientSaw, l.retries.Load(), l.mcpCalls.Load(), l.mcpRetries.Load(),
		acknowledged,
		phoneTotal, committedTotal, failedTotal, unknownTotal,
		len(l.runs), runStates, l.runFails.Load(),
		len(ds), byEvent, len(bodies), accepted, refused, resent,
		signed, cpLines, held, err == nil,
		l.samples.Load(), l.sampleErrs.Load(), l.attributed.Load(), len(violations), w.countLogs("this process now drives the sim devices"), w.countLogs("gateway tunnel connected"),
		faultTotal, strings.Join(faultNames, ", "), skew)
	w.shop.check()
}

// countLogs counts each instance's log lines with msg.
func (w *world) countLogs(msg string) map[string]int {
	n := map[string]int{}
	for _, p := range w.inst {
		for _, l := range strings.Split(p.logs.String(), "\n") {
			var m struct {
				Msg string `json:"msg"`
			}
			if json.Unmarshal([]byte(l), &m) == nil && m.Msg == msg {
				n[p.name]++
			}
		}
	}
	return n
}

// sameJSON reports whether a and b hold the same JSON value.
func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return reflect.DeepEqual(x, y)
}
