package devices

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// hexBytes is a byte slice with a JSON form of its own: it stays in the
// result's JSON.
type hexBytes []byte

func (h hexBytes) MarshalJSON() ([]byte, error) { return json.Marshal(hex.EncodeToString(h)) }

func (h *hexBytes) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	d, err := hex.DecodeString(s)
	if len(d) == 0 {
		d = nil
	}
	*h = d
	return err
}

// shot is a result with every kind of byte field.
type shot struct {
	Width    int
	PNG      []byte
	Image    []byte
	Empty    []byte
	Snapshot json.RawMessage
	Hidden   []byte `json:"-"`
	Own      hexBytes
	Named    []byte `json:"named,omitempty"`
}

func serveOne(t *testing.T, res any, err error, raw bool) []byte {
	t.Helper()
	calls := Calls{"observe_device": func(context.Context, json.RawMessage) (any, error) { return res, err }}
	body, berr := callBody(eventstore.Metadata{RequestID: "req_1"}, map[string]int{"x": 1})
	if berr != nil {
		t.Fatal(berr)
	}
	if !raw { // as a caller of an earlier build sends it
		b, _ := json.Marshal(call{Meta: eventstore.Metadata{RequestID: "req_1"}, Cmd: json.RawMessage(`{"x":1}`)})
		body = b
	}
	return calls.Serve(context.Background(), "observe_device", body)
}

// A result's byte fields travel raw beside its JSON and come back as
// they were (nil stays nil, empty stays empty); the JSON of the rest is
// the result's; a field the JSON leaves out stays out; the holder's
// value is left as it was.
func TestARawReplyCarriesTheResultWhole(t *testing.T) {
	sent := shot{Width: 7, PNG: []byte("\x89PNG\x00\xff"), Image: nil, Empty: []byte{}, Snapshot: json.RawMessage(`{"a": [1, 2]}`),
		Hidden: []byte("never"), Own: hexBytes("own"), Named: []byte("n")}
	kept := sent
	out := serveOne(t, sent, nil, true)
	if out[0] != rawTag || out[1] != rawResult {
		t.Fatalf("reply starts %q; want the raw tag and 'r'", out[:2])
	}
	if !reflect.DeepEqual(sent, kept) {
		t.Fatalf("Serve changed the holder's result: %+v", sent)
	}
	var got shot
	werr, err := decodeReply(out, &got)
	if err != nil || werr != nil {
		t.Fatal(werr, err)
	}
	want := sent
	want.Hidden = nil
	if !reflect.DeepEqual(got, want) || got.Image != nil || got.Empty == nil {
		t.Fatalf("got %+v; want %+v", got, want)
	}
	if !bytes.Contains(out, []byte(`"6f776e"`)) || bytes.Contains(out, []byte("never")) {
		t.Fatalf("a byte type with its own JSON form travels in the JSON, a json:\"-\" field not at all: %q", out)
	}
}

// Errors travel whole in both forms; a caller of an earlier build (no
// raw in its call) gets JSON, which a caller of this build reads too.
func TestRepliesInBothFormsAnswerTheSame(t *testing.T) {
	res := shot{Width: 3, PNG: []byte{1, 2, 3}, Snapshot: json.RawMessage(`{"k":"v"}`)}
	domainErr := domain.Errorf(domain.CodeDeviceBusy, "busy").WithRetryable(true)
	for _, raw := range []bool{true, false} {
		out := serveOne(t, res, nil, raw)
		if isJSON := out[0] == '{'; isJSON == raw {
			t.Fatalf("raw %v: reply %q", raw, out)
		}
		var got shot
		if werr, err := decodeReply(out, &got); err != nil || werr != nil || !reflect.DeepEqual(got, res) {
			t.Fatalf("raw %v: got %+v (%v, %v); want %+v", raw, got, werr, err, res)
		}
		for _, e := range []error{domainErr, errNotHere, eventstore.ErrConflict} {
			out := serveOne(t, nil, e, raw)
			werr, err := decodeReply(out, &got)
			if err != nil || werr == nil {
				t.Fatalf("raw %v, %v: %v, %v", raw, e, werr, err)
			}
			if want := toWire(e); !reflect.DeepEqual(werr, want) {
				t.Fatalf("raw %v: got %+v; want %+v", raw, werr, want)
			}
		}
	}
}

// FuzzDecodeRawReply: a raw reply is read or refused with errRawReply (or
// JSON's error), never a panic; what is read, encoded again, reads the
// same.
func FuzzDecodeRawReply(f *testing.F) {
	f.Add(encodeRawReply(shot{Width: 1, PNG: []byte{9}, Empty: []byte{}, Snapshot: json.RawMessage(`[1]`)}, nil))
	f.Add(encodeRawReply(nil, errNotHere))
	f.Add([]byte{rawTag, rawResult, 2, '{', '}', 3, 'P', 'N', 'G', 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		var got shot
		werr, err := decodeRawReply(b, &got)
		if err != nil {
			if !errors.Is(err, errRawReply) {
				t.Fatalf("error %v is not errRawReply", err)
			}
			return
		}
		if werr != nil {
			return
		}
		var again shot
		if werr, err := decodeRawReply(encodeRawReply(got, nil), &again); err != nil || werr != nil {
			t.Fatalf("a reply read does not read again: %v %v", werr, err)
		}
		// A RawMessage that is not JSON is refused when encoded again.
		if json.Valid(got.Snapshot) || got.Snapshot == nil {
			if !reflect.DeepEqual(again, got) {
				t.Fatalf("read again %+v; want %+v", again, got)
			}
		}
	})
}
