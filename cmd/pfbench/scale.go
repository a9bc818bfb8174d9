package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

func init() {
	addSection("scale", 62, func(ctx context.Context, b *bench, o options) error { return b.fleetScale(ctx, o) })
}

// scaleGoalP99 is the latency a fleet's actions must stay under (issue 28).
const scaleGoalP99 = 50 * time.Millisecond

// fleetScale measures what a fleet's owner needs to know: how many phones
// one instance serves, at what latency, and what runs out first. For each
// fleet size it starts the service as a process of its own (so its RSS and
// CPU are its own) with that many sim phones, gives every phone a client
// that observes it (its UI elements) and then acts on it (a key press) at
// a steady rate — one action a second per phone, then doubled step by step
// until p99 passes 50 ms, errors appear or the rate is not kept — while an
// MCP client observes phones round the fleet, the receipt checkpoints'
// webhooks are delivered to a local HTTPS receiver, and a projection is
// rebuilt in the middle of the first step (the step says how long that
// took: a rebuild catches up with a feed the fleet keeps writing). Beside
// it: pgbench's single-row insert transactions on the same database with
// as many clients as the service's pool would use, and the PostgreSQL
// cluster's CPU (its processes' time, read from /proc: the database must
// run on this machine). One phone in twenty (at least one) is driven by a
// run on the device surface instead (an external run's worker: GET
// /vrx/…/observe, then POST /vrx/…/actions naming the frame, at the same
// beat; a new run every vrxStepsPerRun steps); its steps are counted apart
// ("runs/s", "run p99") and their errors with the others.
func (b *bench) fleetScale(ctx context.Context, o options) error {
	header("Fleet scale: N sim phones, each with a client observing then acting at a steady rate (the service as its own process)")
	bin, err := buildServiceBinary(ctx)
	if err != nil {
		return err
	}
	defer os.RemoveAll(filepath.Dir(bin))
	line("%-6s %8s %9s %9s %8s %8s %8s %7s %7s %7s %8s %9s %8s %7s %6s  %s", "phones", "target/s", "actions/s", "observe50",
		"act p50", "act p99", "act max", "runs/s", "run p99", "errors", "RSS MB", "svc CPU%", "PG CPU%", "hooks", "mcp", "goal p99 ≤ 50 ms, no errors, rate kept")
	for _, n := range o.phones {
		if err := b.scaleFleet(ctx, bin, n, o.step); err != nil {
			return fmt.Errorf("%d phones: %w", n, err)
		}
	}
	return nil
}

