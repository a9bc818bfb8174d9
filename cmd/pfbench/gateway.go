package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/internal/config"
	"phonefleet/internal/gateway"
)

func init() {
	addSection("gateway", 78, func(ctx context.Context, b *bench, o options) error { return b.gatewayForwarding(ctx, o.cell) })
}

// gatewayForwarding measures what reaching a device costs when it is not
// driven by the instance a request reaches, and what a gateway's tunnel
// adds: two services on one database and one private NATS server, and one
// gateway (in process, one sim phone) whose tunnel ends at the first
// service, which also drives the services' own sim. One caller taps empty
// space on each phone over REST, interleaved call by call (rounds of one
// tap per cell, shuffled) so all cells see the same conditions: the
// service's sim through the service driving it (the baseline, twice: two
// identical cells whose difference is the noise) and through the other one
// (forwarded over NATS); the gateway's sim through the service holding its
// tunnel and through the other one. Costs are medians of differences
// within a round, printed with the noise and with each half's figure. Targets: forwarding adds at most 1 ms at p50, the
// tunnel at most 2 ms at p50 (loopback; an action crosses the tunnel three
// times: observe, act, observe).
func (b *bench) gatewayForwarding(ctx context.Context, d time.Duration) error {
	header("Forwarding between instances and the gateway tunnel (two services, one database, one NATS, one gateway; one caller, interleaved)")
	natsURL, stopNATS, err := benchNATS(ctx)
	if err != nil {
		line("skipped: %v (make bench installs nats-server: scripts/ensure-nats-server.sh)", err)
		return nil
	}
	defer stopNATS()
	db, err := b.newDB(ctx)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "pfbench-gateway-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env := map[string]string{"DATABASE_URL": db.url, "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_MODE": "local",
		"SERVICE_DATA_DIR": filepath.Join(dir, "data"), "SERVICE_SIM_DEVICES": "1", "SERVICE_LOG_LEVEL": "error",
		"SERVICE_NATS_URL": natsURL}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var bases []string
	var served []chan error
	for range 2 {
		cfg, err := config.Load(flag.NewFlagSet("pfbench", flag.ContinueOnError), nil, func(k string) string { return env[k] })
		if err != nil {
			return err
		}
		a, err := service.New(sctx, cfg, quiet)
		if err != nil {
			return err
		}
		done := make(chan error, 1)
		go func() { done <- a.Run(sctx) }()
		served = append(served, done)
		bases = append(bases, "http://"+a.Addr())
	}
	defer func() {
		stop()
		for _, s := range served {
			<-s
		}
	}()
	httpc := &http.Client{Timeout: 60 * time.Second}
	rest := func(base, method, path string, body any, out any) error {
		return restCall(ctx, httpc, method, base+path, body, out)
	}
	type deviceList struct {
		Devices []struct {
			DeviceID, Status string
		}
	}
	// The read model lists the instances' sim once its registration is
	// applied, which can follow the services' start by a moment.
	var own deviceList
	for wait := time.Now().Add(30 * time.Second); len(own.Devices) != 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(wait) {
			return fmt.Errorf("the services show %d sims after 30 s; want 1", len(own.Devices))
		}
		if err := rest(bases[0], "GET", "/v1/devices", nil, &own); err != nil {
			return err
		}
	}
	cpSim := own.Devices[0].DeviceID

	var code struct{ Code string }
	if err := rest(bases[0], "POST", "/v1/gateways/enrollment-codes", map[string]any{"name": "bench"}, &code); err != nil {
		return err
	}
	gctx, stopGateway := context.WithCancel(sctx)
	gdone := make(chan error, 1)
	go func() {
		gdone <- gateway.RunAgent(gctx, gateway.AgentConfig{URLs: bases[:1], DataDir: filepath.Join(dir, "gateway"),
			EnrollCode: code.Code, SimDevices: 1, Version: service.Version, Logger: quiet})
	}()
	defer func() { stopGateway(); <-gdone }()
	var gwSim string
	for wait := time.Now().Add(60 * time.Second); gwSim == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(wait) {
			return errors.New("the gateway's sim did not come online within 60 s")
		}
		var l deviceList
		if err := rest(bases[1], "GET", "/v1/devices", nil, &l); err != nil {
			return err
		}
		for _, dv := range l.Devices {
			if dv.DeviceID != cpSim && dv.Status == "online" {
				gwSim = dv.DeviceID
			}
		}
	}
	leases := map[string]string{}
	for _, dev := range []string{cpSim, gwSim} {
		var l struct{ LeaseID string }
		if err := rest(bases[0], "POST", "/v1/devices/"+dev+"/lease", map[string]any{"ttlSeconds": 3600}, &l); err != nil {
			return err
		}
		leases[dev] = l.LeaseID
	}

	type cell struct {
		name string
		base string
		dev  string
		taps []time.Duration // in round order
		shot []time.Duration
	}
	// Two baseline cells, identical (the service's sim through the
	// instance driving it): the difference between them is what the
	// section's figures differ by when nothing differs (the noise).
	cells := []*cell{
		{name: "service's sim, via the instance driving it (baseline A)", base: bases[0], dev: cpSim},
		{name: "service's sim, via the instance driving it (baseline B)", base: bases[0], dev: cpSim},
		{name: "service's sim, via the other instance (forwarded)", base: bases[1], dev: cpSim},
		{name: "gateway's sim, via the instance holding its tunnel", base: bases[0], dev: gwSim},
		{name: "gateway's sim, via the other instance (forwarded)", base: bases[1], dev: gwSim},
	}
	baseA, baseB, fwdCell, tunCell := cells[0], cells[1], cells[2], cells[3]
	seq := 0
	tap := func(c *cell) (time.Duration, error) {
		seq++
		t0 := time.Now()
		err := rest(c.base, "POST", "/v1/devices/"+c.dev+"/actions", map[string]any{"action": "tap",
			"arguments": map[string]int{"x": adbTapX, "y": adbTapY}, "idempotencyKey": "gw-bench-" + strconv.Itoa(seq), "leaseId": leases[c.dev]}, nil)
		return time.Since(t0), err
	}
	// A round taps once on every cell, in an order shuffled per round, so
	// that no cell always follows another (a tap's aftermath — projection
	// wake-ups, the sim's save — falls on the next call).
	rng := rand.New(rand.NewPCG(1, 2))
	order := make([]int, len(cells))
	for i := range order {
		order[i] = i
	}
	round := func(record bool) error {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			took, err := tap(cells[i])
			if err != nil {
				return err
			}
			if record {
				cells[i].taps = append(cells[i].taps, took)
			}
		}
		return nil
	}
	for range 20 { // warm-up: connections, caches, NATS subscriptions
		if err := round(false); err != nil {
			return err
		}
	}
	t0 := time.Now()
	for time.Since(t0) < 6*d {
		if err := round(true); err != nil {
			return err
		}
	}
	// Screenshots apart, fewer: a PNG costs several taps' time, and taps
	// are the figure the targets are about.
	t0 = time.Now()
	for time.Since(t0) < 2*d {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			c := cells[i]
			t1 := time.Now()
			if err := rest(c.base, "GET", "/v1/devices/"+c.dev+"/screenshot?format=png", nil, nil); err != nil {
				return err
			}
			c.shot = append(c.shot, time.Since(t1))
		}
	}
	// The transport's floor on this machine: a bare request–reply of a
	// tap-sized call through the same NATS server, no work on either side.
	floor, err := natsFloor(natsURL, 2*d)
	if err != nil {
		return err
	}
	us := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
	n := len(baseA.taps)
	line("a tap: POST /v1/devices/{id}/actions, tap on empty space; the instance driving the device records the request, observes")
	line("the screen, checks its host fence (one round trip with the device's re-read), acts, observes again and commits the receipt")
	line("(the answer is the committed receipt); on the gateway's sim the observations and the act cross the tunnel (3 crossings)")
	line("%-58s %10s %10s %10s %10s %6s", "", "tap p50", "tap p99", "shot p50", "shot p99", "n")
	for _, c := range cells {
		line("%-58s %10s %10s %10s %10s %6d", c.name, us(percentile(c.taps, 0.5)), us(percentile(c.taps, 0.99)),
			us(percentile(c.shot, 0.5)), us(percentile(c.shot, 0.99)), len(c.taps))
	}
	// A cost is the median of the differences within a round (the two
	// taps met the same load), read against the same figure for the two
	// identical baseline cells (noise), and again for each half of the
	// rounds (its spread is the figure's repeatability within the run).
	cost := func(c, ref *cell, from, to int) time.Duration {
		var d []time.Duration
		for i := from; i < to; i++ {
			d = append(d, c.taps[i]-ref.taps[i])
		}
		return median(d)
	}
	noise := cost(baseB, baseA, 0, n)
	noise1, noise2 := cost(baseB, baseA, 0, n/2), cost(baseB, baseA, n/2, n)
	// A target is judged only when the section reads two identical cells
	// alike, in the whole run and in each half, to within noiseBound:
	// otherwise the machine's load, not the code, decides the verdict.
	const noiseBound = 500 * time.Microsecond
	quiet := n >= 100 && max(abs(noise), abs(noise1), abs(noise2)) <= noiseBound
	judge := func(ok bool) string {
		if !quiet {
			return fmt.Sprintf("not judged: fewer than 100 rounds or the noise beyond ±%s", noiseBound)
		}
		return verdict(ok)
	}
	fwd, fwd1, fwd2 := cost(fwdCell, baseA, 0, n), cost(fwdCell, baseA, 0, n/2), cost(fwdCell, baseA, n/2, n)
	tun, tun1, tun2 := cost(tunCell, baseA, 0, n), cost(tunCell, baseA, 0, n/2), cost(tunCell, baseA, n/2, n)
	line("%d rounds, one tap per cell each, cells shuffled per round; a cost is the median over rounds of (cell − baseline A)", n)
	line("noise (baseline B − baseline A, the same calls): %s; its halves %s / %s",
		us(noise), us(noise1), us(noise2))
	line("forwarding cost (forwarded − baseline A): %s (target ≤ 1 ms: %s); halves %s / %s; difference of p50s %s",
		us(fwd), judge(fwd <= time.Millisecond), us(fwd1), us(fwd2), us(percentile(fwdCell.taps, 0.5)-percentile(baseA.taps, 0.5)))
	line("of which the message bus: a bare request–reply of 1 KiB through the same server: p50 %s, p99 %s",
		us(percentile(floor, 0.5)), us(percentile(floor, 0.99)))
	line("tunnel cost (gateway's sim − service's sim, same instance): %s (target ≤ 2 ms: %s); halves %s / %s; difference of p50s %s",
		us(tun), judge(tun <= 2*time.Millisecond), us(tun1), us(tun2), us(percentile(tunCell.taps, 0.5)-percentile(baseA.taps, 0.5)))
	return nil
}

