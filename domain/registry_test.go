package domain

import (
	"encoding/json"
	"strings"
	"testing"
)

type pingV1 struct {
	N int `json:"n"`
}

func (pingV1) EventName() string { return "test.ping" }

func TestRegistryRefusesIncompleteDefinitions(t *testing.T) {
	for _, tc := range []struct {
		name string
		defs []EventDef
		want string
	}{
		{"duplicate name", []EventDef{Def[pingV1](1, nil), Def[pingV1](1, nil)}, "defined twice"},
		{"missing upcaster", []EventDef{Def[pingV1](3, map[int]UpcastFunc{1: func(d json.RawMessage) (json.RawMessage, error) { return d, nil }})}, "no upcaster from version 2"},
		{"version zero", []EventDef{Def[pingV1](0, nil)}, "version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewRegistry(tc.defs...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestRegistryEncodeDecodeRoundTrip(t *testing.T) {
	r, err := NewRegistry(Def[pingV1](1, nil))
	if err != nil {
		t.Fatal(err)
	}
	name, v, data, err := r.Encode(pingV1{N: 7})
	if err != nil || name != "test.ping" || v != 1 {
		t.Fatalf("got %s v%d (%v); want test.ping v1", name, v, err)
	}
	e, err := r.Decode(name, v, data)
	if err != nil || e.(pingV1).N != 7 {
		t.Fatalf("got %+v (%v); want n=7", e, err)
	}
	if _, _, err := r.Upcast("test.ping", 2, data); err == nil {
		t.Fatal("got success for a schema version newer than the binary; want an error")
	}
	if v, d, err := r.Upcast("unknown.event", 4, data); err != nil || v != 4 || string(d) != string(data) {
		t.Fatalf("unknown events must pass through unchanged; got v%d %s %v", v, d, err)
	}
}

func TestEveryRegisteredEventEncodes(t *testing.T) {
	for _, name := range Events.Names() {
		d, _ := Events.Lookup(name)
		if !strings.Contains(name, ".") || d.Version < 1 {
			t.Errorf("event %q: want a dotted stable name and a version", name)
		}
	}
}

func TestNewIDShape(t *testing.T) {
	id := NewID(PrefixDevice)
	if !HasPrefix(id, PrefixDevice) || HasPrefix(id, PrefixLease) || HasPrefix("dev_xyz", PrefixDevice) {
		t.Fatalf("got %q; want dev_ + 32 hex digits recognised only as a device id", id)
	}
	if a, b := NewID("x"), NewID("x"); a >= b {
		t.Fatalf("ids not time-ordered: %s then %s", a, b)
	}
}
