package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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
// space on each phone over REST, interleaved call by call so all four
// cells see the same conditions: the service's sim through the service
// driving it (the baseline) and through the other one (forwarded over
// NATS); the gateway's sim through the service holding its tunnel and
// through the other one. Targets: forwarding adds at most 1 ms at p50, the
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
		name     string
		base     string
		dev      string
		took     []time.Duration
		observes []time.Duration
	}
	cells := []*cell{
		{name: "service's sim, via the instance driving it (baseline)", base: bases[0], dev: cpSim},
		{name: "service's sim, via the other instance (forwarded)", base: bases[1], dev: cpSim},
		{name: "gateway's sim, via the instance holding its tunnel", base: bases[0], dev: gwSim},
		{name: "gateway's sim, via the other instance (forwarded)", base: bases[1], dev: gwSim},
	}
	seq := 0
	round := func(record bool) error {
		for _, c := range cells {
			seq++
			t0 := time.Now()
			err := rest(c.base, "POST", "/v1/devices/"+c.dev+"/actions", map[string]any{"action": "tap",
				"arguments": map[string]int{"x": adbTapX, "y": adbTapY}, "idempotencyKey": "gw-bench-" + strconv.Itoa(seq), "leaseId": leases[c.dev]}, nil)
			took := time.Since(t0)
			if err != nil {
				return err
			}
			t0 = time.Now()
			if err := rest(c.base, "GET", "/v1/devices/"+c.dev+"/screenshot?format=png", nil, nil); err != nil {
				return err
			}
			if record {
				c.took = append(c.took, took)
				c.observes = append(c.observes, time.Since(t0))
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
	for time.Since(t0) < 4*d {
		if err := round(true); err != nil {
			return err
		}
	}
	// The transport's floor on this machine: a bare request–reply of a
	// tap-sized call through the same NATS server, no work on either side.
	floor, err := natsFloor(natsURL, 2*d)
	if err != nil {
		return err
	}
	line("%-56s %10s %10s %10s %10s", "", "tap p50", "tap p99", "shot p50", "shot p99")
	for _, c := range cells {
		line("%-56s %10s %10s %10s %10s", c.name, percentile(c.took, 0.5).Round(10*time.Microsecond), percentile(c.took, 0.99).Round(10*time.Microsecond),
			percentile(c.observes, 0.5).Round(10*time.Microsecond), percentile(c.observes, 0.99).Round(10*time.Microsecond))
	}
	base, fwd, tun := percentile(cells[0].took, 0.5), percentile(cells[1].took, 0.5), percentile(cells[2].took, 0.5)
	line("forwarding cost (tap p50, forwarded − baseline): %s (target ≤ 1 ms: %s); %d taps per cell",
		(fwd - base).Round(10*time.Microsecond), verdict(fwd-base <= time.Millisecond), len(cells[0].took))
	line("of which the message bus: a bare request–reply of 1 KiB through the same server: p50 %s, p99 %s",
		percentile(floor, 0.5).Round(10*time.Microsecond), percentile(floor, 0.99).Round(10*time.Microsecond))
	line("tunnel cost (tap p50, gateway's sim − service's sim, same instance): %s (target ≤ 2 ms: %s); a tap crosses the tunnel 3 times (observe, act, observe)",
		(tun - base).Round(10*time.Microsecond), verdict(tun-base <= 2*time.Millisecond))
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