// scaleFleet runs the steps for one fleet size.
func (b *bench) scaleFleet(ctx context.Context, bin string, phones int, step time.Duration) error {
	db, err := b.newDB(ctx)
	if err != nil {
		return err
	}
	db.pool.Reset()
	rcv := newHookReceiver()
	defer rcv.srv.Close()
	svc, err := startServiceProcess(ctx, bin, db.url, phones, rcv.caFile)
	if err != nil {
		return err
	}
	defer svc.stop()
	httpc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: phones + 8, MaxConnsPerHost: phones + 8}, Timeout: 30 * time.Second}
	rest := func(method, path string, body, out any) error {
		return restCall(ctx, httpc, method, svc.base+path, body, out)
	}

	var list struct {
		Devices []struct {
			DeviceID string `json:"deviceId"`
		} `json:"devices"`
	}
	for wait := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		list.Devices = list.Devices[:0]
		var page struct {
			Devices []struct {
				DeviceID string `json:"deviceId"`
			} `json:"devices"`
			NextAfter string `json:"nextAfter"`
		}
		after := ""
		for {
			path := "/v1/devices?limit=200"
			if after != "" {
				path += "&after=" + url.QueryEscape(after)
			}
			page.NextAfter = ""
			if err := rest("GET", path, nil, &page); err != nil {
				return err
			}
			list.Devices = append(list.Devices, page.Devices...)
			if after = page.NextAfter; after == "" {
				break
			}
		}
		if len(list.Devices) >= phones {
			break
		}
		if time.Now().After(wait) {
			return fmt.Errorf("the service shows %d devices; want %d", len(list.Devices), phones)
		}
	}
	idleRSS := svc.rssMB()
	if err := rest("POST", "/v1/webhooks", map[string]any{"url": rcv.srv.URL + "/in", "events": []string{"receipt.checkpoint_signed"}}, nil); err != nil {
		return err
	}
	fleet := make([]*scalePhone, phones)
	runPhones := max(1, phones/20)
	for i := range fleet {
		p := &scalePhone{id: list.Devices[i].DeviceID}
		if i >= phones-runPhones { // driven by a run on the device surface
			if err := p.newRun(ctx, httpc, svc.base); err != nil {
				return err
			}
			fleet[i] = p
			continue
		}
		var lease struct {
			LeaseID string `json:"leaseId"`
		}
		if err := rest("POST", "/v1/devices/"+p.id+"/lease", map[string]int{"ttlSeconds": 3600}, &lease); err != nil {
			return err
		}
		p.lease = lease.LeaseID
		fleet[i] = p
	}
	mcpc, err := newScaleMCP(ctx, svc.base, httpc)
	if err != nil {
		return err
	}
	defer mcpc.close()

	best := 0.0
	for rate, first := 1.0, true; ; rate, first = rate*2, false {
		// The first step rebuilds a projection while the fleet acts;
		// rebuildTook is read once rebuilt has answered.
		var rebuilt chan error
		var rebuildTook time.Duration
		if first {
			rebuilt = make(chan error, 1)
			go func() {
				time.Sleep(step / 3)
				t0 := time.Now()
				err := svc.cli(ctx, "projections", "rebuild", "devices")
				rebuildTook = time.Since(t0)
				rebuilt <- err
			}()
		}
		res := runScaleStep(ctx, httpc, svc, fleet, mcpc, rcv, rate, step)
		if rebuilt != nil {
			if err := <-rebuilt; err != nil {
				return fmt.Errorf("projection rebuild during the load: %w", err)
			}
		}
		target := rate * float64(phones)
		kept := res.rate+res.runRate >= 0.9*target
		ok := res.p99 <= scaleGoalP99 && res.runP99 <= scaleGoalP99 && res.errors == 0 && kept
		note := verdict(ok)
		if !kept {
			note += fmt.Sprintf(" (rate not kept: %.0f%%)", 100*(res.rate+res.runRate)/target)
		}
		if first {
			note += fmt.Sprintf("; idle RSS %.0f MB (goal ≤ 200 MB at 1,000 phones); a projection rebuilt meanwhile in %.1f s", idleRSS, rebuildTook.Seconds())
		}
		line("%-6d %8.0f %9.0f %9s %8s %8s %8s %7.0f %7s %7d %8.0f %9.0f %8.0f %7d %6d  %s", phones, target, res.rate,
			res.observeP50.Round(100*time.Microsecond), res.p50.Round(100*time.Microsecond), res.p99.Round(100*time.Microsecond),
			res.max.Round(time.Millisecond), res.runRate, res.runP99.Round(100*time.Microsecond), res.errors, res.rssMB, res.svcCPU,
			res.pgCPU, res.hooks, res.mcpCalls, note)
		if ok && res.rate+res.runRate > best {
			best = res.rate + res.runRate
		}
		if !ok || rate >= 64 {
			break
		}
	}
	clients := min(phones, 32)
	script := fmt.Sprintf(`INSERT INTO bench_raw (event_id, stream_id, stream_version, event_type, schema_version, org_id, data, metadata, occurred_at)
VALUES (gen_random_uuid(), md5(random()::text), 1, 'bench.happened', 1, 'org_bench', '%s'::jsonb, '%s'::jsonb, now());
`, eventData, eventMeta)
	if _, err := db.pool.Exec(ctx, `CREATE TABLE bench_raw (LIKE events INCLUDING ALL)`); err != nil {
		return err
	}
	svc.stop()
	db.pool.Reset()
	pg, err := b.pgbench(ctx, db, script, clients, step)
	if err != nil {
		return err
	}
	tps := pg.tps
	line("%-6d pgbench single-row inserts, %d clients: %.0f tx/s; the best step within the goal: %.0f actions/s = %.2f× pgbench",
		phones, clients, tps, best, best/tps)
	return nil
}

