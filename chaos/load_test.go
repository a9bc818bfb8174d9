//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	restWorkersPerTarget = 2
	retryWait            = 200 * time.Millisecond
)

// load is the clients acting while the faults come: REST clients tapping
// the Counter app on every target, an MCP client tapping the instances'
// sim, built-in runs one after the other on the runs' device, and a
// sampler of the devices' holders.
type load struct {
	w       *world
	targets []*target
	runDev  string

	ctx    context.Context // ends the handing out of new work
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	answers map[string]string // idempotency key -> the client's final view: committed, failed:<code>, unknown, gave_up:<last>
	keyDev  map[string]string // idempotency key -> device
	runs    []string          // runs started (201)

	seq        atomic.Int64
	retries    atomic.Int64
	mcpCalls   atomic.Int64
	mcpRetries atomic.Int64
	runFails   atomic.Int64

	samples    atomic.Int64
	attributed atomic.Int64 // locks found held by exactly one instance, over all samples
	sampleErrs atomic.Int64
	violations []string // samples showing two holders of one lock
}

func newLoad(w *world, targets []*target, runDev string) *load {
	ctx, cancel := context.WithCancel(w.ctx)
	return &load{w: w, targets: targets, runDev: runDev, ctx: ctx, cancel: cancel,
		answers: map[string]string{}, keyDev: map[string]string{}}
}

func (l *load) start() {
	for _, tg := range l.targets {
		if tg.lease == "" {
			continue
		}
		for n := range restWorkersPerTarget {
			l.wg.Go(func() { l.tapper(tg, n) })
		}
	}
	for _, tg := range l.targets {
		if tg.lease != "" && tg.dev.DeviceID == l.w.localSim {
			l.wg.Go(func() { l.mcpTapper(tg) })
		}
	}
	l.wg.Go(l.runner)
	l.wg.Go(func() { l.w.shop.buyer(l) })
	l.wg.Go(l.sampler)
}

// stop ends the handing out of new work and waits for every client to
// have its answer (or give up).
func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

func (l *load) record(key, dev, answer string) {
	l.mu.Lock()
	l.answers[key], l.keyDev[key] = answer, dev
	l.mu.Unlock()
}

// tapper taps tg's + button under a new key at a time, each sent to the
// instances in turn and repeated under the same key (switching instance)
// until it has an outcome, as a careful client does.
func (l *load) tapper(tg *target, n int) {
	for l.ctx.Err() == nil {
		key := fmt.Sprintf("chaos-rest-%s-%d-%06d", tg.dev.DeviceID, n, l.seq.Add(1))
		body := fmt.Sprintf(`{"action":"tap","arguments":{"x":%d,"y":%d},"idempotencyKey":%q,"leaseId":%q}`, tg.x, tg.y, key, tg.lease)
		first := time.Now()
		answer := ""
		for attempt := 0; answer == ""; attempt++ {
			if attempt > 0 {
				l.retries.Add(1)
				time.Sleep(retryWait)
			}
			i := (n + attempt) % 2
			// The key's own context: a key handed out is answered even
			// after the load stops.
			status, b, err := l.w.c.do(l.w.ctx, "POST", l.w.base[i]+"/v1/devices/"+tg.dev.DeviceID+"/actions", body)
			code, _ := errorCode(b)
			switch {
			case err == nil && status == http.StatusOK:
				answer = "committed"
			case code == "action_outcome_unknown":
				answer = "unknown"
			case !retryableAnswer(status, b, err):
				answer = "failed:" + code
			case time.Since(first) > keyMax:
				answer = fmt.Sprintf("gave_up:%d %s %v", status, code, err)
			}
		}
		l.record(key, tg.dev.DeviceID, answer)
	}
}

