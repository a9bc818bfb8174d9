package httpapi

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"slices"
	"sort"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// seedReceipts records n requested actions, all at the same instant (so
// their receipts share one timestamp to the microsecond), by two people and
// two API keys, and waits for the receipts read model.
func seedReceipts(t *testing.T, env *fleettest.Env, n int, at time.Time) map[string]domain.Actor {
	t.Helper()
	actors := []domain.Actor{{Kind: "user", ID: "user_ann"}, {Kind: "user", ID: "user_bob"},
		{Kind: "api_key", ID: "key_one"}, {Kind: "api_key", ID: "key_two"}}
	rng := rand.New(rand.NewPCG(1, 2))
	byKey := map[string]domain.Actor{}
	for i := 0; i < n; i++ {
		// Keys in no particular order, some sharing long prefixes.
		key := fmt.Sprintf("k-%03d-%08x", rng.IntN(50), rng.Uint32())
		actor := actors[rng.IntN(len(actors))]
		byKey[key] = actor
		req := domain.ActionRequested{ActionID: domain.NewID(domain.PrefixAction), DeviceID: env.DeviceIDs[0], IdempotencyKey: key,
			Action: domain.ActionTap, Arguments: []byte(`{"x":1,"y":1}`), Actor: actor, LeaseID: "lse_x", FencingToken: 1, RequestedAt: at}
		name, version, data, err := domain.Events.Encode(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.Store.Append(testutil.Context(t), domain.ActionStream(req.ActionID), eventstore.NoStream, eventstore.NewEvent{
			Type: name, SchemaVersion: version, OrgID: env.OrgID, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	env.Settle(t)
	return byKey
}

// TestReceiptsPageWithoutSkipOrRepeat pages through 1,000 receipts whose
// timestamps are equal to the microsecond: every receipt appears once, in
// (timestamp, key) order newest first, whatever the page size.
func TestReceiptsPageWithoutSkipOrRepeat(t *testing.T) {
	fs := newFleetServer(t, fleettest.Options{Devices: 1})
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	byKey := seedReceipts(t, fs.env, 1000, at)
	all := make([]string, 0, len(byKey))
	for k := range byKey {
		all = append(all, k)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(all)))

	type page struct {
		Receipts []struct {
			IdempotencyKey string            `json:"idempotencyKey"`
			Timestamp      time.Time         `json:"timestamp"`
			Actor          map[string]string `json:"actor"`
		} `json:"receipts"`
		NextBefore    string `json:"nextBefore"`
		NextBeforeKey string `json:"nextBeforeKey"`
	}
	walk := func(t *testing.T, query url.Values) []string {
		t.Helper()
		var got []string
		for pages := 0; ; pages++ {
			if pages > 2000 {
				t.Fatal("paging does not end")
			}
			_, b := fs.do(t, "GET", "/v1/receipts?"+query.Encode(), "", 200)
			p := decodeInto[page](t, b)
			for _, r := range p.Receipts {
				if !r.Timestamp.Equal(at) {
					t.Fatalf("got timestamp %s; want %s", r.Timestamp, at)
				}
				got = append(got, r.IdempotencyKey)
			}
			if p.NextBefore == "" {
				return got
			}
			if want := "2026-03-01T12:00:00.123456Z"; p.NextBefore != want {
				t.Fatalf("got nextBefore %q; want %q (microseconds, UTC)", p.NextBefore, want)
			}
			query.Set("before", p.NextBefore)
			query.Set("beforeKey", p.NextBeforeKey)
		}
	}
	for _, limit := range []int{1, 7, 37, 50, 200, 999} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got := walk(t, url.Values{"limit": {fmt.Sprint(limit)}})
			if !slices.Equal(got, all) {
				t.Fatalf("got %d keys (%d distinct); want all %d once, newest first", len(got), len(slices.Compact(slices.Sorted(slices.Values(got)))), len(all))
			}
		})
	}
	t.Run("default limit is 50", func(t *testing.T) {
		_, b := fs.do(t, "GET", "/v1/receipts", "", 200)
		if got := len(decodeInto[page](t, b).Receipts); got != 50 {
			t.Errorf("got %d receipts; want 50", got)
		}
	})
	t.Run("limit is clamped to 200", func(t *testing.T) {
		_, b := fs.do(t, "GET", "/v1/receipts?limit=5000", "", 200)
		if got := len(decodeInto[page](t, b).Receipts); got != 200 {
			t.Errorf("got %d receipts; want 200", got)
		}
	})
	t.Run("before alone is a strict time bound", func(t *testing.T) {
		_, b := fs.do(t, "GET", "/v1/receipts?before="+url.QueryEscape("2026-03-01T12:00:00.123456Z"), "", 200)
		if got := len(decodeInto[page](t, b).Receipts); got != 0 {
			t.Errorf("got %d receipts strictly before their own timestamp; want 0", got)
		}
		_, b = fs.do(t, "GET", "/v1/receipts?before="+url.QueryEscape("2026-03-01T12:00:00.123457Z"), "", 200)
		if got := len(decodeInto[page](t, b).Receipts); got != 50 {
			t.Errorf("got %d receipts one microsecond later; want a full page of 50", got)
		}
	})
	for _, f := range []struct{ param, kind, id string }{
		{"actorUserId", "user", "user_ann"}, {"actorApiKeyId", "api_key", "key_two"},
	} {
		t.Run("filter "+f.param, func(t *testing.T) {
			want := 0
			for _, a := range byKey {
				if a.Kind == f.kind && a.ID == f.id {
					want++
				}
			}
			got := walk(t, url.Values{f.param: {f.id}, "limit": {"13"}})
			if len(got) != want {
				t.Fatalf("got %d receipts; want %d", len(got), want)
			}
			for _, k := range got {
				if a := byKey[k]; a.Kind != f.kind || a.ID != f.id {
					t.Errorf("receipt %s is by %v; want %s:%s", k, a, f.kind, f.id)
				}
			}
		})
	}
	t.Run("both actor filters are refused", func(t *testing.T) {
		_, b := fs.do(t, "GET", "/v1/receipts?actorUserId=user_ann&actorApiKeyId=key_one", "", 400)
		if got := errorCode(t, b); got != "invalid_argument" {
			t.Errorf("got %s; want invalid_argument", got)
		}
	})
}

