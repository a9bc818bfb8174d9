package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/commands/fleet"
	"phonefleet/commands/runs"
	"phonefleet/domain"
	"phonefleet/internal/config"
	"phonefleet/projections"
)

func init() {
	addSection("executor", 80, func(ctx context.Context, b *bench, o options) error { return b.executor(ctx, o.cell) })
}

// executorDevices is how many sim phones the executor drives at once.
const executorDevices = 8

// executor measures the built-in executor's steps per second on 8 sim
// phones, each running a scripted built-in run (one step = observe as a
// 768-px JPEG with the interactive elements, then act), beside the same
// number of observe + act pairs issued directly through the application
// (ObserveDevice with a 768-px PNG and the UI snapshot, then
// PerformAction naming the frame) by 8 clients on leased phones, in the
// same service on the same database.
func (b *bench) executor(ctx context.Context, d time.Duration) error {
	header("Built-in executor steps on 8 sim phones vs direct observe + act pairs (same service, same database)")
	db, err := b.newDB(ctx)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "pfbench-executor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env := map[string]string{"DATABASE_URL": db.url, "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_MODE": "local",
		"SERVICE_DATA_DIR": dir, "SERVICE_SIM_DEVICES": fmt.Sprint(executorDevices), "SERVICE_LOG_LEVEL": "error"}
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
	application := a.Application()

	var orgID string
	if err := db.pool.QueryRow(ctx, `SELECT org_id FROM device_states LIMIT 1`).Scan(&orgID); err != nil {
		return fmt.Errorf("local organisation: %w", err)
	}
	auth := domain.LocalOperator(orgID)
	var devices []string
	for wait := time.Now().Add(30 * time.Second); len(devices) < executorDevices && time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
		page, err := application.Fleet.ListDevices.Handle(ctx, fleet.ListDevices{Auth: auth, DeviceQuery: fleet.DeviceQuery{Limit: 200}})
		if err != nil {
			return err
		}
		devices = devices[:0]
		for _, dv := range page.Devices {
			devices = append(devices, dv.DeviceID)
		}
	}
	if len(devices) != executorDevices {
		return fmt.Errorf("the service shows %d devices; want %d", len(devices), executorDevices)
	}

	// The executor: 8 runs of (far) more steps than the measurement takes.
	sc := domain.RunScript{Version: 1}
	for i := range domain.MaxRunMaxSteps - 1 {
		sc.Steps = append(sc.Steps, domain.ScriptStep{Action: "key",
			Arguments: json.RawMessage(`{"key":"` + []string{"VOLUME_UP", "VOLUME_DOWN"}[i%2] + `"}`)})
	}
	sc.Steps = append(sc.Steps, domain.ScriptStep{Finish: domain.RunStateSucceeded})
	script, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	var started []string
	for _, dev := range devices {
		s, err := application.Runs.StartRun.Handle(ctx, runs.StartRun{Auth: auth, DeviceID: dev, Goal: "press the volume keys",
			Script: script, MaxSteps: domain.MaxRunMaxSteps, Executor: domain.ExecutorBuiltin})
		if err != nil {
			return err
		}
		started = append(started, s.Run.RunID)
	}
	steps := func() (int64, error) {
		var n int64
		err := db.pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE event_type = 'run.step_taken'`).Scan(&n)
		return n, err
	}
	time.Sleep(time.Second) // warm-up: every run claimed and stepping
	s0, err := steps()
	if err != nil {
		return err
	}
	t0 := time.Now()
	time.Sleep(d)
	s1, err := steps()
	if err != nil {
		return err
	}
	elapsed := time.Since(t0)
	taken := s1 - s0
	for _, id := range started {
		if _, err := application.Runs.CancelRun.Handle(ctx, runs.CancelRun{Auth: auth, RunID: id}); err != nil {
			return err
		}
	}
	execRate := float64(taken) / elapsed.Seconds()

	// The baseline: as many observe + act pairs, issued directly.
	pairs := max(taken, executorDevices)
	var next, errs atomic.Int64
	var wg sync.WaitGroup
	leases := make([]string, len(devices))
	for i, dev := range devices {
		var l projections.LeaseView
		for wait := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			l, err = application.Fleet.AcquireLease.Handle(ctx, fleet.AcquireLease{Auth: auth, DeviceID: dev, TTLSeconds: 3600})
			if err == nil || time.Now().After(wait) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("lease %s after its run: %w", dev, err)
		}
		leases[i] = l.LeaseID
	}
	start := time.Now()
	for i, dev := range devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := next.Add(1); n <= pairs; n = next.Add(1) {
				obs, err := application.Fleet.ObserveDevice.Handle(ctx, fleet.ObserveDevice{Auth: auth, DeviceID: dev,
					Image: true, MaxWidth: 768, Snapshot: true})
				if err != nil {
					errs.Add(1)
					continue
				}
				args, _ := json.Marshal(map[string]string{"key": []string{"VOLUME_UP", "VOLUME_DOWN"}[n%2]})
				if _, err := application.Fleet.PerformAction.Handle(ctx, fleet.PerformAction{Auth: auth, DeviceID: dev,
					Action: "key", Arguments: args, IdempotencyKey: fmt.Sprintf("bench-exec-%d-%d", i, n), LeaseID: leases[i],
					ObservedFrame: obs.Frame.FrameID}); err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	direct := float64(pairs) / time.Since(start).Seconds()
	line("%-34s %12s %10s", "", "steps/s", "vs direct")
	line("%-34s %12.0f %9.2f×", fmt.Sprintf("executor (%d steps in %s)", taken, elapsed.Round(time.Millisecond)), execRate, execRate/direct)
	line("%-34s %12.0f %9s  (%d errors)", fmt.Sprintf("direct observe+act (%d pairs)", pairs), direct, "1.00×", errs.Load())
	return nil
}
