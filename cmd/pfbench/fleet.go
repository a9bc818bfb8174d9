package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"phonefleet/cmd/phonefleet/service"
	"phonefleet/internal/config"

	"github.com/jackc/pgx/v5"
)

func init() {
	addSection("fleet", 60, func(ctx context.Context, b *bench, o options) error { return b.fleetActions(ctx, o.cell) })
}

// fleetActions measures actions per second end to end over REST on sim
// phones — one client per device, each leasing its phone and acting in a
// loop — at 1, 8 and 32 devices, with p50/p99 latency, beside pgbench
// inserting one row per transaction with as many clients on the same
// database. An action is at least two events (requested, then committed)
// in two transactions, plus its frames, the phone's saved state and the
// read models it feeds, so the target is half pgbench's rate.
func (b *bench) fleetActions(ctx context.Context, d time.Duration) error {
	header("Device actions over REST on sim phones vs pgbench single-row inserts (same database, same clients)")
	line("%-8s %12s %9s %9s %9s %12s %14s %8s %12s %12s  %s", "devices", "actions/s", "p50", "p99", "errors", "db tx/action", "pgbench tx/s", "ratio",
		"go CPU/act", "pg CPU/act", "target ≥0.5×, p99 ≤ 50 ms")
	for _, devices := range []int{1, 8, 32} {
		db, err := b.newDB(ctx)
		if err != nil {
			return err
		}
		db.pool.Reset()
		res, err := runFleet(ctx, db.url, devices, d)
		if err != nil {
			return err
		}
		if _, err := db.pool.Exec(ctx, `CREATE TABLE bench_raw (LIKE events INCLUDING ALL)`); err != nil {
			return err
		}
		script := fmt.Sprintf(`INSERT INTO bench_raw (event_id, stream_id, stream_version, event_type, schema_version, org_id, data, metadata, occurred_at)
VALUES (gen_random_uuid(), md5(random()::text), 1, 'bench.happened', 1, 'org_bench', '%s'::jsonb, '%s'::jsonb, now());
`, eventData, eventMeta)
		db.pool.Reset()
		pg, err := b.pgbench(ctx, db, script, devices, d)
		if err != nil {
			return err
		}
		tps := pg.tps
		ratio := res.rate / tps
		line("%-8d %12.0f %9s %9s %9d %12.1f %14.0f %7.2f× %12s %12s  %s", devices, res.rate, res.p50.Round(100*time.Microsecond),
			res.p99.Round(100*time.Microsecond), res.errors, res.txPerAction, tps, ratio, cpuPerAction(res.goCPU), cpuPerAction(res.pgCPU),
			verdict(ratio >= 0.5 && res.p99 <= 50*time.Millisecond))
	}
	return nil
}

type fleetResult struct {
	rate     float64
	p50, p99 time.Duration
	errors   int64
	// txPerAction is the database's transactions (the service's, every
	// kind: the action's own, the projections', the workers') per action
	// over the whole drive: a count, so a noisy machine does not move it.
	txPerAction float64
	// goCPU and pgCPU are the CPU time per action over the whole drive
	// of this process (the service and the bench's HTTP clients) and of
	// the database server's processes (negative when the server is not on
	// this machine): steadier than the rates on a shared machine.
	goCPU, pgCPU time.Duration
}

// cpuPerAction prints a CPU time per action in ms ("n/a" when unknown).
func cpuPerAction(d time.Duration) string {
	if d < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
}

// selfCPU is this process's user and system time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the CPU time the database server's processes have used so
// far: the postmaster's, its ended children's (it waits for every backend,
// so their time adds up in its cutime and cstime) and its children's alive
// now. ok is false when the server is not a process of this machine.
func serverCPU(ctx context.Context, dbURL string) (time.Duration, bool) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, false
	}
	var backend int
	err = conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend)
	conn.Close(ctx)
	if err != nil {
		return 0, false
	}
	f, ok := procStat(backend)
	if !ok {
		return 0, false
	}
	postmaster := f[1]
	pm, ok := procStat(mustAtoi(postmaster))
	if !ok {
		return 0, false
	}
	ticks := 0.0
	for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
		v, _ := strconv.ParseFloat(pm[i], 64)
		ticks += v
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if c, ok := procStat(pid); ok && c[1] == postmaster {
			u, _ := strconv.ParseFloat(c[11], 64)
			s, _ := strconv.ParseFloat(c[12], 64)
			ticks += u + s
		}
	}
	return time.Duration(ticks * float64(time.Second) / 100), true // USER_HZ
}

// procStat is the fields of /proc/pid/stat after the command name (state
// first, then ppid, …).
func procStat(pid int) ([]string, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(string(raw[i+1:]))
	return f, len(f) >= 15
}

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// transactions reads the database's committed and rolled-back transactions
// so far (the server's statistics, flushed by each backend within a second).
func transactions(ctx context.Context, dbURL string) (int64, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}

