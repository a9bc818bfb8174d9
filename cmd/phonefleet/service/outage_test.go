package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"phonefleet/internal/pgembed"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
)

// Figures of TestOutcomesSurviveDatabaseRestarts.
const (
	outageTaps      = 450                    // taps sent, each under its own idempotency key
	outageWorkers   = 12                     // clients sending them concurrently (a device queues 16)
	outageTapRate   = 200                    // taps started per second, at most: more than a phone takes, so its queue is never empty
	outageRestarts  = 3                      // immediate restarts of PostgreSQL during the stream
	outageStreamMax = 30 * time.Second       // after this, clients stop retrying
	outageKeyMax    = 15 * time.Second       // a client stops retrying one key after this
	outageSettleMax = 60 * time.Second       // how long receipts may take to settle afterwards
	outageStableFor = 20 * time.Second       // receipts unchanged this long count as settled
	outageRetryWait = 150 * time.Millisecond // a client's pause before retrying the same key
)

// TestOutcomesSurviveDatabaseRestarts drives the real service against a
// throwaway PostgreSQL cluster as an operator would: one sim phone on the
// Counter app, a stream of taps on its + button from several clients, and
// PostgreSQL restarted in immediate mode (as in a crash) three times while
// the taps stream in. A client retries the same idempotency key after a
// transport error, a 5xx other than a recorded outcome, device_busy or a
// retryable conflict, as a careful client does.
//
// Once the database is back and the receipts have settled, no receipt may
// be pending (neither still in flight nor outcome unknown: the process
// never stopped, so it always knows whether the phone acted), and the count
// the phone shows must equal the number of committed tap receipts: a tap
// the phone performed is committed, and a failed one was not performed.
func TestOutcomesSurviveDatabaseRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: restarts a PostgreSQL cluster three times under load (about a minute)")
	}
	if _, err := pgembed.FindBinaries(); err != nil {
		t.Skipf("skipping: no PostgreSQL server binaries for a throwaway cluster: %v", err)
	}

	// The throwaway cluster, reachable by the unprivileged server user when
	// the tests run as root (t.TempDir's parent is mode 0700). Registered
	// before the service, so the service stops first.
	dir := t.TempDir()
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	startCtx, cancelStart := context.WithTimeout(testutil.Context(t), 2*time.Minute)
	defer cancelStart()
	cluster, err := pgembed.Start(startCtx, filepath.Join(dir, "pg"), nil)
	if err != nil {
		t.Fatalf("throwaway PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if err := cluster.Stop(testutil.Context(t)); err != nil {
			t.Errorf("stop the throwaway PostgreSQL: %v", err)
		}
	})

	serviceLog := &testutil.SyncBuffer{}
	logger := slog.New(slog.NewTextHandler(serviceLog, &slog.HandlerOptions{Level: slog.LevelInfo}))
	_, base := startAppLogging(t, map[string]string{
		"DATABASE_URL": cluster.DSN(), "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(dir, "data"), "SERVICE_SIM_DEVICES": "1",
	}, logger)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service log, the device executor's lines:\n%s", lines(serviceLog, 20, "device host", "drives the sim", "outcome unknown"))
			t.Logf("service log, the last failed requests:\n%s", lines(serviceLog, 10, "status=5"))
		}
	})
	c := &outageClient{t: t, base: base, http: &http.Client{Timeout: 30 * time.Second}}

	// One sim phone, leased, with the Counter app installed and open.
	var devices struct {
		Devices []struct {
			DeviceID string `json:"deviceId"`
		} `json:"devices"`
	}
	for wait := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c.mustJSON("GET", "/v1/devices", "", &devices)
		if len(devices.Devices) > 0 || time.Now().After(wait) {
			break
		}
	}
	if len(devices.Devices) != 1 {
		t.Fatalf("want the one local sim phone, got %+v", devices.Devices)
	}
	dev := devices.Devices[0].DeviceID
	var lease struct {
		LeaseID string `json:"leaseId"`
	}
	c.mustJSON("POST", "/v1/devices/"+dev+"/lease", `{"ttlSeconds":600}`, &lease)
	for _, action := range []string{"install_app", "open_app"} {
		c.mustJSON("POST", "/v1/devices/"+dev+"/actions", fmt.Sprintf(`{"action":%q,"arguments":{"package":%q},"idempotencyKey":"outage-%s","leaseId":%q}`,
			action, sim.PkgCounter, action, lease.LeaseID), nil)
	}
	start, inc := c.counter(dev)
	if start != 0 {
		t.Fatalf("a new phone's counter shows %d, want 0", start)
	}
	x, y := inc.Center()

	// The stream: keys handed out at most outageTapRate per second to
	// outageWorkers clients. PostgreSQL restarts when a quarter, half and
	// three quarters of the keys are handed out, so that each restart
	// meets taps in every stage (being recorded, queued, acted on, their
	// outcome being recorded) whatever the machine's speed, and the stream
	// has resumed before the next one.
	streamStart := time.Now()
	deadline := streamStart.Add(outageStreamMax)
	keys := make(chan string)
	restartNow := make(chan int, outageRestarts)
	go func() {
		defer close(keys)
		defer close(restartNow)
		tick := time.NewTicker(time.Second / outageTapRate)
		defer tick.Stop()
		for i := range outageTaps {
			if n := i * (outageRestarts + 1) / outageTaps; i > 0 && n > (i-1)*(outageRestarts+1)/outageTaps {
				restartNow <- n
			}
			<-tick.C
			keys <- fmt.Sprintf("outage-tap-%04d", i)
		}
	}()
	var (
		mu      sync.Mutex
		answers = map[string]string{}   // client's last view: committed, failed:<code>, unknown, gave_up:<last>
		history = map[string][]string{} // every answer a key got, with its time into the stream
		retries atomic.Int64
	)
	var wg sync.WaitGroup
	for range outageWorkers {
		wg.Go(func() {
			for key := range keys {
				body := fmt.Sprintf(`{"action":"tap","arguments":{"x":%d,"y":%d},"idempotencyKey":%q,"leaseId":%q}`, x, y, key, lease.LeaseID)
				answer, seen := c.tapUntilAnswered(dev, body, streamStart, deadline, &retries)
				mu.Lock()
				answers[key], history[key] = answer, seen
				mu.Unlock()
			}
		})
	}
	restarts := make(chan struct{})
	go func() {
		defer close(restarts)
		for i := range restartNow {
			began := time.Now()
			ctx, cancel := context.WithTimeout(testutil.Context(t), time.Minute)
			err := cluster.Restart(ctx, true)
			cancel()
			if err != nil {
				t.Errorf("restart %d of PostgreSQL: %v", i, err)
				return
			}
			t.Logf("restart %d of PostgreSQL (immediate) at %.2fs took %v", i, began.Sub(streamStart).Seconds(), time.Since(began).Round(time.Millisecond))
		}
	}()
	wg.Wait()
	<-restarts
	t.Logf("stream ended after %v: %d taps, %d retries", time.Since(streamStart).Round(time.Millisecond), len(answers), retries.Load())

	// Settle: wait until no receipt is in flight and the receipts read
	// model has caught up (two equal readings in a row), or until nothing
	// has changed for outageStableFor (nothing more will), at most
	// outageSettleMax.
	var fig receiptFigures
	settleStart := time.Now()
	var last string
	var lag int64
	lastChange := time.Now()
	for {
		fig = c.receiptFigures(dev)
		lag = c.receiptsLag()
		s := fig.String()
		if s == last && fig.inFlight() == 0 && lag == 0 {
			break
		}
		if s != last {
			last, lastChange = s, time.Now()
		}
		if time.Since(lastChange) > outageStableFor || time.Since(settleStart) > outageSettleMax {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	phone, _ := c.counter(dev)

	clientSaw := map[string]int{}
	for _, a := range answers {
		clientSaw[a]++
	}
	t.Logf("taps sent %d; clients were answered %v", len(answers), clientSaw)
	t.Logf("receipts after %v of settling (receipts read model lag %d): %s", time.Since(settleStart).Round(time.Millisecond), lag, fig)
	t.Logf("phone count %d; committed tap receipts %d", phone, fig.committed)

	for _, key := range append(first(fig.inFlightKeys, 5), first(fig.unknownKeys, 5)...) {
		t.Logf("%s was answered: %s", key, strings.Join(history[key], "; "))
	}
	if n := fig.inFlight() + fig.unknown; n > 0 {
		t.Errorf("%d tap receipts are still pending after the database came back: %d in flight for good (e.g. %s), %d outcome unknown (e.g. %s); "+
			"the service never stopped, so it knows every outcome",
			n, fig.inFlight(), strings.Join(first(fig.inFlightKeys, 5), ", "), fig.unknown, strings.Join(first(fig.unknownKeys, 5), ", "))
	}
	if phone != fig.committed {
		t.Errorf("the phone counted %d taps, but %d tap receipts are committed (%d failed, %d outcome unknown, %d in flight): "+
			"every tap the phone performed must be committed, and only a tap it did not perform may fail",
			phone, fig.committed, fig.failed, fig.unknown, fig.inFlight())
	}
}

// outageClient is the operator's HTTP client of TestOutcomesSurviveDatabaseRestarts.
type outageClient struct {
	t    *testing.T
	base string
	http *http.Client
}

// do sends one request; err is a transport error.
func (c *outageClient) do(method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// mustJSON sends a request that must succeed (retrying, for up to 30 s,
// what a database outage can cause: a transport error, a 5xx, a retryable
// refusal) and decodes its answer into out.
func (c *outageClient) mustJSON(method, path, body string, out any) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, b, err := c.do(method, path, body)
		if err == nil && status/100 == 2 {
			if out != nil {
				if err := json.Unmarshal(b, out); err != nil {
					c.t.Fatalf("%s %s: %v in %.300s", method, path, err, b)
				}
			}
			return
		}
		var env struct {
			Error struct {
				Retryable bool `json:"retryable"`
			} `json:"error"`
		}
		_ = json.Unmarshal(b, &env)
		if time.Now().After(deadline) || (err == nil && status < 500 && status != http.StatusTooManyRequests && !env.Error.Retryable) {
			c.t.Fatalf("%s %s: %d %.300s (%v)", method, path, status, b, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// receiptsLag reads the receipts read model's lag from /healthz (-1 when
// it cannot be read).
func (c *outageClient) receiptsLag() int64 {
	_, b, err := c.do("GET", "/healthz", "")
	if err != nil {
		return -1
	}
	return testutil.HealthzLag(b, "receipts")
}

// tapUntilAnswered sends one tap and repeats it under the same key until it
// has an outcome: "committed", "failed:<code>", "unknown", or, when
// deadline passes first, "gave_up:<last answer>". seen lists every answer
// (repeats collapsed) with its time since t0.
func (c *outageClient) tapUntilAnswered(dev, body string, t0, deadline time.Time, retries *atomic.Int64) (answer string, seen []string) {
	path := "/v1/devices/" + dev + "/actions"
	var prev string
	t1 := time.Now()
	note := func(at time.Time, s string) {
		if s != prev {
			seen = append(seen, fmt.Sprintf("%.2fs %s", at.Sub(t0).Seconds(), s))
			prev = s
		}
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			retries.Add(1)
			time.Sleep(outageRetryWait)
		}
		sent := time.Now()
		status, b, err := c.do("POST", path, body)
		var last string
		switch {
		case err != nil:
			last = "transport_error"
			note(sent, last)
		case status/100 == 2:
			note(sent, "200")
			return "committed", seen
		default:
			var env struct {
				Error struct {
					Code      string `json:"code"`
					Retryable *bool  `json:"retryable"`
				} `json:"error"`
			}
			_ = json.Unmarshal(b, &env)
			code := env.Error.Code
			retryable := env.Error.Retryable != nil && *env.Error.Retryable
			note(sent, strconv.Itoa(status)+" "+code)
			switch {
			case code == "action_outcome_unknown":
				return "unknown", seen
			case status == http.StatusInternalServerError, status == http.StatusServiceUnavailable,
				status == http.StatusGatewayTimeout, status == http.StatusTooManyRequests, retryable:
				last = strconv.Itoa(status) + " " + code
			default:
				return "failed:" + code, seen
			}
		}
		if now := time.Now(); now.After(deadline) || now.Sub(t1) > outageKeyMax {
			return "gave_up:" + last, seen
		}
	}
}

// counter reads the Counter app's count and the + button from the phone's
// UI snapshot.
func (c *outageClient) counter(dev string) (int, sim.Bounds) {
	c.t.Helper()
	var snap struct {
		Root sim.Element `json:"root"`
	}
	c.mustJSON("GET", "/v1/devices/"+dev+"/snapshot", "", &snap)
	count, found := 0, false
	var inc sim.Bounds
	snap.Root.Walk(func(e sim.Element) bool {
		switch e.ResourceID {
		case sim.PkgCounter + ":id/count":
			n, err := strconv.Atoi(e.Text)
			if err != nil {
				c.t.Fatalf("counter shows %q", e.Text)
			}
			count, found = n, true
		case sim.PkgCounter + ":id/increment":
			inc = e.Bounds
		}
		return true
	})
	if !found || inc == (sim.Bounds{}) {
		c.t.Fatalf("the phone does not show the Counter app (count found %v, + at %v)", found, inc)
	}
	return count, inc
}

// receiptFigures counts a device's tap receipts by outcome.
type receiptFigures struct {
	committed, failed, unknown   int
	failedBy                     map[string]int
	inFlightKeys, unknownKeys    []string
	total, otherActions, pending int
}

func (f receiptFigures) inFlight() int { return len(f.inFlightKeys) }

func (f receiptFigures) String() string {
	codes := make([]string, 0, len(f.failedBy))
	for code, n := range f.failedBy {
		codes = append(codes, fmt.Sprintf("%s=%d", code, n))
	}
	sort.Strings(codes)
	return fmt.Sprintf("%d tap receipts: committed %d, failed %d [%s], outcome unknown %d, pending in flight %d (state pending in all: %d)",
		f.total, f.committed, f.failed, strings.Join(codes, " "), f.unknown, f.inFlight(), f.pending)
}

// receiptFigures pages through GET /v1/receipts for dev.
func (c *outageClient) receiptFigures(dev string) receiptFigures {
	c.t.Helper()
	fig := receiptFigures{failedBy: map[string]int{}}
	q := url.Values{"deviceId": {dev}, "limit": {"200"}}
	for {
		var page struct {
			Receipts []struct {
				IdempotencyKey string `json:"idempotencyKey"`
				Action         string `json:"action"`
				State          string `json:"state"`
				OutcomeUnknown bool   `json:"outcomeUnknown"`
				Error          *struct {
					Code string `json:"code"`
				} `json:"error"`
			} `json:"receipts"`
			NextBefore    string `json:"nextBefore"`
			NextBeforeKey string `json:"nextBeforeKey"`
		}
		c.mustJSON("GET", "/v1/receipts?"+q.Encode(), "", &page)
		for _, r := range page.Receipts {
			if r.Action != "tap" {
				fig.otherActions++
				continue
			}
			fig.total++
			if r.State == "pending" {
				fig.pending++
			}
			switch {
			case r.OutcomeUnknown:
				fig.unknown++
				fig.unknownKeys = append(fig.unknownKeys, r.IdempotencyKey)
			case r.State == "committed":
				fig.committed++
			case r.State == "failed":
				fig.failed++
				code := "?"
				if r.Error != nil {
					code = r.Error.Code
				}
				fig.failedBy[code]++
			default:
				fig.inFlightKeys = append(fig.inFlightKeys, r.IdempotencyKey)
			}
		}
		if page.NextBefore == "" {
			break
		}
		q.Set("before", page.NextBefore)
		q.Set("beforeKey", page.NextBeforeKey)
	}
	slices.Sort(fig.inFlightKeys)
	slices.Sort(fig.unknownKeys)
	return fig
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// lines returns the last n lines containing any of subs.
func lines(b *testutil.SyncBuffer, n int, subs ...string) string {
	var out []string
	for l := range strings.SplitSeq(b.String(), "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out[max(0, len(out)-n):], "\n")
}
