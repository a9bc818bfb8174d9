package eventstore_test

import (
	"context"
	"encoding/json"
	"testing"

	"phonefleet/eventstore"
	"phonefleet/testutil"
)

// countCodec decodes every event as its data's n.
type countCodec struct{}

func (countCodec) Encode(n int) (string, int, json.RawMessage, error) {
	b, err := json.Marshal(map[string]int{"n": n})
	return "counted", 1, b, err
}

func (countCodec) Decode(_ string, _ int, data json.RawMessage) (int, error) {
	var body struct{ N int }
	err := json.Unmarshal(data, &body)
	return body.N, err
}

// TestLoadManyFoldsEachStream: LoadStreams groups several streams' events
// by stream, in version order; LoadMany folds each id as Load would,
// leaving an id with an empty stream at its new state and version 0.
func TestLoadManyFoldsEachStream(t *testing.T) {
	ctx := context.Background()
	s := eventstore.New(testutil.FreshPool(t))
	for stream, ns := range map[string][]string{"sum-a": {`{"n":1}`, `{"n":2}`, `{"n":3}`}, "sum-b": {`{"n":10}`}, "sum-other": {`{"n":100}`}} {
		var evs []eventstore.NewEvent
		for _, n := range ns {
			evs = append(evs, ev("counted", n))
		}
		if _, err := s.Append(ctx, stream, eventstore.NoStream, evs...); err != nil {
			t.Fatal(err)
		}
	}
	byStream, err := s.LoadStreams(ctx, []string{"sum-b", "sum-a", "sum-none"})
	if err != nil {
		t.Fatal(err)
	}
	if len(byStream) != 2 || len(byStream["sum-a"]) != 3 || byStream["sum-a"][2].StreamVersion != 3 || len(byStream["sum-b"]) != 1 {
		t.Fatalf("got %v; want sum-a's three events in order and sum-b's one, nothing else", byStream)
	}
	repo := eventstore.NewRepository(s, eventstore.Aggregate[int, int]{
		Stream: func(id string) string { return "sum-" + id },
		Codec:  countCodec{},
		New:    func(string) int { return 0 },
		Apply:  func(sum *int, n int, _ eventstore.Recorded) { *sum += n },
		OrgID:  func(*int) string { return "org_test" },
	})
	sums, versions, err := repo.LoadMany(ctx, []string{"a", "b", "none"})
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string][2]int64{"a": {6, 3}, "b": {10, 1}, "none": {0, 0}} {
		if int64(sums[id]) != want[0] || versions[id] != want[1] {
			t.Errorf("%s: got sum %d at version %d; want %d at %d", id, sums[id], versions[id], want[0], want[1])
		}
	}
}