// runFleet starts the service (local mode, devices sim phones) on the
// database and drives it over HTTP for d after a warm-up.
func runFleet(ctx context.Context, dbURL string, devices int, d time.Duration) (fleetResult, error) {
	dir, err := os.MkdirTemp("", "pfbench-fleet-")
	if err != nil {
		return fleetResult{}, err
	}
	defer os.RemoveAll(dir)
	env := map[string]string{"DATABASE_URL": dbURL, "SERVICE_ADDR": "127.0.0.1:0", "SERVICE_MODE": "local",
		"SERVICE_DATA_DIR": dir, "SERVICE_SIM_DEVICES": fmt.Sprint(devices), "SERVICE_LOG_LEVEL": "error"}
	cfg, err := config.Load(flag.NewFlagSet("pfbench", flag.ContinueOnError), nil, func(k string) string { return env[k] })
	if err != nil {
		return fleetResult{}, err
	}
	sctx, stop := context.WithCancel(ctx)
	a, err := service.New(sctx, cfg, quiet)
	if err != nil {
		stop()
		return fleetResult{}, err
	}
	served := make(chan error, 1)
	go func() { served <- a.Run(sctx) }()
	defer func() { stop(); <-served }()

	base := "http://" + a.Addr()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: devices * 2, MaxConnsPerHost: devices * 2}, Timeout: 30 * time.Second}
	call := func(method, path string, body any, out any) (int, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
		if err != nil {
			return 0, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err == nil && out != nil && resp.StatusCode < 300 {
			err = json.Unmarshal(raw, out)
		}
		return resp.StatusCode, err
	}
	var list struct {
		Devices []struct {
			DeviceID string `json:"deviceId"`
		} `json:"devices"`
	}
	// The devices read model catches up with the registrations once the
	// service runs.
	for wait := time.Now().Add(30 * time.Second); len(list.Devices) < devices && time.Now().Before(wait); time.Sleep(50 * time.Millisecond) {
		if _, err := call("GET", "/v1/devices?limit=200", nil, &list); err != nil {
			return fleetResult{}, err
		}
	}
	if len(list.Devices) != devices {
		return fleetResult{}, fmt.Errorf("the service shows %d devices; want %d", len(list.Devices), devices)
	}

	var (
		mu        sync.Mutex
		latencies []time.Duration
		count     atomic.Int64
		errs      atomic.Int64
		measuring atomic.Bool
		wg        sync.WaitGroup
	)
	time.Sleep(1200 * time.Millisecond) // the start's transactions reach the statistics
	txBefore, err := transactions(ctx, dbURL)
	if err != nil {
		return fleetResult{}, err
	}
	goBefore := selfCPU()
	pgBefore, pgKnown := serverCPU(ctx, dbURL)
	var all atomic.Int64                        // actions answered, warm-up included
	deadline := time.Now().Add(d + time.Second) // one second of warm-up
	var start time.Time
	var startOnce sync.Once
	for i, dev := range list.Devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lease struct {
				LeaseID string `json:"leaseId"`
			}
			if status, err := call("POST", "/v1/devices/"+dev.DeviceID+"/lease", map[string]int{"ttlSeconds": 3600}, &lease); err != nil || status != 201 {
				errs.Add(1)
				return
			}
			keys := []string{"VOLUME_UP", "VOLUME_DOWN"}
			var mine []time.Duration
			for n := 0; time.Now().Before(deadline); n++ {
				body := map[string]any{"action": "key", "arguments": map[string]string{"key": keys[n%2]},
					"idempotencyKey": fmt.Sprintf("bench-%d-%d", i, n), "leaseId": lease.LeaseID}
				t0 := time.Now()
				status, err := call("POST", "/v1/devices/"+dev.DeviceID+"/actions", body, nil)
				took := time.Since(t0)
				if err == nil && status == 200 {
					all.Add(1)
				}
				if !measuring.Load() {
					continue
				}
				if err != nil || status != 200 {
					errs.Add(1)
					continue
				}
				mine = append(mine, took)
				count.Add(1)
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		}()
	}
	time.Sleep(time.Second)
	startOnce.Do(func() { start = time.Now(); measuring.Store(true) })
	wg.Wait()
	elapsed := time.Since(start)
	time.Sleep(1200 * time.Millisecond) // the projections catch up; the statistics are flushed
	goAfter := selfCPU()
	pgAfter, pgAfterKnown := serverCPU(ctx, dbURL)
	txAfter, err := transactions(ctx, dbURL)
	if err != nil {
		return fleetResult{}, err
	}
	actions := max(all.Load(), 1)
	res := fleetResult{rate: float64(count.Load()) / elapsed.Seconds(), p50: percentile(latencies, 0.50),
		p99: percentile(latencies, 0.99), errors: errs.Load(), txPerAction: float64(txAfter-txBefore) / float64(actions),
		goCPU: (goAfter - goBefore) / time.Duration(actions), pgCPU: -1}
	if pgKnown && pgAfterKnown {
		res.pgCPU = (pgAfter - pgBefore) / time.Duration(actions)
	}
	return res, nil
}