// mcpTapper taps tg through the MCP tool `tap`, on a session with one
// instance; a failed call is repeated under the same key on a new session
// with the other instance.
func (l *load) mcpTapper(tg *target) {
	var session *sdk.ClientSession
	inst := 0
	defer func() {
		if session != nil {
			session.Close()
		}
	}()
	connect := func() error {
		if session != nil {
			session.Close()
			session = nil
		}
		inst = 1 - inst
		ctx, cancel := context.WithTimeout(l.w.ctx, 20*time.Second)
		defer cancel()
		s, err := sdk.NewClient(&sdk.Implementation{Name: "chaos", Version: "1"}, nil).Connect(ctx,
			&sdk.StreamableClientTransport{Endpoint: l.w.base[inst] + "/mcp", HTTPClient: &http.Client{Timeout: 20 * time.Second}, MaxRetries: -1}, nil)
		if err != nil {
			return err
		}
		session = s
		return nil
	}
	for l.ctx.Err() == nil {
		key := fmt.Sprintf("chaos-mcp-%06d", l.seq.Add(1))
		first := time.Now()
		answer := ""
		for attempt := 0; answer == ""; attempt++ {
			if attempt > 0 {
				l.mcpRetries.Add(1)
				time.Sleep(retryWait)
			}
			if session == nil {
				if err := connect(); err != nil {
					if time.Since(first) > keyMax {
						answer = "gave_up:connect " + err.Error()
					}
					continue
				}
			}
			ctx, cancel := context.WithTimeout(l.w.ctx, 20*time.Second)
			res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "tap", Arguments: map[string]any{
				"deviceId": tg.dev.DeviceID, "leaseId": tg.lease, "x": tg.x, "y": tg.y, "idempotencyKey": key}})
			cancel()
			l.mcpCalls.Add(1)
			text := ""
			if err == nil && len(res.Content) > 0 {
				if tc, ok := res.Content[0].(*sdk.TextContent); ok {
					text = tc.Text
				}
			}
			switch {
			case err != nil:
				session.Close()
				session = nil
				if time.Since(first) > keyMax {
					answer = "gave_up:" + err.Error()
				}
			case !res.IsError:
				var out struct {
					Receipt struct {
						State string `json:"state"`
					} `json:"receipt"`
				}
				_ = json.Unmarshal([]byte(text), &out)
				if out.Receipt.State == "committed" {
					answer = "committed"
				} else {
					answer = "failed:receipt " + out.Receipt.State
				}
			default:
				code, retryable := mcpErrorCode(text)
				switch {
				case code == "action_outcome_unknown":
					answer = "unknown"
				case retryable || code == "internal_error" || code == "service_unavailable" || code == "unavailable" || code == "":
					if time.Since(first) > keyMax {
						answer = "gave_up:" + code
					}
				default:
					answer = "failed:" + code
				}
			}
		}
		l.record(key, tg.dev.DeviceID, answer)
	}
}

// mcpErrorCode reads the code of a tool error's text (the error envelope,
// or its inner object).
func mcpErrorCode(text string) (string, bool) {
	if code, retryable := errorCode([]byte(text)); code != "" {
		return code, retryable
	}
	var inner struct {
		Code      string `json:"code"`
		Retryable bool   `json:"retryable"`
	}
	_ = json.Unmarshal([]byte(text), &inner)
	return inner.Code, inner.Retryable
}

// runner starts built-in runs on the runs' device, one after the other,
// each a short script, and waits for each to end before the next.
func (l *load) runner() {
	goal := "open com.example.notes\nkey home\nopen com.android.settings\nfinish succeeded chaos"
	body := fmt.Sprintf(`{"deviceId":%q,"goal":%q,"maxSteps":10,"deadlineSeconds":600}`, l.runDev, goal)
	inst := 0
	for l.ctx.Err() == nil {
		inst = 1 - inst
		status, b, err := l.w.c.do(l.w.ctx, "POST", l.w.base[inst]+"/v1/runs", body)
		if err != nil || status != http.StatusCreated {
			// Not started (or its answer lost: a run holding the device
			// answers the next start 409, and the check at the end finds
			// every run of the device, acknowledged or not, ended).
			l.runFails.Add(1)
			time.Sleep(time.Second)
			continue
		}
		var run struct {
			RunID string `json:"runId"`
		}
		_ = json.Unmarshal(b, &run)
		l.mu.Lock()
		l.runs = append(l.runs, run.RunID)
		l.mu.Unlock()
		for deadline := time.Now().Add(keyMax); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			if st := l.w.runState(run.RunID); terminalRun(st) {
				break
			}
		}
	}
}