// scalePhone is one phone of the fleet and its client's lease, or the
// device surface of the run driving it (vrx; no lease).
type scalePhone struct {
	id, lease string
	n         int
	vrx       string
	steps     int
}

// newRun finishes the phone's run, if any, and starts an external one.
func (p *scalePhone) newRun(ctx context.Context, httpc *http.Client, base string) error {
	if p.vrx != "" {
		if err := restCall(ctx, httpc, "POST", p.vrx+"/v1/finish", map[string]string{"state": "succeeded", "reason": "pfbench"}, nil); err != nil {
			return err
		}
	}
	var started struct {
		VrxBaseURL string `json:"vrxBaseUrl"`
	}
	if err := restCall(ctx, httpc, "POST", base+"/v1/runs", map[string]any{"deviceId": p.id, "goal": "pfbench scale",
		"executor": "external", "maxSteps": 1000}, &started); err != nil {
		return fmt.Errorf("start a run on %s (POST /v1/runs): %w", p.id, err)
	}
	p.vrx, p.steps = started.VrxBaseURL, 0
	return nil
}

// step is one beat of the phone's client: observe, then act on what was
// observed (through the device surface for a run's phone). It answers
// when the action began and the observation's error and the action's.
func (p *scalePhone) step(ctx context.Context, httpc *http.Client, base string) (time.Time, error, error) {
	p.n++
	key := "VOLUME_UP"
	if p.n%2 == 0 {
		key = "VOLUME_DOWN"
	}
	if p.vrx == "" {
		oerr := restCall(ctx, httpc, "GET", base+"/v1/devices/"+p.id+"/snapshot", nil, nil)
		a0 := time.Now()
		return a0, oerr, restCall(ctx, httpc, "POST", base+"/v1/devices/"+p.id+"/actions", map[string]any{"action": "key",
			"arguments": map[string]string{"key": key}, "idempotencyKey": fmt.Sprintf("scale-%s-%d", p.id, p.n), "leaseId": p.lease}, nil)
	}
	if p.steps >= vrxStepsPerRun {
		if err := p.newRun(ctx, httpc, base); err != nil {
			return time.Now(), err, nil
		}
	}
	var f struct {
		FrameID string `json:"frameId"`
	}
	oerr := restCall(ctx, httpc, "GET", p.vrx+"/v1/observe", nil, &f)
	a0 := time.Now()
	p.steps++
	return a0, oerr, restCall(ctx, httpc, "POST", p.vrx+"/v1/actions", map[string]any{"action": "key",
		"arguments": map[string]string{"key": key}, "idempotencyKey": fmt.Sprintf("scale-run-%s-%d", p.id, p.n), "observedFrame": f.FrameID}, nil)
}

type scaleResult struct {
	rate, runRate             float64
	observeP50, p50, p99, max time.Duration
	runP99                    time.Duration
	errors                    int64
	rssMB, svcCPU, pgCPU      float64
	hooks, mcpCalls           int64
}

