//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"phonefleet/internal/adbsim"
	"phonefleet/internal/pgembed"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
)

const (
	// envDuration selects the long form: the passes repeat for this long
	// (a Go duration); `make chaos` sets it.
	envDuration = "CHAOS_DURATION"
	// clockSkew is how far the skewed instance's monotonic and boot-time
	// clocks run ahead (seconds).
	clockSkew = 86400
	// wallSkew is how far instance 1's wall clock runs off the machine's:
	// ahead after one start, behind after the next (clock.Now in a build
	// with the chaosclock tag).
	wallSkew = 5 * time.Second
	// keyMax is how long a client keeps retrying one key.
	keyMax = 90 * time.Second
	// settleMax bounds the wait for receipts, deliveries and runs to settle
	// once the load stopped.
	settleMax = 3 * time.Minute
)

// world is every part of the system under test and the suite's view of it.
type world struct {
	t   *testing.T
	ctx context.Context
	dir string
	bin string

	pg       *pgembed.Cluster
	nats     *proc
	natsAddr string
	cut      *partition // between instance 1 and nats-server
	inst     [2]*proc
	base     [2]string
	gw       *proc
	rcv      *receiver
	c        *client
	skewed   string // how instance 1's monotonic clocks are skewed ("" when they are not)
	starts   [2]int // how often each instance was started
	shop     *shop  // the hosted instances that sell (buy_test.go)
	webhook  string
	localSim string // the instances' own sim phone
	faults   map[string]int
	faultsMu sync.Mutex
}

// TestChaos runs the whole system under mixed load while each part fails
// in turn (see the package documentation).
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: runs the whole system as real processes for about two minutes")
	}
	if _, err := pgembed.FindBinaries(); err != nil {
		t.Skipf("skipping: no PostgreSQL server binaries for a cluster of the suite's own: %v", err)
	}
	duration := time.Duration(0)
	if v := os.Getenv(envDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: want a Go duration such as 15m", envDuration, v)
		}
		duration = d
	}
	w := &world{t: t, ctx: testutil.Context(t), faults: map[string]int{}}
	w.setUp()
	defer func() {
		if t.Failed() {
			for _, p := range []*proc{w.inst[0], w.inst[1], w.gw} {
				if d := os.Getenv("PHONEFLEET_E2E_LOG_DIR"); d != "" {
					_ = os.WriteFile(filepath.Join(d, "chaos-"+p.name+".log"), []byte(p.logs.String()), 0o600)
				}
				t.Logf("---- the last lines of %s's log:\n%s", p.name, tail(p.logs.String(), 30))
			}
		}
	}()

	targets := w.prepareTargets()
	runDev := w.runDevice(targets)
	load := newLoad(w, targets, runDev)
	load.start()
	began := time.Now()
	passes := 0
	for {
		passes++
		w.pass(passes)
		if time.Since(began) >= duration {
			break
		}
	}
	t.Logf("faults done after %d pass(es) in %s; stopping the load", passes, time.Since(began).Round(time.Second))
	load.stop()
	w.check(load, passes, time.Since(began))
}

