package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/identity"
	"phonefleet/projections"
)

func init() {
	addSection("identity", 40, func(ctx context.Context, b *bench, o options) error { return b.identity(ctx, o) })
}

// identity measures API key verification, the work behind every request
// with a key: an unknown key id and a wrong secret must cost the same (spec
// 5.6.4), so neither timing tells an attacker which ids exist. Cases run
// interleaved, round-robin, so drift in the machine hits each alike. The
// baseline is the key store's lookup alone (the same SQL by the same pool),
// which bounds what verification can cost.
func (b *bench) identity(ctx context.Context, o options) error {
	header("API key verification: unknown key id vs wrong secret (same answer, same work)")
	db, err := b.newDB(ctx)
	if err != nil {
		return err
	}
	store := eventstore.New(db.pool, eventstore.WithUpcaster(domain.Events))
	runner, err := projections.NewRunner(store, quiet, []projections.Projection{projections.APIKeys{}})
	if err != nil {
		return err
	}
	if err := runner.Ensure(ctx); err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go runner.Run(rctx)

	hasher, err := identity.NewHasher([]byte(strings.Repeat("b", identity.PepperLen)))
	if err != nil {
		return err
	}
	// Some keys, so the lookup is an index probe in a populated table.
	var good identity.APIKeyToken
	var last eventstore.Appended
	now := time.Now().UTC()
	for i := 0; i < 1000; i++ {
		tok, err := identity.NewAPIKeyToken()
		if err != nil {
			return err
		}
		good = tok
		name, version, data, err := domain.Events.Encode(domain.APIKeyMinted{KeyID: tok.KeyID, OrgID: "org_bench",
			Scopes: []domain.Scope{domain.ScopeDevicesRead}, MintedBy: "bench", MintedByRole: domain.RoleAdmin,
			SecretHash: hasher.Hash(tok.Secret), MintedAt: now, ExpiresAt: now.Add(24 * time.Hour)})
		if err != nil {
			return err
		}
		if last, err = store.Append(ctx, domain.APIKeyStream(tok.KeyID), eventstore.NoStream,
			eventstore.NewEvent{Type: name, SchemaVersion: version, OrgID: "org_bench", Data: data}); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := runner.WaitFor(wctx, projections.APIKeysName, last); err != nil {
		return err
	}
	reader := projections.APIKeyReader{DB: db.pool}
	v := &identity.KeyVerifier{Lookup: reader, Hasher: hasher}
	wrong, err := identity.NewSecretFor(good.KeyID)
	if err != nil {
		return err
	}
	unknown, err := identity.NewAPIKeyToken()
	if err != nil {
		return err
	}
	cases := []struct {
		name string
		run  func() error
	}{
		{"unknown key id", func() error { _, err := v.Verify(ctx, unknown.Token); return want401(err) }},
		{"wrong secret", func() error { _, err := v.Verify(ctx, wrong.Token); return want401(err) }},
		{"valid key", func() error { _, err := v.Verify(ctx, good.Token); return err }},
		{"baseline: lookup, found", func() error { _, _, err := reader.Lookup(ctx, good.KeyID); return err }},
		{"baseline: lookup, missing", func() error { _, _, err := reader.Lookup(ctx, unknown.KeyID); return err }},
	}
	samples := make([][]time.Duration, len(cases))
	rounds := 0
	deadline := time.Now().Add(max(o.cell, time.Second) * 2)
	for time.Now().Before(deadline) {
		for i, c := range cases {
			t0 := time.Now()
			if err := c.run(); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			samples[i] = append(samples[i], time.Since(t0))
		}
		rounds++
	}
	line("%-28s %10s %10s %10s %10s", "case", "mean", "p50", "p90", "p99")
	means := make([]time.Duration, len(cases))
	for i, c := range cases {
		var sum time.Duration
		for _, d := range samples[i] {
			sum += d
		}
		means[i] = sum / time.Duration(len(samples[i]))
		line("%-28s %10s %10s %10s %10s", c.name, means[i].Round(time.Microsecond/10), percentile(samples[i], 0.5).Round(time.Microsecond/10),
			percentile(samples[i], 0.9).Round(time.Microsecond/10), percentile(samples[i], 0.99).Round(time.Microsecond/10))
	}
	p50u, p50w := percentile(samples[0], 0.5), percentile(samples[1], 0.5)
	diff := p50u - p50w
	if diff < 0 {
		diff = -diff
	}
	lookupGap := percentile(samples[3], 0.5) - percentile(samples[4], 0.5)
	if lookupGap < 0 {
		lookupGap = -lookupGap
	}
	line("%d rounds; unknown id vs wrong secret: p50 differ by %s (%.1f%%); the lookup alone, found vs missing, by %s",
		rounds, diff.Round(time.Microsecond/10), 100*float64(diff)/float64(p50w), lookupGap.Round(time.Microsecond/10))
	line("target: the two refusals within noise of each other — %s", verdict(diff <= max(lookupGap, 20*time.Microsecond) || float64(diff) <= 0.05*float64(p50w)))
	return nil
}

func want401(err error) error {
	if domain.ErrorCode(err) != domain.CodeUnauthorized {
		return fmt.Errorf("got %v; want 401 unknown_key", err)
	}
	return nil
}