// runScaleStep drives every phone at rate actions a second for d (after a
// second of warm-up) and measures the step.
func runScaleStep(ctx context.Context, httpc *http.Client, svc *serviceProcess, fleet []*scalePhone, mcpc *scaleMCP, rcv *hookReceiver, rate float64, d time.Duration) scaleResult {
	interval := time.Duration(float64(time.Second) / rate)
	warm := time.Now().Add(time.Second)
	end := warm.Add(d)
	var (
		mu                   sync.Mutex
		acts, observes, runs []time.Duration
		errs, count          atomic.Int64
		wg                   sync.WaitGroup
		cpu0, pg0, t0        float64
		hooks0, mcpCalls0    int64
		sampled              sync.Once
	)
	sample := func() {
		cpu0, pg0, t0 = svc.cpuSeconds(), svc.pgCPUSeconds(ctx), float64(time.Now().UnixNano())/1e9
		hooks0, mcpCalls0 = rcv.received.Load(), mcpc.calls.Load()
	}
	go func() { // the MCP client looks at phones round the fleet
		for i := 0; time.Now().Before(end); i++ {
			mcpc.observe(ctx, fleet[i%len(fleet)].id)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	for i, p := range fleet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var myActs, myObs, myRuns []time.Duration
			// Phones start spread over one interval, then keep their beat.
			next := time.Now().Add(time.Duration(int64(interval) * int64(i) / int64(len(fleet))))
			for {
				if wait := time.Until(next); wait > 0 {
					time.Sleep(wait)
				}
				if !time.Now().Before(end) {
					break
				}
				next = next.Add(interval)
				measuring := time.Now().After(warm)
				o0 := time.Now()
				a0, oerr, aerr := p.step(ctx, httpc, svc.base)
				took := time.Since(a0)
				if !measuring {
					continue
				}
				if oerr != nil || aerr != nil {
					errs.Add(1)
					continue
				}
				if p.vrx != "" {
					myRuns = append(myRuns, took)
					continue
				}
				myObs = append(myObs, a0.Sub(o0))
				myActs = append(myActs, took)
				count.Add(1)
			}
			mu.Lock()
			acts, observes, runs = append(acts, myActs...), append(observes, myObs...), append(runs, myRuns...)
			mu.Unlock()
		}()
	}
	time.Sleep(time.Until(warm))
	sampled.Do(sample)
	rss := 0.0
	for time.Now().Before(end) { // the step's peak RSS
		rss = max(rss, svc.rssMB())
		time.Sleep(500 * time.Millisecond)
	}
	wg.Wait()
	elapsed := float64(time.Now().UnixNano())/1e9 - t0
	res := scaleResult{rate: float64(count.Load()) / d.Seconds(), observeP50: percentile(observes, 0.5),
		p50: percentile(acts, 0.5), p99: percentile(acts, 0.99), errors: errs.Load(), rssMB: rss,
		runRate: float64(len(runs)) / d.Seconds(), runP99: percentile(runs, 0.99),
		svcCPU: 100 * (svc.cpuSeconds() - cpu0) / elapsed, pgCPU: 100 * (svc.pgCPUSeconds(ctx) - pg0) / elapsed,
		hooks: rcv.received.Load() - hooks0, mcpCalls: mcpc.calls.Load() - mcpCalls0}
	for _, a := range acts {
		res.max = max(res.max, a)
	}
	return res
}

// serviceProcess is `phonefleet serve` run by the bench.
type serviceProcess struct {
	cmd    *exec.Cmd
	bin    string
	dbURL  string
	base   string
	done   chan struct{}
	once   sync.Once
	pgPIDs func(context.Context) []int
}

// buildServiceBinary builds cmd/phonefleet into a temporary directory.
func buildServiceBinary(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "pfbench-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "phonefleet")
	cmd := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "phonefleet/cmd/phonefleet")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build phonefleet: %v\n%s", err, out)
	}
	return bin, nil
}

