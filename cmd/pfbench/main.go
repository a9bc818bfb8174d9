// Command pfbench measures phonefleet's performance targets, each beside a
// baseline measured in the same run on the same database (pgbench, or the
// server's own SQL for the same rows). Run it with `make bench`.
//
// The database is BENCH_DATABASE_URL, else DATABASE_URL, else the server at
// 127.0.0.1:5432, else a throwaway embedded cluster; a fresh database is
// created for the run and dropped after.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"
)

func main() {
	only := flag.String("only", "appends,read,projection,lag", "comma-separated sections to run")
	cellTime := flag.Duration("cell", 4*time.Second, "duration of each append measurement")
	events := flag.Int("events", 1_000_000, "events for the catch-up, projection and rebuild measurements")
	keep := flag.Bool("keep", false, "keep the benchmark database")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	b, err := newBench(ctx, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pfbench:", err)
		os.Exit(1)
	}
	defer b.close()
	fmt.Printf("phonefleet benchmarks — %s, database %s, %d CPUs\n\n", time.Now().UTC().Format(time.RFC3339), b.where, b.cpus)
	sections := map[string]func(context.Context) error{
		"appends":    func(ctx context.Context) error { return b.appends(ctx, *cellTime) },
		"read":       func(ctx context.Context) error { return b.catchUp(ctx, *events) },
		"projection": func(ctx context.Context) error { return b.projection(ctx, *events) },
		"lag":        func(ctx context.Context) error { return b.liveLag(ctx, 10*time.Second) },
	}
	for _, name := range strings.Split(*only, ",") {
		f, ok := sections[strings.TrimSpace(name)]
		if !ok {
			fmt.Fprintf(os.Stderr, "pfbench: unknown section %q\n", name)
			os.Exit(2)
		}
		if err := f(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "pfbench: %s: %v\n", name, err)
			os.Exit(1)
		}
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
