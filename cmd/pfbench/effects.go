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
	addSection("effects", 66, func(ctx context.Context, b *bench, o options) error { return b.actionChecks(ctx, o.cell) })
}

// actionChecks measures what the executor adds to one action on a sim
// phone (Pixel 7) to bind a tap to its element and to judge its effect,
// beside the action as it was before either (observe, tap by coordinates,
// observe: the baseline, measured in the same loop). Re-resolution is the
// tree taken with the before picture, read and searched for the element;
// the effect check is the tree taken with the after picture and both
// sides compared. Goals: re-resolution ≤ 1 ms p50, effect ≤ 2 ms p50.
func (b *bench) actionChecks(ctx context.Context, d time.Duration) error {
	header("Element-bound taps and effect checks on a sim phone (Pixel 7): overhead per action vs the plain action")
	p, err := sim.New(sim.DefaultModel, "BENCH-EFFECTS")
	if err != nil {
		return err
	}
	dev := backends.NewSimDevice(p)
	if _, err := p.OpenApp(sim.PkgSettings); err != nil {
		return err
	}
	obs, err := dev.Observe(ctx, domain.ObserveOptions{Snapshot: true})
	if err != nil {
		return err
	}
	var root domain.UIElement
	if err := json.Unmarshal(obs.Snapshot, &root); err != nil {
		return err
	}
	// A toggle: tapping it flips it, so every tap changes the screen and
	// the element never moves.
	var target *domain.UIElement
	for _, e := range domain.CompactElements(root, true) {
		if el, ok := root.Find(e.Ref); ok && el.Checkable && target == nil {
			target = &el
		}
	}
	if target == nil {
		return fmt.Errorf("settings shows no toggle to tap")
	}
	x, y := target.Centre()
	tap := domain.Action{Type: domain.ActionTap, X: x, Y: y}
	plain := domain.ObserveOptions{Replay: true}
	trees := domain.ObserveOptions{Replay: true, Snapshot: true}
	var base, resolve, effect []time.Duration
	end := time.Now().Add(max(d, time.Second))
	for len(base) < 50 || time.Now().Before(end) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The plain action.
		start := time.Now()
		if _, err := dev.Observe(ctx, plain); err != nil {
			return err
		}
		if _, err := dev.Act(ctx, tap); err != nil {
			return err
		}
		if _, err := dev.Observe(ctx, plain); err != nil {
			return err
		}
		base = append(base, time.Since(start))

		// What binding adds: the tree with the before picture, read and
		// searched (the plain observation above is what it replaces).
		start = time.Now()
		before, err := dev.Observe(ctx, trees)
		if err != nil {
			return err
		}
		var now domain.UIElement
		if err := json.Unmarshal(before.Snapshot, &now); err != nil {
			return err
		}
		if _, _, err := domain.ResolveBound(now, target.Ref, target); err != nil {
			return err
		}
		took := time.Since(start)
		start = time.Now()
		if _, err := dev.Observe(ctx, plain); err != nil {
			return err
		}
		resolve = append(resolve, max(0, took-time.Since(start)))
		if _, err := dev.Act(ctx, tap); err != nil {
			return err
		}

		// What the effect check adds: the tree with the after picture and
		// the comparison (beside a plain after observation).
		start = time.Now()
		after, err := dev.Observe(ctx, trees)
		if err != nil {
			return err
		}
		if e := domain.JudgeEffect(domain.SampleOf(before), domain.SampleOf(after)); e.State != domain.EffectChanged {
			return fmt.Errorf("a toggle's tap judged %s", e.State)
		}
		took = time.Since(start)
		start = time.Now()
		if _, err := dev.Observe(ctx, plain); err != nil {
			return err
		}
		effect = append(effect, max(0, took-time.Since(start)))
	}
	line("%-34s %10s %10s  %s", "", "p50", "p99", "")
	line("%-34s %10s %10s  %s", "plain action (baseline)", percentile(base, 0.5).Round(time.Microsecond),
		percentile(base, 0.99).Round(time.Microsecond), fmt.Sprintf("observe, tap, observe; %d actions", len(base)))
	r50, e50 := percentile(resolve, 0.5), percentile(effect, 0.5)
	line("%-34s %10s %10s  %s", "+ element re-resolution", r50.Round(time.Microsecond), percentile(resolve, 0.99).Round(time.Microsecond),
		fmt.Sprintf("%.2f× the plain action; goal ≤ 1 ms p50: %s", float64(r50)/float64(percentile(base, 0.5)), verdict(r50 <= time.Millisecond)))
	line("%-34s %10s %10s  %s", "+ effect check", e50.Round(time.Microsecond), percentile(effect, 0.99).Round(time.Microsecond),
		fmt.Sprintf("%.2f× the plain action; goal ≤ 2 ms p50: %s", float64(e50)/float64(percentile(base, 0.5)), verdict(e50 <= 2*time.Millisecond)))
	return nil
}