// startServiceProcess starts the service in local mode with phones sim
// phones on dbURL and waits until it answers.
func startServiceProcess(ctx context.Context, bin, dbURL string, phones int, webhookCA string) (*serviceProcess, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	dir, err := os.MkdirTemp("", "pfbench-scale-")
	if err != nil {
		return nil, err
	}
	s := &serviceProcess{bin: bin, dbURL: dbURL, base: "http://" + addr, done: make(chan struct{})}
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "SERVICE_ADDR="+addr, "SERVICE_MODE=local", "SERVICE_DATA_DIR="+dir,
		"SERVICE_SIM_DEVICES="+strconv.Itoa(phones), "SERVICE_LOG_LEVEL=error", "SERVICE_WEBHOOK_CA_FILE="+webhookCA,
		"SERVICE_RECEIPT_CHECKPOINT_EVERY=200")
	var logs bytes.Buffer
	s.cmd.Stderr = &logs
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); os.RemoveAll(dir); close(s.done) }()
	for wait := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		select {
		case <-s.done:
			return nil, fmt.Errorf("the service stopped: %.2000s", logs.String())
		default:
		}
		if resp, err := http.Get(s.base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(wait) || ctx.Err() != nil {
			s.stop()
			return nil, fmt.Errorf("the service did not answer /healthz in 3 minutes: %.2000s", logs.String())
		}
	}
}

func (s *serviceProcess) stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
}

// cli runs the binary's command args against the service's database.
func (s *serviceProcess) cli(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, s.bin, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+s.dbURL, "SERVICE_LOG_LEVEL=error")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("phonefleet %s: %v: %.1000s", strings.Join(args, " "), err, out)
	}
	return nil
}

// rssMB is the service's resident set now, in MiB.
func (s *serviceProcess) rssMB() float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// cpuSeconds is the CPU time the service has used.
func (s *serviceProcess) cpuSeconds() float64 { return procCPUSeconds(s.cmd.Process.Pid) }

// pgCPUSeconds is the CPU time used so far by the processes of the
// service's PostgreSQL cluster alive now (pg_stat_activity lists its
// backends and its background processes); a process that ended between
// two readings takes its time with it, so this reads low, not high.
func (s *serviceProcess) pgCPUSeconds(ctx context.Context) float64 {
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		return 0
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity`)
	if err != nil {
		return 0
	}
	defer rows.Close()
	total := 0.0
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			total += procCPUSeconds(pid)
		}
	}
	return total
}

// procCPUSeconds is a process's user and system time from /proc (0 when
// it cannot be read).
func procCPUSeconds(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may hold spaces: fields are counted after its ')'.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// hookReceiver is the HTTPS endpoint the checkpoints' webhooks go to.
type hookReceiver struct {
	srv      *httptest.Server
	caFile   string
	received atomic.Int64
}

func newHookReceiver() *hookReceiver {
	r := &hookReceiver{}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		r.received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	f, err := os.CreateTemp("", "pfbench-ca-*.pem")
	if err == nil {
		_ = pem.Encode(f, &pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})
		f.Close()
		r.caFile = f.Name()
	}
	return r
}

// scaleMCP is an MCP client observing phones (through mcp-go).
type scaleMCP struct {
	c     *mcpclient.Client
	calls atomic.Int64
	errs  atomic.Int64
}

func newScaleMCP(ctx context.Context, base string, httpc *http.Client) (*scaleMCP, error) {
	tr, err := transport.NewStreamableHTTP(base+"/mcp", transport.WithHTTPBasicClient(httpc))
	if err != nil {
		return nil, err
	}
	c := mcpclient.NewClient(tr)
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	if _, err := c.Initialize(ctx, mcpgo.InitializeRequest{}); err != nil {
		c.Close()
		return nil, err
	}
	return &scaleMCP{c: c}, nil
}

func (m *scaleMCP) observe(ctx context.Context, dev string) {
	req := mcpgo.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = "observe", map[string]any{"deviceId": dev, "screenshot": false}
	res, err := m.c.CallTool(ctx, req)
	if err != nil || res.IsError {
		m.errs.Add(1)
		return
	}
	m.calls.Add(1)
}

func (m *scaleMCP) close() { _ = m.c.Close() }
