//go:build linux

package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/internal/pgembed"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
)

// TestSimHostLostWithTheDatabaseStopsActing is the loss the chaos suite
// found, made to happen on purpose: the instance driving the sim phones
// (A) loses its host lock with its database connections, and the other
// instance (B) takes the host over. A reaches PostgreSQL through a proxy
// the test cuts (every connection closed, new ones refused) until B has
// taken the host, and then restores, so the takeover happens every time.
// A may believe it still drives the phones until its next claim attempt
// (every 5 s) and act on its own copy of the phone, while B restored the
// phone from its saved state on its first action: taps sent to both at
// once right after the takeover. Every tap committed must be on the phone
// B drives: a holder that lost its claim must stop acting at once (issue
// 27 item 2, fencing). Before fencing, taps committed by A in that window
// were missing from the phone.
func TestSimHostLostWithTheDatabaseStopsActing(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: runs two instances and restarts PostgreSQL")
	}
	if _, err := pgembed.FindBinaries(); err != nil {
		t.Skipf("skipping: no PostgreSQL server binaries for a cluster of the test's own: %v", err)
	}
	w := &world{t: t, ctx: testutil.Context(t), faults: map[string]int{}}
	w.startDatabase()
	pg := w.pg
	// A (the first instance, started first: it takes the sim host) reaches
	// the database through a proxy the test cuts.
	u, err := url.Parse(pg.DSN())
	if err != nil {
		t.Fatal(err)
	}
	proxyA := testutil.NewCutProxy(t, u.Host)
	for i := range w.inst {
		dsn := pg.DSN()
		if i == 0 {
			dsn = proxyA.URL(t, dsn)
		}
		env := []string{"DATABASE_URL=" + dsn, "SERVICE_DATA_DIR=" + filepath.Join(w.dir, "data"), "SERVICE_MODE=local",
			"SERVICE_SIM_DEVICES=1", "SERVICE_LOG_LEVEL=info"}
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		w.base[i] = "http://" + addr
		w.inst[i] = &proc{name: fmt.Sprintf("instance-%d", i), argv: []string{w.bin, "serve", "-addr", addr}, env: env}
		t.Cleanup(w.inst[i].kill)
		w.startInstance(i)
	}
	defer func() {
		if t.Failed() {
			for _, p := range w.inst {
				t.Logf("---- the last lines of %s's log:\n%s", p.name, tail(p.logs.String(), 25))
			}
		}
	}()
	// A is the first instance: it took the sim host at its start.
	a, b := 0, 1
	var dev string
	eventually(t, time.Minute, "the sim phone listed", func() error {
		if devs := w.devices(a); len(devs) == 1 {
			dev = devs[0].DeviceID
			return nil
		}
		return errNotYet
	})
	var lease struct {
		LeaseID string `json:"leaseId"`
	}
	w.mustJSON(a, "POST", "/v1/devices/"+dev+"/lease", `{"ttlSeconds":600}`, &lease)
	tap := func(i int, key string, x, y int) (int, []byte) {
		status, body, err := w.c.do(w.ctx, "POST", w.base[i]+"/v1/devices/"+dev+"/actions",
			fmt.Sprintf(`{"action":"tap","arguments":{"x":%d,"y":%d},"idempotencyKey":%q,"leaseId":%q}`, x, y, key, lease.LeaseID))
		if err != nil {
			return 0, []byte(err.Error())
		}
		return status, body
	}
	for _, action := range []string{"install_app", "open_app"} {
		status, body, err := w.c.do(w.ctx, "POST", w.base[a]+"/v1/devices/"+dev+"/actions",
			fmt.Sprintf(`{"action":%q,"arguments":{"package":%q},"idempotencyKey":"zombie-%s","leaseId":%q}`, action, sim.PkgCounter, action, lease.LeaseID))
		if err != nil || status != http.StatusOK {
			t.Fatalf("%s through A: %d %s (%v)", action, status, body, err)
		}
	}
	_, x, y, err := w.counter(a, dev)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if status, body := tap(a, fmt.Sprintf("zombie-before-%d", i), x, y); status != http.StatusOK {
			t.Fatalf("tap through A before the restart: %d %s", status, body)
		}
	}

	// A's database connections are cut (its lock session ends with them)
	// and stay refused until B has taken the sim host over from A; A is
	// then let through again, still believing it drives the phones until
	// its next claim attempt, and is asked to tap at once.
	from := len(w.inst[b].logs.String())
	proxyA.Cut()
	tookOver := false
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && !tookOver; time.Sleep(10 * time.Millisecond) {
		tookOver = strings.Contains(w.inst[b].logs.String()[from:], "this process now drives the sim devices")
	}
	proxyA.Restore()
	if !tookOver {
		t.Fatal("B never took the sim host over within a minute of A being cut from the database")
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	answers := map[string]int{}
	// B drives the phone at once too, as a client of B would: B restores
	// it from its saved state on its first action.
	for i := range 16 {
		wg.Go(func() {
			status, body := tap(i%2, fmt.Sprintf("zombie-after-%d", i), x, y)
			code, _ := errorCode(body)
			mu.Lock()
			answers[fmt.Sprintf("%d %s", status, code)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("taps sent to A and B right after B took the sim host over: %v", answers)

	// Every committed tap is on the phone B drives.
	var committed int
	eventually(t, time.Minute, "the receipts settled", func() error {
		rs, err := w.receiptsVia(b, dev)
		if err != nil {
			return err
		}
		committed = 0
		for _, r := range rs {
			if r.Action != "tap" {
				continue
			}
			if r.State == "pending" && !r.OutcomeUnknown {
				return fmt.Errorf("%s in flight: %w", r.IdempotencyKey, errNotYet)
			}
			if r.State == "committed" {
				committed++
			}
		}
		return nil
	})
	var phone int
	eventually(t, time.Minute, "the phone read through B", func() error {
		phone, _, _, err = w.counter(b, dev)
		return err
	})
	t.Logf("committed tap receipts %d; the phone B drives counts %d", committed, phone)
	if phone != committed {
		t.Errorf("the phone counts %d taps but %d tap receipts are committed: %d committed by A after B took the sim host over are not on the phone",
			phone, committed, committed-phone)
	}
}

// receiptsVia is receipts through instance i.
func (w *world) receiptsVia(i int, dev string) ([]receipt, error) {
	status, b, err := w.c.do(w.ctx, "GET", w.base[i]+"/v1/receipts?limit=200&deviceId="+dev, "")
	if err != nil || status != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/receipts: %d %.300s (%v)", status, b, err)
	}
	var page struct {
		Receipts []receipt `json:"receipts"`
	}
	if err := json.Unmarshal(b, &page); err != nil {
		return nil, err
	}
	return page.Receipts, nil
}