func terminalRun(state string) bool {
	switch state {
	case "succeeded", "failed", "cancelled", "timed_out", "expired":
		return true
	}
	return false
}

// runState reads a run's state through either instance ("" when neither
// answers).
func (w *world) runState(runID string) string {
	st, _ := w.runEnd(runID)
	return st
}

// runEnd reads a run's state and reason through either instance.
func (w *world) runEnd(runID string) (state, reason string) {
	for i := range w.base {
		status, b, err := w.c.do(w.ctx, "GET", w.base[i]+"/v1/runs/"+runID, "")
		if err != nil || status != http.StatusOK {
			continue
		}
		type run struct {
			State  string  `json:"state"`
			Reason *string `json:"reason"`
		}
		var v struct {
			run
			Run *run `json:"run"`
		}
		_ = json.Unmarshal(b, &v)
		r := v.run
		if v.Run != nil {
			r = *v.Run
		}
		if r.Reason != nil {
			reason = *r.Reason
		}
		return r.State, reason
	}
	return "", ""
}

// sampler samples, every 100 ms until the load stops, which instance
// holds each device host's advisory lock (the sim host's and each
// gateway's), from the database's side: the lock's backend, its client
// port, and the instance process owning that socket. A sample showing
// one lock held by two instances is a violation.
func (l *load) sampler() {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for l.ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		if conn == nil {
			ctx, cancel := context.WithTimeout(l.ctx, 2*time.Second)
			c, err := pgx.Connect(ctx, l.w.pg.DSN())
			cancel()
			if err != nil {
				l.sampleErrs.Add(1)
				continue
			}
			conn = c
		}
		ctx, cancel := context.WithTimeout(l.ctx, 2*time.Second)
		rows, err := conn.Query(ctx, `SELECT l.classid::bigint, l.objid::bigint, coalesce(a.client_port, -1)
			FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.granted`)
		type lock struct{ classid, objid int64 }
		held := map[lock][]int{}
		if err == nil {
			for rows.Next() {
				var k lock
				var port int
				if err = rows.Scan(&k.classid, &k.objid, &port); err != nil {
					break
				}
				held[k] = append(held[k], port)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		cancel()
		if err != nil {
			l.sampleErrs.Add(1)
			conn.Close(context.Background())
			conn = nil
			continue
		}
		owners := l.w.socketOwners()
		l.samples.Add(1)
		for k, ports := range held {
			insts := map[string]bool{}
			for _, p := range ports {
				if o, ok := owners[p]; ok {
					insts[o] = true
				}
			}
			if len(insts) == 1 {
				l.attributed.Add(1)
			}
			if len(insts) > 1 {
				l.mu.Lock()
				l.violations = append(l.violations, fmt.Sprintf("%s lock %d/%d held by %v", time.Now().Format(time.RFC3339Nano), k.classid, k.objid, insts))
				l.mu.Unlock()
			}
		}
	}
}

// socketOwners maps the local port of every TCP socket an instance holds
// to the instance's name (from /proc: the instance's socket inodes, and
// the table of TCP sockets).
func (w *world) socketOwners() map[int]string {
	inodeOwner := map[string]string{}
	for _, p := range w.inst {
		pid := p.pid()
		if pid == 0 {
			continue
		}
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
			if ino, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
				inodeOwner[strings.TrimSuffix(ino, "]")] = p.name
			}
		}
	}
	owners := map[int]string{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			_, portHex, ok := strings.Cut(f[1], ":")
			port, err := strconv.ParseInt(portHex, 16, 32)
			if !ok || err != nil {
				continue
			}
			if o, ok := inodeOwner[f[9]]; ok {
				owners[int(port)] = o
			}
		}
	}
	return owners
}
