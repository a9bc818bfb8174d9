package projections

import (
	"context"
	"encoding/json"
	"testing"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// Within a batch's context an event is decoded once: every member is
// handed the same value (its raw arguments are the same bytes, not a copy
// decoded again). Outside one, each call decodes afresh.
func TestBatchDecodesEachEventOnce(t *testing.T) {
	name, version, data, err := domain.Events.Encode(domain.ActionRequested{ActionID: "a1", DeviceID: "d1", Action: "tap",
		Arguments: json.RawMessage(`{"x":1,"y":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	e := eventstore.Event{Position: 7, Type: name, SchemaVersion: version, Data: data}
	args := func(ctx context.Context) *byte {
		t.Helper()
		ev, err := decodeEvent(ctx, e)
		if err != nil {
			t.Fatal(err)
		}
		r, ok := ev.(domain.ActionRequested)
		if !ok || r.ActionID != "a1" || string(r.Arguments) != `{"x":1,"y":2}` {
			t.Fatalf("decoded %#v", ev)
		}
		return &r.Arguments[0]
	}
	batch := withDecodeMemo(context.Background())
	if first, second := args(batch), args(batch); first != second {
		t.Fatal("a batch decoded the same event twice")
	}
	if first, second := args(context.Background()), args(context.Background()); first == second {
		t.Fatal("decodes outside a batch shared a value")
	}
	if len(batch.Value(decodeMemoKey{}).(decodeMemo)) != 1 {
		t.Fatal("the batch's memo holds other than the one event")
	}
}
