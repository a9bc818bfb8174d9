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
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"phonefleet/eventstore"
)

func main() {
	only := flag.String("only", strings.Join(sectionNames(), ","), "comma-separated sections to run")
	cellTime := flag.Duration("cell", 4*time.Second, "duration of each append measurement")
	events := flag.Int("events", 1_000_000, "events for the catch-up, projection and rebuild measurements")
	keep := flag.Bool("keep", false, "keep the benchmark database")
	phones := flag.String("phones", "100,300,1000", "fleet sizes of the scale section (comma-separated)")
	step := flag.Duration("step", 15*time.Second, "duration of each rate step of the scale section")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "pfbench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "pfbench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// Every write carries event metadata, as the service's edges put it.
	ctx = eventstore.WithMetadata(ctx, eventstore.Metadata{ActorKind: "system", ActorID: "pfbench", RequestID: "req_pfbench"})
	b, err := newBench(ctx, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pfbench:", err)
		os.Exit(1)
	}
	defer b.close()
	fmt.Printf("phonefleet benchmarks — %s, database %s, %d CPUs\n\n", time.Now().UTC().Format(time.RFC3339), b.where, b.cpus)
	opts := options{cell: *cellTime, events: *events, step: *step}
	for _, p := range strings.Split(*phones, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "pfbench: -phones %q: want fleet sizes such as 100,300,1000\n", *phones)
			os.Exit(2)
		}
		opts.phones = append(opts.phones, n)
	}
	for _, name := range strings.Split(*only, ",") {
		sec, ok := sectionByName(strings.TrimSpace(name))
		if !ok {
			fmt.Fprintf(os.Stderr, "pfbench: unknown section %q (have %s)\n", name, strings.Join(sectionNames(), ","))
			os.Exit(2)
		}
		from := len(b.dbs)
		err := sec.run(ctx, b, opts)
		b.release(from)
		if err != nil {
			fmt.Fprintf(os.Stderr, "pfbench: %s: %v\n", name, err)
			b.close()
			os.Exit(1)
		}
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// options are the command-line settings every section may read.
type options struct {
	cell   time.Duration
	events int
	// phones are the scale section's fleet sizes, step the length of each
	// of its rate steps.
	phones []int
	step   time.Duration
}

// section is one group of measurements. Each capability's file adds its
// own in an init function (appends.go, feed.go, and later ones), in order.
type section struct {
	name  string
	order int
	run   func(context.Context, *bench, options) error
}

var sections []section

func addSection(name string, order int, run func(context.Context, *bench, options) error) {
	sections = append(sections, section{name, order, run})
	sort.Slice(sections, func(i, j int) bool { return sections[i].order < sections[j].order })
}

func sectionNames() []string {
	var out []string
	for _, s := range sections {
		out = append(out, s.name)
	}
	return out
}

func sectionByName(name string) (section, bool) {
	for _, s := range sections {
		if s.name == name {
			return s, true
		}
	}
	return section{}, false
}
