package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"phonefleet/domain"
	"phonefleet/internal/backends"
	"phonefleet/internal/sim"
	"phonefleet/testutil/cputime"
)

func init() {
	addSection("observe", 65, func(ctx context.Context, b *bench, o options) error { return b.observeBudget(ctx, o.cell) })
}

// observeBudget measures what one observation costs an agent, per budget:
// the bytes it receives (picture and/or compact elements as JSON), the
// time the sim backend takes to produce it and the process CPU it costs,
// on a Pixel 7 (1080×2400) cycling through home, Settings and Notes, so no
// budget is served from the phone's cached PNG. The baseline is the
// full-size PNG. The budgets take turns, one observation each, each on
// its own phone: a shared machine's load falls on all of them alike, so
// the ratios between them hold even when the absolute times swing.
func (b *bench) observeBudget(ctx context.Context, d time.Duration) error {
	header("Observation budget on a sim phone (Pixel 7, 1080×2400): bytes an agent receives and time to produce them")
	line("%-28s %10s %9s %9s %9s %8s  %s", "budget", "bytes", "p50", "p99", "CPU/obs", "×bytes", "vs PNG full size (baseline)")
	interactive := func(root domain.UIElement) []domain.Mark {
		els := domain.CompactElements(root, true)
		out := make([]domain.Mark, len(els))
		for i, e := range els {
			out[i] = domain.Mark{N: i + 1, Ref: e.Ref, Bounds: e.Bounds}
		}
		return out
	}
	type budget struct {
		name     string
		opts     domain.ObserveOptions
		elements bool
		dev      *backends.SimDevice
		screens  []func() error
		took     []time.Duration
		cpu      time.Duration
		bytes    int64
	}
	budgets := []*budget{
		{name: "PNG full size (baseline)", opts: domain.ObserveOptions{Image: true}},
		{name: "PNG at 768 px", opts: domain.ObserveOptions{Image: true, MaxWidth: 768}},
		{name: "JPEG q70 at 768 px", opts: domain.ObserveOptions{Image: true, MaxWidth: 768, Format: domain.ImageJPEG}},
		{name: "elements only (interactive)", opts: domain.ObserveOptions{Snapshot: true}, elements: true},
		{name: "set-of-marks PNG full size", opts: domain.ObserveOptions{Image: true, Marks: interactive}, elements: true},
		{name: "set-of-marks JPEG at 768 px", opts: domain.ObserveOptions{Image: true, MaxWidth: 768, Format: domain.ImageJPEG, Marks: interactive}, elements: true},
	}
	for _, bud := range budgets {
		p, err := sim.New(sim.DefaultModel, "BENCH-OBSERVE")
		if err != nil {
			return err
		}
		bud.dev = backends.NewSimDevice(p)
		bud.screens = []func() error{
			func() error { _, err := p.PressKey("HOME"); return err },
			func() error { _, err := p.OpenApp(sim.PkgSettings); return err },
			func() error { _, err := p.OpenApp(sim.PkgNotes); return err },
		}
	}
	end := time.Now().Add(max(d, time.Duration(len(budgets))*500*time.Millisecond))
	for i := 0; time.Now().Before(end) || i < 10; i++ {
		for _, bud := range budgets {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err := bud.screens[i%len(bud.screens)](); err != nil {
				return err
			}
			cpu, start := cputime.Process(), time.Now()
			obs, err := bud.dev.Observe(ctx, bud.opts)
			if err != nil {
				return err
			}
			bud.took = append(bud.took, time.Since(start))
			bud.cpu += cputime.Process() - cpu
			size := len(obs.Image)
			if bud.elements {
				var root domain.UIElement
				if err := json.Unmarshal(obs.Snapshot, &root); err != nil {
					return err
				}
				els, err := json.Marshal(domain.CompactElements(root, true))
				if err != nil {
					return err
				}
				size += len(els)
			}
			bud.bytes += int64(size)
		}
	}
	p50 := map[string]time.Duration{}
	cpu := map[string]time.Duration{}
	var baseline float64
	for _, bud := range budgets {
		n := len(bud.took)
		p50[bud.name], cpu[bud.name] = percentile(bud.took, 0.5), bud.cpu/time.Duration(n)
		avg := float64(bud.bytes) / float64(n)
		if baseline == 0 {
			baseline = avg
		}
		line("%-28s %10.0f %9s %9s %9s %7.3f×  %s", bud.name, avg, p50[bud.name].Round(10*time.Microsecond),
			percentile(bud.took, 0.99).Round(10*time.Microsecond), cpu[bud.name].Round(10*time.Microsecond), avg/baseline,
			fmt.Sprintf("%d observations", n))
	}
	// Issue 28: the budgeted picture drawn at its size costs no more than
	// the full-size PNG, and its marks little more than it.
	png, jpg, marks := "PNG full size (baseline)", "JPEG q70 at 768 px", "set-of-marks JPEG at 768 px"
	line("goal: %s p50 %s ≤ %s p50 %s (%.2f×; CPU %.2f×): %s", jpg, p50[jpg].Round(10*time.Microsecond), png,
		p50[png].Round(10*time.Microsecond), float64(p50[jpg])/float64(p50[png]), float64(cpu[jpg])/float64(cpu[png]),
		verdict(p50[jpg] <= p50[png]))
	line("goal: %s p50 %s ≤ 1.2× %s (%.2f×; CPU %.2f×): %s", marks, p50[marks].Round(10*time.Microsecond), jpg,
		float64(p50[marks])/float64(p50[jpg]), float64(cpu[marks])/float64(cpu[jpg]),
		verdict(float64(p50[marks]) <= 1.2*float64(p50[jpg])))
	return nil
}