// TestReceiptKeysWithReservedCharacters walks idempotency keys holding
// characters a URL path reserves or encodes (/, %, ?, #, spaces, dot
// segments): each action's receipt is read and reviewed by its key sent
// percent-encoded, as a client sends it, and each answer is the
// contract's. A key the service does not accept (not printable ASCII) is
// refused on the action and not found on the read, in the one envelope.
func TestReceiptKeysWithReservedCharacters(t *testing.T) {
	fs := newFleetServer(t, fleettest.Options{Devices: 1})
	dev := fs.env.DeviceIDs[0]
	_, b := fs.do(t, "POST", "/v1/devices/"+dev+"/lease", `{"ttlSeconds":600}`, 201)
	var lease struct{ LeaseID string }
	if err := json.Unmarshal(b, &lease); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"my/key-1", "run_x/step-1/0", "100%", "50%25", "what?", "a#b", "two words",
		"a/../b", "./x", "trailing/", "/leading", "a//b", `q"uote\`, "~!*'();:@&=+$,[]"} {
		t.Run(key, func(t *testing.T) {
			body, _ := json.Marshal(map[string]any{"action": "key", "arguments": map[string]string{"key": "HOME"},
				"idempotencyKey": key, "leaseId": lease.LeaseID})
			fs.do(t, "POST", "/v1/devices/"+dev+"/actions", string(body), 200)
			path := "/v1/receipts/" + url.PathEscape(key)
			_, got := fs.do(t, "GET", path, "", 200)
			var rc struct{ IdempotencyKey, State string }
			if err := json.Unmarshal(got, &rc); err != nil || rc.IdempotencyKey != key || rc.State != domain.ReceiptCommitted {
				t.Fatalf("GET %s: got %s (%v); want the committed receipt of %q", path, got, err, key)
			}
			_, got = fs.do(t, "POST", path+"/reviewed", `{"note":"seen"}`, 200)
			if err := json.Unmarshal(got, &rc); err != nil || rc.IdempotencyKey != key {
				t.Fatalf("POST %s/reviewed: got %s (%v); want the receipt of %q", path, got, err, key)
			}
		})
	}
	for _, key := range []string{"café", "emoji-🙂", "tab\tkey"} {
		t.Run(key, func(t *testing.T) {
			body, _ := json.Marshal(map[string]any{"action": "key", "arguments": map[string]string{"key": "HOME"},
				"idempotencyKey": key, "leaseId": lease.LeaseID})
			_, got := fs.do(t, "POST", "/v1/devices/"+dev+"/actions", string(body), 400)
			if code := errorCode(t, got); code != string(domain.CodeInvalidArgument) {
				t.Fatalf("action with key %q: got %s; want invalid_argument", key, got)
			}
			_, got = fs.do(t, "GET", "/v1/receipts/"+url.PathEscape(key), "", 404)
			if code := errorCode(t, got); code != string(domain.CodeReceiptNotFound) {
				t.Fatalf("GET key %q: got %s; want receipt_not_found", key, got)
			}
		})
	}
}
