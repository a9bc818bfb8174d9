package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/internal/config"
)

func init() {
	addSection("vrx", 75, func(ctx context.Context, b *bench, o options) error { return b.vrxStep(ctx, o.cell) })
}

// vrxStepsPerRun is how many steps the bench takes in one run before it
// finishes it and starts another (a run takes at most 1000).
const vrxStepsPerRun = 900

// vrxStep measures one run step — observe, then act on what was observed —
// through the device surface (/vrx/{runToken}/v1: GET observe, POST
// actions naming the frame) beside the same pair through the control
// surface (/v1/devices/{id}: GET snapshot, POST actions naming the frame
// and the lease), on two sim phones of one service, one caller, step by
// step interleaved (the order alternating) so both see the same
// conditions. Two pairs are measured: looking at the elements only (the
// default observe; the UI snapshot), and looking at the picture only (a
// PNG observe; the JSON screenshot). The target is the device surface's
// p50 within 1.2× of the control surface's: a run's step adds the run
// token's check and the step's record, nothing else.
func (b *bench) vrxStep(ctx context.Context, d time.Duration) error {
	header("One run step (observe + act) through /vrx vs the same pair through /v1 (two sim phones, one caller, interleaved)")
	db, err := b.newDB(ctx)
	if err != nil {
		return err
	}
	db.pool.Reset()
	dir, err := os.MkdirTemp("", "pfbench-vrx-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env := map[string]string{"DATABASE_URL": db.url, "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_MODE": "local",
		"SERVICE_DATA_DIR": dir, "SERVICE_SIM_DEVICES": "2", "SERVICE_LOG_LEVEL": "error"}
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

	httpc := &http.Client{Timeout: 30 * time.Second}
	call := func(method, url string, body any, out any) error { return restCall(ctx, httpc, method, url, body, out) }

	var list struct {
		Devices []struct {
			DeviceID string `json:"deviceId"`
		} `json:"devices"`
	}
	for wait := time.Now().Add(30 * time.Second); len(list.Devices) < 2 && time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
		if err := call("GET", base+"/v1/devices", nil, &list); err != nil {
			return err
		}
	}
	if len(list.Devices) < 2 {
		return fmt.Errorf("the service shows %d devices; want 2", len(list.Devices))
	}
	runDev, restDev := list.Devices[0].DeviceID, list.Devices[1].DeviceID
	var lease struct {
		LeaseID string `json:"leaseId"`
	}
	if err := call("POST", base+"/v1/devices/"+restDev+"/lease", map[string]int{"ttlSeconds": 3600}, &lease); err != nil {
		return err
	}

	// The run: external, driven here; a fresh one every vrxStepsPerRun
	// steps (outside the measured time).
	var vrxBase string
	steps := 0
	newRun := func() error {
		if vrxBase != "" {
			if err := call("POST", vrxBase+"/v1/finish", map[string]string{"state": "succeeded", "reason": "bench"}, nil); err != nil {
				return err
			}
		}
		var started struct {
			VrxBaseURL string `json:"vrxBaseUrl"`
		}
		if err := call("POST", base+"/v1/runs", map[string]any{"deviceId": runDev, "goal": "pfbench", "executor": "external",
			"maxSteps": 1000}, &started); err != nil {
			return fmt.Errorf("start a run (POST /v1/runs): %w", err)
		}
		vrxBase, steps = started.VrxBaseURL, 0
		return nil
	}
	if err := newRun(); err != nil {
		return err
	}

	type frame struct {
		FrameID string `json:"frameId"`
	}
	tap := map[string]int{"x": 540, "y": 1500}
	vrxPair := func(query string) func(n int) error {
		return func(n int) error {
			var f frame
			if err := call("GET", vrxBase+"/v1/observe"+query, nil, &f); err != nil {
				return err
			}
			steps++
			return call("POST", vrxBase+"/v1/actions", map[string]any{"action": "tap", "arguments": tap,
				"idempotencyKey": fmt.Sprintf("bench-vrx%s-%d", query, n), "observedFrame": f.FrameID}, nil)
		}
	}
	restPair := func(observe string) func(n int) error {
		return func(n int) error {
			var f frame
			if err := call("GET", base+"/v1/devices/"+restDev+observe, nil, &f); err != nil {
				return err
			}
			return call("POST", base+"/v1/devices/"+restDev+"/actions", map[string]any{"action": "tap", "arguments": tap,
				"idempotencyKey": fmt.Sprintf("bench-v1%s-%d", observe, n), "leaseId": lease.LeaseID, "observedFrame": f.FrameID}, nil)
		}
	}
	rows := []struct {
		name       string
		vrx, rest  func(n int) error
		vrxT, rstT []time.Duration
	}{
		{name: "elements + tap", vrx: vrxPair(""), rest: restPair("/snapshot")},
		{name: "PNG + tap", vrx: vrxPair("?image=png&elements=none"), rest: restPair("/screenshot?format=json")},
	}
	line("%-16s %9s %9s %9s %9s %7s %7s  %s", "step", "/v1 p50", "/v1 p99", "/vrx p50", "/vrx p99", "p50 ×", "p99 ×", "target /vrx p50 ≤ 1.2× /v1")
	for i := range rows {
		m := &rows[i]
		warm := time.Now().Add(time.Second)
		end := warm.Add(d)
		for n := 0; time.Now().Before(end); n++ {
			if steps >= vrxStepsPerRun {
				if err := newRun(); err != nil {
					return err
				}
			}
			var tv, tr time.Duration
			measure := func(f func(int) error, into *time.Duration) error {
				t0 := time.Now()
				err := f(n)
				*into = time.Since(t0)
				return err
			}
			one, two := func() error { return measure(m.rest, &tr) }, func() error { return measure(m.vrx, &tv) }
			if n%2 == 1 {
				one, two = two, one
			}
			if err := one(); err != nil {
				return err
			}
			if err := two(); err != nil {
				return err
			}
			if time.Now().After(warm) {
				m.vrxT, m.rstT = append(m.vrxT, tv), append(m.rstT, tr)
			}
		}
		r50, r99 := percentile(m.rstT, 0.50), percentile(m.rstT, 0.99)
		v50, v99 := percentile(m.vrxT, 0.50), percentile(m.vrxT, 0.99)
		x50, x99 := float64(v50)/float64(r50), float64(v99)/float64(r99)
		rd := func(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }
		line("%-16s %9s %9s %9s %9s %6.2f× %6.2f×  %s (%d steps each)", m.name, rd(r50), rd(r99), rd(v50), rd(v99), x50, x99,
			verdict(x50 <= 1.2), len(m.vrxT))
	}
	return call("POST", vrxBase+"/v1/finish", map[string]string{"state": "succeeded", "reason": "bench"}, nil)
}
