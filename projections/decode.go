package projections

import (
	"context"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// A group's batch hands the same events to each of its members, and most
// members decode the events they read (an action's outcome is decoded by
// the receipts, the receipt chain, the devices, the runs and the frame
// index): the batch decodes each event once, for all of them. The memo
// lives for one batch, in the batch's context, and is used from the
// batch's goroutine only; a projection outside a group decodes as before.
// What decodeEvent returns is shared: an Apply must not write through it.
type decodeMemo map[int64]domain.Event

type decodeMemoKey struct{}

// withDecodeMemo gives a batch's context a memo of its own.
func withDecodeMemo(ctx context.Context) context.Context {
	return context.WithValue(ctx, decodeMemoKey{}, decodeMemo{})
}

// sharedBatch reports whether ctx is a group batch's, whose members share
// what decodeEvent decodes.
func sharedBatch(ctx context.Context) bool {
	_, ok := ctx.Value(decodeMemoKey{}).(decodeMemo)
	return ok
}

// decodeEvent decodes e, once per batch when ctx carries a batch's memo.
func decodeEvent(ctx context.Context, e eventstore.Event) (domain.Event, error) {
	memo, _ := ctx.Value(decodeMemoKey{}).(decodeMemo)
	if ev, ok := memo[e.Position]; ok {
		return ev, nil
	}
	ev, err := domain.Events.Decode(e.Type, e.SchemaVersion, e.Data)
	if err == nil && memo != nil {
		memo[e.Position] = ev
	}
	return ev, err
}