// benchNATS starts a private nats-server on a free port (from
// PHONEFLEET_NATS_SERVER, PATH or GOPATH/bin) and returns its URL and how
// to stop it.
func benchNATS(ctx context.Context) (string, func(), error) {
	bin := os.Getenv("PHONEFLEET_NATS_SERVER")
	if bin == "" {
		if p, err := exec.LookPath("nats-server"); err == nil {
			bin = p
		} else if gp, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			if p := filepath.Join(string(bytes.TrimSpace(gp)), "bin", "nats-server"); fileExists(p) {
				bin = p
			}
		}
	}
	if bin == "" {
		return "", nil, errors.New("no nats-server found")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	_ = ln.Close()
	cmd := exec.CommandContext(ctx, bin, "-a", "127.0.0.1", "-p", port)
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	for wait := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			c.Close()
			return "nats://127.0.0.1:" + port, stop, nil
		}
		if time.Now().After(wait) {
			stop()
			return "", nil, errors.New("nats-server did not listen within 10 s")
		}
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// natsFloor times bare request–replies of 1 KiB between two connections
// to the NATS server at url for d.
func natsFloor(url string, d time.Duration) ([]time.Duration, error) {
	server, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	defer server.Close()
	client, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	sub, err := server.Subscribe("pfbench.floor", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := server.Flush(); err != nil {
		return nil, err
	}
	body := bytes.Repeat([]byte("x"), 1024)
	var took []time.Duration
	for t0 := time.Now(); time.Since(t0) < d; {
		t1 := time.Now()
		if _, err := client.Request("pfbench.floor", body, 5*time.Second); err != nil {
			return nil, err
		}
		took = append(took, time.Since(t1))
	}
	return took, nil
}

// median is the middle of d (the mean of the two middle values for an
// even count), which may hold negative durations.
func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
