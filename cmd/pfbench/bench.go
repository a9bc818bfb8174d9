package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"phonefleet/internal/pgembed"
	"phonefleet/migrations"
)

type bench struct {
	where string
	cpus  int
	admin string // server URL, database postgres
	dbs   []*database
	// shared are databases more than one section reads (the loaded
	// feed): kept until the end, their idle connections given back after
	// each section.
	shared  []*database
	cluster *pgembed.Cluster
	keep    bool
}

func newBench(ctx context.Context, keep bool) (*bench, error) {
	b := &bench{cpus: runtime.NumCPU(), keep: keep}
	for _, env := range []string{"BENCH_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(env); v != "" {
			b.admin, b.where = v, env
			break
		}
	}
	if b.admin == "" {
		local := "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, local)
		cancel()
		if err == nil {
			conn.Close(ctx)
			b.admin, b.where = local, "127.0.0.1:5432"
		} else {
			dir, err := os.MkdirTemp("", "pfbench-pg-")
			if err != nil {
				return nil, err
			}
			_ = os.Chmod(dir, 0o755)
			c, err := pgembed.Start(ctx, filepath.Join(dir, "pg"), quiet)
			if err != nil {
				return nil, err
			}
			b.cluster, b.admin, b.where = c, c.AdminDSN(), "embedded throwaway cluster"
		}
	}
	return b, nil
}

// database is one fresh, migrated database for a section.
type database struct {
	name string
	url  string
	pool *pgxpool.Pool
}

var dbSeq int

func (b *bench) newDB(ctx context.Context) (*database, error) {
	dbSeq++
	d := &database{name: fmt.Sprintf("pf_bench_%d_%d", time.Now().Unix(), dbSeq)}
	conn, err := pgx.Connect(ctx, b.admin)
	if err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, `CREATE DATABASE `+d.name)
	conn.Close(ctx)
	if err != nil {
		return nil, err
	}
	b.dbs = append(b.dbs, d)
	u, err := url.Parse(b.admin)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + d.name
	d.url = u.String()
	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 80
	if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	if _, err := migrations.Apply(ctx, d.pool); err != nil {
		return nil, err
	}
	return d, nil
}

// release closes the databases made since the first from of b.dbs and
// drops them (unless -keep): a section's idle connections, held until the
// end of the run, left the sections after it short of server connections
// (the full run's webhook deliveries failing "too many clients" and being
// sent again, its first fleet cell erring), so each section gives its own
// back when it ends.
func (b *bench) release(from int) {
	ctx := context.Background()
	for _, d := range b.dbs[from:] {
		d.pool.Close()
		if !b.keep {
			if conn, err := pgx.Connect(ctx, b.admin); err == nil {
				conn.Exec(ctx, `DROP DATABASE IF EXISTS `+d.name+` WITH (FORCE)`)
				conn.Close(ctx)
			}
		}
	}
	b.dbs = b.dbs[:from]
	for _, d := range b.shared {
		d.pool.Reset()
	}
}

// share moves db, made by the section running, out of its section's
// release into the run's.
func (b *bench) share(db *database) {
	for i, d := range b.dbs {
		if d == db {
			b.dbs = append(b.dbs[:i], b.dbs[i+1:]...)
			break
		}
	}
	b.shared = append(b.shared, db)
}

func (b *bench) close() {
	ctx := context.Background()
	b.release(0)
	b.dbs, b.shared = b.shared, nil
	b.release(0)
	if b.cluster != nil {
		b.cluster.Stop(ctx)
	}
}

// pgbenchRun is what one pgbench run measured: its transactions per
// second and its own CPU time (user and system, pgbench's threads only)
// per transaction, the client's share of the work that its figure leaves
// out.
type pgbenchRun struct {
	tps   float64
	cpuTx time.Duration
}

// pgbench runs script with clients for d.
func (b *bench) pgbench(ctx context.Context, db *database, script string, clients int, d time.Duration) (pgbenchRun, error) {
	f, err := os.CreateTemp("", "pfbench-*.sql")
	if err != nil {
		return pgbenchRun{}, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(script); err != nil {
		return pgbenchRun{}, err
	}
	f.Close()
	bin, err := exec.LookPath("pgbench")
	if err != nil {
		if dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench"); len(dirs) > 0 {
			bin = dirs[len(dirs)-1]
		} else {
			return pgbenchRun{}, fmt.Errorf("pgbench not found (it comes with the PostgreSQL packages)")
		}
	}
	// Release every section's idle connections: pgbench's clients need
	// room under the server's max_connections.
	for _, d := range b.dbs {
		d.pool.Reset()
	}
	threads := min(clients, b.cpus)
	cmd := exec.CommandContext(ctx, bin, "-n", "-M", "prepared", "-f", f.Name(), "-c", strconv.Itoa(clients),
		"-j", strconv.Itoa(threads), "-T", strconv.Itoa(int(d.Seconds())), db.url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return pgbenchRun{}, fmt.Errorf("pgbench: %v: %s", err, out)
	}
	m := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`).FindSubmatch(out)
	if m == nil {
		return pgbenchRun{}, fmt.Errorf("pgbench: no tps in output: %s", out)
	}
	tps, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return pgbenchRun{}, err
	}
	run := pgbenchRun{tps: tps}
	if n := regexp.MustCompile(`number of transactions actually processed: ([0-9]+)`).FindSubmatch(out); n != nil {
		if tx, _ := strconv.ParseInt(string(n[1]), 10, 64); tx > 0 {
			run.cpuTx = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()) / time.Duration(tx)
		}
	}
	return run, nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func rate(n int64, d time.Duration) string {
	r := float64(n) / d.Seconds()
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM/s", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk/s", r/1e3)
	}
	return fmt.Sprintf("%.0f/s", r)
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "BELOW"
}

// eventData is the body every benchmark event carries (a realistic size).
const eventData = `{"deviceId":"dev_0190a1b2c3d4e5f60718293a4b5c6d7e","leaseId":"lse_0190a1b2c3d4e5f60718293a4b5c6d7e","action":"tap","x":540,"y":1170}`
const eventMeta = `{"actorKind":"api_key","actorId":"key_bench","requestId":"req_0190a1b2c3d4e5f60718293a4b5c6d7e"}`

func randomStream(rng *rand.Rand) string {
	return fmt.Sprintf("bench-%016x%016x", rng.Uint64(), rng.Uint64())
}

func line(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func header(title string) {
	fmt.Println()
	fmt.Println("## " + title)
	fmt.Println(strings.Repeat("-", len(title)+3))
}

// restCall sends method url with body as JSON (none when nil) and decodes
// a 2xx answer into out (when not nil); any other status is an error
// quoting the answer.
func restCall(ctx context.Context, c *http.Client, method, url string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %.300s", method, url, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}