// startDatabase makes the world's directory (reachable by the cluster's
// unprivileged user when the tests run as root), builds the binary, and
// starts a PostgreSQL cluster of the world's own, stopped at the end after
// every process is gone.
func (w *world) startDatabase() {
	t := w.t
	w.dir = t.TempDir()
	for _, p := range []string{filepath.Dir(w.dir), w.dir} { // the cluster's unprivileged user reaches it when we are root
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w.bin = buildBinary(t, w.dir)
	w.c = &client{http: &http.Client{Timeout: 20 * time.Second}}

	startCtx, cancel := context.WithTimeout(w.ctx, 2*time.Minute)
	defer cancel()
	pg, err := pgembed.Start(startCtx, filepath.Join(w.dir, "pg"), nil)
	if err != nil {
		t.Fatalf("the suite's PostgreSQL: %v", err)
	}
	w.pg = pg
	t.Cleanup(func() { // registered first: runs after every process is gone
		if err := pg.Stop(context.Background()); err != nil {
			t.Errorf("stop the suite's PostgreSQL: %v", err)
		}
	})
}

// setUp starts every part: PostgreSQL, nats-server (and the partition in
// front of it), the receiver, two instances, the adb phone and the
// gateway, and subscribes the receiver to the webhooks.
func (w *world) setUp() {
	t := w.t
	w.startDatabase()

	w.natsAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	host, port, _ := strings.Cut(w.natsAddr, ":")
	w.nats = &proc{name: "nats-server", argv: []string{natsBinary(t), "-a", host, "-p", port}}
	w.nats.start(t)
	t.Cleanup(w.nats.kill)
	waitDial(t, w.natsAddr, 30*time.Second)
	w.cut = startPartition(t, w.natsAddr)
	w.rcv = startReceiver(t, w.dir)

	env := []string{"DATABASE_URL=" + w.pg.DSN(), "SERVICE_DATA_DIR=" + filepath.Join(w.dir, "data"), "SERVICE_MODE=local",
		"SERVICE_SIM_DEVICES=1", "SERVICE_WEBHOOK_CA_FILE=" + w.rcv.caFile, "SERVICE_PAYG_DEVICE_LIMIT=20",
		"SERVICE_RECEIPT_CHECKPOINT_EVERY=40", "SERVICE_RECEIPT_CHECKPOINT_INTERVAL=5s", "SERVICE_LOG_LEVEL=info"}
	for i := range w.inst {
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		w.base[i] = "http://" + addr
		argv := []string{w.bin, "serve", "-addr", addr}
		natsURL := "nats://" + w.natsAddr
		if i == 1 {
			natsURL = "nats://" + w.cut.addr()
			// The service has no clock setting, and a Go program reads the
			// wall clock through the vDSO, past any LD_PRELOAD clock; a
			// time namespace is what Linux offers per process: instance 1
			// runs with its monotonic and boot-time clocks a day ahead.
			if err := exec.Command("unshare", "--time", "--monotonic=1", "true").Run(); err == nil {
				argv = append([]string{"unshare", "--time", fmt.Sprintf("--monotonic=%d", clockSkew), fmt.Sprintf("--boottime=%d", clockSkew)}, argv...)
				w.skewed = fmt.Sprintf("monotonic and boot-time clocks +%ds (time namespace)", clockSkew)
			} else {
				t.Logf("no time namespace here (%v): instance 1 runs unskewed", err)
			}
		}
		w.inst[i] = &proc{name: fmt.Sprintf("instance-%d", i), argv: argv, env: append(append([]string{}, env...), "SERVICE_NATS_URL="+natsURL)}
		t.Cleanup(w.inst[i].kill)
		w.startInstance(i) // one at a time: the first migrates the database
	}

	eventually(t, time.Minute, "the instances' sim phone listed", func() error {
		if devs := w.devices(0); len(devs) == 1 {
			w.localSim = devs[0].DeviceID
			return nil
		}
		return errNotYet
	})

	// The adb phone: a sim phone behind a device-side adb daemon, on an adb
	// server of the suite's own, served by the gateway.
	adbServer := testutil.ADBServer(t)
	phone, err := sim.New(sim.DefaultModel, "CHAOSADB1")
	if err != nil {
		t.Fatal(err)
	}
	daemon, err := adbsim.Start(phone, adbsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { daemon.Close() })
	testutil.ConnectADB(t, adbServer, daemon.Addr())

	var code struct {
		Code string `json:"code"`
	}
	w.mustJSON(0, "POST", "/v1/gateways/enrollment-codes", `{"name":"chaos-site"}`, &code)
	w.gw = &proc{name: "gateway", argv: []string{w.bin, "gateway"}, env: []string{"GATEWAY_URL=" + w.base[0] + "," + w.base[1],
		"GATEWAY_DATA_DIR=" + filepath.Join(w.dir, "gateway"), "GATEWAY_SIM_DEVICES=2", "GATEWAY_ADB_ADDR=" + adbServer,
		"GATEWAY_NAME=chaos-site", "SERVICE_LOG_LEVEL=info"}}
	t.Cleanup(w.gw.kill)
	from := w.gw.start(t, "GATEWAY_ENROLL_CODE="+code.Code)
	w.gw.waitLog(t, from, 90*time.Second, "gateway tunnel connected")

	var hook struct {
		Webhook struct {
			WebhookID string `json:"webhookId"`
		} `json:"webhook"`
	}
	w.mustJSON(1, "POST", "/v1/webhooks", fmt.Sprintf(`{"url":%q,"events":["run.ended","receipt.checkpoint_signed"]}`, w.rcv.url+"/in"), &hook)
	w.webhook = hook.Webhook.WebhookID
	w.shop = w.startShop()
}

// startInstance starts instance i and waits until it serves. Instance 1's
// wall clock runs wallSkew ahead of the machine's after one start and
// behind it after the next.
func (w *world) startInstance(i int) {
	var env []string
	if i == 1 {
		skew := wallSkew
		if w.starts[i]%2 == 1 {
			skew = -wallSkew
		}
		env = append(env, skewEnv+"="+skew.String())
	}
	w.starts[i]++
	from := w.inst[i].start(w.t, env...)
	w.inst[i].waitLog(w.t, from, 2*time.Minute, "phonefleet serving")
	if i == 1 { // the skew is real: the instance's own clock says so
		skew := wallSkew
		if w.starts[i]%2 == 0 {
			skew = -wallSkew
		}
		var st struct {
			Time time.Time `json:"time"`
		}
		before := time.Now()
		w.mustJSON(1, "GET", "/v1/time", "", &st)
		if off := st.Time.Sub(before); off < skew-2*time.Second || off > skew+2*time.Second {
			w.t.Fatalf("instance 1's clock is %s off the machine's; want %s", off.Round(time.Millisecond), skew)
		}
	}
}

// mustJSON sends a request to instance i, retrying transport errors and
// 5xx for a minute, and decodes a 2xx answer into out.
func (w *world) mustJSON(i int, method, path, body string, out any) {
	w.t.Helper()
	var status int
	var b []byte
	var err error
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		status, b, err = w.c.do(w.ctx, method, w.base[i]+path, body)
		if err == nil && status < 500 {
			break
		}
		if time.Now().After(deadline) {
			break
		}
	}
	if err != nil || status/100 != 2 {
		w.t.Fatalf("%s %s on instance %d: got %d %.500s (%v)", method, path, i, status, b, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			w.t.Fatalf("%s %s: %v in %.500s", method, path, err, b)
		}
	}
}

