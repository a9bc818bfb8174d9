package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"phonefleet/domain"
	"phonefleet/internal/backends"
	"phonefleet/internal/sim"
)

func init() {
	addSection("observe", 65, func(ctx context.Context, b *bench, o options) error { return b.observeBudget(ctx, o.cell) })
}

// observeBudget measures what one observation costs an agent, per budget:
// the bytes it receives (picture and/or compact elements as JSON) and the
// time the sim backend takes to produce it, on a Pixel 7 (1080×2400)
// cycling through home, Settings and Notes, so no budget is served from the
// phone's cached PNG. The baseline is the full-size PNG.
func (b *bench) observeBudget(ctx context.Context, d time.Duration) error {
	header("Observation budget on a sim phone (Pixel 7, 1080×2400): bytes an agent receives and time to produce them")
	line("%-26s %12s %10s %10s %10s  %s", "budget", "bytes", "p50", "p99", "×bytes", "vs PNG full size (baseline)")
	interactive := func(root domain.UIElement) []domain.Mark {
		els := domain.CompactElements(root, true)
		out := make([]domain.Mark, len(els))
		for i, e := range els {
			out[i] = domain.Mark{N: i + 1, Ref: e.Ref, Bounds: e.Bounds}
		}
		return out
	}
	budgets := []struct {
		name     string
		opts     domain.ObserveOptions
		elements bool
	}{
		{"PNG full size (baseline)", domain.ObserveOptions{Image: true}, false},
		{"PNG at 768 px", domain.ObserveOptions{Image: true, MaxWidth: 768}, false},
		{"JPEG q70 at 768 px", domain.ObserveOptions{Image: true, MaxWidth: 768, Format: domain.ImageJPEG}, false},
		{"elements only (interactive)", domain.ObserveOptions{Snapshot: true}, true},
		{"set-of-marks PNG full size", domain.ObserveOptions{Image: true, Marks: interactive}, true},
		{"set-of-marks JPEG at 768 px", domain.ObserveOptions{Image: true, MaxWidth: 768, Format: domain.ImageJPEG, Marks: interactive}, true},
	}
	per := max(d/time.Duration(len(budgets)), 500*time.Millisecond)
	var baseline float64
	p50 := map[string]time.Duration{}
	for _, bud := range budgets {
		p, err := sim.New(sim.DefaultModel, "BENCH-OBSERVE")
		if err != nil {
			return err
		}
		dev := backends.NewSimDevice(p)
		screens := []func() error{
			func() error { _, err := p.PressKey("HOME"); return err },
			func() error { _, err := p.OpenApp(sim.PkgSettings); return err },
			func() error { _, err := p.OpenApp(sim.PkgNotes); return err },
		}
		var took []time.Duration
		var bytes int64
		end := time.Now().Add(per)
		for i := 0; time.Now().Before(end) || len(took) < 10; i++ {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err := screens[i%len(screens)](); err != nil {
				return err
			}
			start := time.Now()
			obs, err := dev.Observe(ctx, bud.opts)
			if err != nil {
				return err
			}
			took = append(took, time.Since(start))
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
			bytes += int64(size)
		}
		p50[bud.name] = percentile(took, 0.5)
		avg := float64(bytes) / float64(len(took))
		if baseline == 0 {
			baseline = avg
		}
		line("%-26s %12.0f %10s %10s %9.3f×  %s", bud.name, avg, percentile(took, 0.5).Round(10*time.Microsecond),
			percentile(took, 0.99).Round(10*time.Microsecond), avg/baseline, fmt.Sprintf("%d observations", len(took)))
	}
	// Issue 28: the budgeted picture drawn at its size costs no more than
	// the full-size PNG, and its marks little more than it.
	png, jpg, marks := p50["PNG full size (baseline)"], p50["JPEG q70 at 768 px"], p50["set-of-marks JPEG at 768 px"]
	line("goal: JPEG q70 at 768 px p50 %s ≤ PNG full size p50 %s (%.2f×): %s", jpg.Round(10*time.Microsecond),
		png.Round(10*time.Microsecond), float64(jpg)/float64(png), verdict(jpg <= png))
	line("goal: set-of-marks JPEG at 768 px p50 %s ≤ 1.2× JPEG q70 at 768 px (%.2f×): %s", marks.Round(10*time.Microsecond),
		float64(marks)/float64(jpg), verdict(float64(marks) <= 1.2*float64(jpg)))
	return nil
}
