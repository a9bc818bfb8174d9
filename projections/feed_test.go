package projections

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"phonefleet/eventstore"
)

func sampleBatch() []eventstore.Event {
	return []eventstore.Event{
		{Position: 1, TransactionID: 700, ID: uuid.Must(uuid.NewV7()), StreamID: "dev-1", StreamVersion: 1,
			Type: "device.registered", SchemaVersion: 1, OrgID: "org_a", Data: json.RawMessage(`{"name":"Pixel"}`),
			Metadata: json.RawMessage(`{"actorKind":"system"}`), OccurredAt: time.UnixMicro(1_800_000_000_123_456).UTC()},
		{Position: 2, TransactionID: 1 << 40, StreamID: "s", StreamVersion: 9, Type: "x", SchemaVersion: 3,
			Data: json.RawMessage(`{}`), Metadata: json.RawMessage(`{}`), OccurredAt: time.UnixMicro(0).UTC()},
	}
}

func TestBatchCodecRoundTrip(t *testing.T) {
	in := sampleBatch()
	h := batchHeader{afterTx: 1 << 39, afterPos: 3, lastTx: 1 << 40, lastPos: 9, scanned: 7}
	gotH, out, err := decodeBatch(encodeBatch(h, in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) || gotH != h {
		t.Fatalf("got %+v %+v; want %+v %+v", gotH, out, h, in)
	}
}

// FuzzDecodeBatch: arbitrary bytes never panic, and whatever decodes
// re-encodes to the same bytes' meaning.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(encodeBatch(batchHeader{lastTx: 5, lastPos: 2, scanned: 2}, sampleBatch()))
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, evs, err := decodeBatch(b)
		if err != nil {
			return
		}
		_, again, err := decodeBatch(encodeBatch(h, evs))
		if err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if len(again) != len(evs) {
			t.Fatalf("got %d events after a round trip; want %d", len(again), len(evs))
		}
	})
}