// device is one device as GET /v1/devices lists it.
type device struct {
	DeviceID string `json:"deviceId"`
	Name     string `json:"name"`
	Backend  string `json:"backend"`
	Status   string `json:"status"`
}

func (w *world) devices(i int) []device {
	var list struct {
		Devices []device `json:"devices"`
	}
	w.mustJSON(i, "GET", "/v1/devices?limit=100", "", &list)
	return list.Devices
}

// target is a device the clients tap: the Counter app open on it, leased
// for the whole suite, its + button at x, y.
type target struct {
	dev   device
	lease string
	x, y  int
}

// prepareTargets waits for the four phones (the instances' sim, the
// gateway's two sims and its adb phone), and opens the Counter app on
// every one but the last gateway sim, which the runs use.
func (w *world) prepareTargets() []*target {
	t := w.t
	var devs []device
	eventually(t, 2*time.Minute, "four phones online", func() error {
		devs = w.devices(1)
		online := 0
		for _, d := range devs {
			if d.Status == "online" {
				online++
			}
		}
		if online < 4 {
			return fmt.Errorf("got %+v: %w", devs, errNotYet)
		}
		return nil
	})
	sort.Slice(devs, func(a, b int) bool { return devs[a].Name < devs[b].Name })
	t.Logf("phones: %+v", devs)
	var targets []*target
	for _, d := range devs {
		tg := &target{dev: d}
		var lease struct {
			LeaseID string `json:"leaseId"`
		}
		w.mustJSON(0, "POST", "/v1/devices/"+d.DeviceID+"/lease", `{"ttlSeconds":3600}`, &lease)
		tg.lease = lease.LeaseID
		ok := true
		for _, action := range []string{"install_app", "open_app"} {
			status, b, err := w.c.do(w.ctx, "POST", w.base[0]+"/v1/devices/"+d.DeviceID+"/actions",
				fmt.Sprintf(`{"action":%q,"arguments":{"package":%q},"idempotencyKey":"chaos-setup-%s-%s","leaseId":%q}`,
					action, sim.PkgCounter, action, d.DeviceID, tg.lease))
			if err != nil || status != http.StatusOK {
				t.Logf("%s (%s): %s of the Counter app: %d %.300s (%v); not a tap target", d.Name, d.Backend, action, status, b, err)
				ok = false
				break
			}
		}
		if ok {
			count, x, y, err := w.counter(0, d.DeviceID)
			if err != nil || count != 0 {
				t.Fatalf("%s: the Counter app shows %d (%v); want 0", d.Name, count, err)
			}
			tg.x, tg.y = x, y
			targets = append(targets, tg)
		} else {
			w.c.do(w.ctx, "DELETE", w.base[0]+"/v1/devices/"+d.DeviceID+"/lease?leaseId="+tg.lease, "")
			targets = append(targets, &target{dev: d}) // no lease: the runs' device candidate
		}
	}
	return targets
}

