package eventstore

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// SetRelayCoalesce sets the least time between two NOTIFYs of a relay for
// a test, and returns how to restore it. Call it before any relay starts
// and restore it once they have ended.
func SetRelayCoalesce(d time.Duration) (restore func()) {
	old := relayCoalesce
	relayCoalesce = d
	return func() { relayCoalesce = old }
}

// SendShared writes units in one batch as a group commit's flush does
// (without its retry of each unit alone when the batch fails).
func SendShared(ctx context.Context, s *Store, units ...*Unit) ([]Committed, error) {
	ps, err := prepareAll(ctx, s, units)
	if err != nil {
		return nil, err
	}
	return s.send(ctx, ps)
}

// SharedStatements lays units out as the statements of one shared batch:
// each statement as its ops ("unit.op"), joined with "+".
func SharedStatements(ctx context.Context, s *Store, units ...*Unit) (string, error) {
	ps, err := prepareAll(ctx, s, units)
	if err != nil {
		return "", err
	}
	var out []string
	for _, st := range batchStatements(ps) {
		var ops []string
		for _, r := range st {
			ops = append(ops, fmt.Sprintf("%d.%d", r.unit, r.op))
		}
		out = append(out, strings.Join(ops, "+"))
	}
	return strings.Join(out, " "), nil
}

func prepareAll(ctx context.Context, s *Store, units []*Unit) ([]*prepared, error) {
	ps := make([]*prepared, len(units))
	for i, u := range units {
		p, err := s.prepare(ctx, u)
		if err != nil {
			return nil, err
		}
		ps[i] = p
	}
	return ps, nil
}