// runDevice picks the device the runs use: a gateway sim, given back by
// the taps (its lease released), so that runs take it themselves.
func (w *world) runDevice(targets []*target) string {
	var last *target
	for _, tg := range targets {
		if tg.dev.Backend != "adb" && tg.lease != "" && tg.dev.DeviceID != w.localSim {
			last = tg
		}
	}
	if last == nil {
		w.t.Fatalf("no device for the runs among %d", len(targets))
	}
	w.mustJSON(0, "DELETE", "/v1/devices/"+last.dev.DeviceID+"/lease?leaseId="+last.lease, "", nil)
	last.lease = ""
	return last.dev.DeviceID
}

// counter reads the Counter app's count and its + button through
// instance i.
func (w *world) counter(i int, dev string) (count, x, y int, err error) {
	status, b, err := w.c.do(w.ctx, "GET", w.base[i]+"/v1/devices/"+dev+"/snapshot", "")
	if err != nil || status != http.StatusOK {
		return 0, 0, 0, fmt.Errorf("snapshot: %d %.300s (%v)", status, b, err)
	}
	var snap struct {
		Root sim.Element `json:"root"`
	}
	if err := json.Unmarshal(b, &snap); err != nil {
		return 0, 0, 0, err
	}
	count = -1
	snap.Root.Walk(func(e sim.Element) bool {
		switch e.ResourceID {
		case sim.PkgCounter + ":id/count":
			count = atoi(e.Text)
		case sim.PkgCounter + ":id/increment":
			x, y = e.Bounds.Center()
		}
		return true
	})
	if count < 0 || x == 0 {
		return 0, 0, 0, fmt.Errorf("the phone does not show the Counter app")
	}
	return count, x, y, nil
}

// fault records one fault injected.
func (w *world) fault(name string, at time.Time) {
	w.faultsMu.Lock()
	w.faults[name]++
	w.faultsMu.Unlock()
	w.t.Logf("fault %-28s done in %s", name, time.Since(at).Round(time.Millisecond))
}

// pass injects each fault once, in turn, with the load running
// throughout and a few seconds of calm after each.
func (w *world) pass(n int) {
	t := w.t
	calm := func() { time.Sleep(4 * time.Second) }
	calm()

	// An instance killed with SIGKILL, then started again (instance 0 and
	// 1 in turn, pass by pass).
	i := (n - 1) % 2
	at := time.Now()
	w.inst[i].kill()
	w.shop.inst[i].kill()
	time.Sleep(time.Second)
	w.startInstance(i)
	w.shop.start(i)
	w.fault(fmt.Sprintf("instance-%d kill -9", i), at)
	calm()

	// nats-server killed and started again on its port.
	at = time.Now()
	w.nats.kill()
	time.Sleep(2 * time.Second)
	w.nats.start(t)
	waitDial(t, w.natsAddr, 30*time.Second)
	w.fault("nats-server kill -9", at)
	calm()

	// The gateway killed and started again.
	at = time.Now()
	w.gw.kill()
	time.Sleep(time.Second)
	from := w.gw.start(t)
	w.gw.waitLog(t, from, 90*time.Second, "gateway tunnel connected")
	w.fault("gateway kill -9", at)
	calm()

	// PostgreSQL stopped in immediate mode (as in a crash) and started.
	at = time.Now()
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Minute)
	err := w.pg.Restart(ctx, true)
	cancel()
	if err != nil {
		t.Fatalf("restart PostgreSQL (immediate): %v", err)
	}
	w.fault("postgresql immediate restart", at)
	calm()

	// The receiver answering 500 to every delivery for a while.
	w.faultFor("receiver 500s", 6*time.Second, w.rcv.setFailing)
	calm()

	// Instance 1 cut from nats-server for a while.
	w.faultFor("instance-1 nats partition", 8*time.Second, w.cut.setCut)
	calm()
}

// faultFor turns a fault on with set for d, then off, and records it.
func (w *world) faultFor(name string, d time.Duration, set func(bool)) {
	at := time.Now()
	set(true)
	time.Sleep(d)
	set(false)
	w.fault(name, at)
}
