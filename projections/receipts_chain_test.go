package projections_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/receiptchain"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// chainOf reads an organisation's chain as an export (entry lines, then
// the end line).
func chainOf(t *testing.T, env *fleettest.Env, org string) []byte {
	t.Helper()
	ctx := testutil.Context(t)
	head, err := projections.ChainHead(ctx, env.Pool, org)
	if err != nil {
		t.Fatal(err)
	}
	lines, _, err := projections.ChainPage(ctx, env.Pool, org, 0, head.Seq, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	end, err := receiptchain.EndLine(org, head)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, l := range lines {
		buf.WriteString(l + "\n")
	}
	buf.Write(append(end, '\n'))
	return buf.Bytes()
}

// appendAction records a requested action for org directly in the store,
// as another organisation's service would.
func appendAction(t *testing.T, env *fleettest.Env, org, key string) {
	t.Helper()
	req := domain.ActionRequested{ActionID: domain.NewID(domain.PrefixAction), DeviceID: "dev_other", IdempotencyKey: key,
		Action: domain.ActionTap, Arguments: []byte(`{"x":1,"y":1}`), Actor: domain.Actor{Kind: "user", ID: "user_other"},
		LeaseID: "lse_x", FencingToken: 1, RequestedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	name, version, data, err := domain.Events.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.Append(testutil.Context(t), domain.ActionStream(req.ActionID), eventstore.NoStream, eventstore.NewEvent{
		Type: name, SchemaVersion: version, OrgID: org, Data: data}); err != nil {
		t.Fatal(err)
	}
}

// TestReceiptChain: every change of a receipt adds one entry to its
// organisation's chain (request, outcome, review), each entry records the
// receipt as GET /v1/receipts/{key} shows it then, each receipt's record
// carries its latest hash, chains are per organisation, and the chain
// verifies offline. Rebuilding the receipts read models from position 0
// reproduces every line byte for byte.
func TestReceiptChain(t *testing.T) {
	ctx := testutil.Context(t)
	env := fleettest.Start(t, fleettest.Options{Devices: 1})
	dev := env.DeviceIDs[0]
	lease := env.Lease(t, dev).LeaseID
	const other = "org_chain_other"
	appendAction(t, env, other, "theirs-1")
	for _, a := range []struct{ key, action, args string }{
		{"c1", "key", `{"key":"HOME"}`},
		{"c2", "open_app", `{"package":"com.example.counter"}`}, // not installed: failed
		{"c3", "install_app", `{"package":"com.example.counter"}`},
	} {
		_, _ = env.Fleet.PerformAction().Handle(ctx, fleet.PerformAction{Auth: env.Auth, DeviceID: dev, Action: a.action,
			Arguments: json.RawMessage(a.args), IdempotencyKey: a.key, LeaseID: lease})
	}
	appendAction(t, env, other, "theirs-2")
	if _, err := env.Fleet.ReviewReceipt().Handle(ctx, fleet.ReviewReceipt{Auth: env.Auth, IdempotencyKey: "c1", Note: "seen"}); err != nil {
		t.Fatal(err)
	}
	env.Settle(t)

	mine := chainOf(t, env, env.OrgID)
	rep, err := receiptchain.Verify(bytes.NewReader(mine), receiptchain.Options{})
	if err != nil {
		t.Fatalf("verify our chain: %v\n%s", err, mine)
	}
	if rep.Entries != 7 || rep.Receipts != 3 || rep.OrgID != env.OrgID {
		t.Errorf("got %+v; want 7 entries (3 requests, 3 outcomes, 1 review) of 3 receipts of %s", rep, env.OrgID)
	}
	var events, keys []string
	for _, l := range bytes.Split(bytes.TrimSpace(mine), []byte("\n")) {
		var e receiptchain.Entry
		if err := json.Unmarshal(l, &e); err != nil {
			t.Fatal(err)
		}
		if e.Seq == 0 {
			continue // the end line
		}
		var r domain.Receipt
		if err := json.Unmarshal(e.Receipt, &r); err != nil {
			t.Fatal(err)
		}
		events, keys = append(events, e.Event), append(keys, r.IdempotencyKey)
		if bytes.Contains(l, []byte("theirs")) || bytes.Contains(l, []byte("lse_")) {
			t.Errorf("entry %d: %s; want no other organisation's receipt and no lease id", e.Seq, l)
		}
	}
	wantEvents := []string{"action.requested", "action.committed", "action.requested", "action.failed", "action.requested",
		"action.committed", "receipt.reviewed"}
	if !slices.Equal(events, wantEvents) || !slices.Equal(keys, []string{"c1", "c1", "c2", "c2", "c3", "c3", "c1"}) {
		t.Errorf("got events %v for keys %v; want %v for c1 c1 c2 c2 c3 c3 c1", events, keys, wantEvents)
	}
	// The last entry is the receipt as the receipts surface shows it now.
	got, err := env.App.Fleet.GetReceipt.Handle(ctx, fleet.GetReceipt{Auth: env.Auth, IdempotencyKey: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	lastLine := bytes.Split(bytes.TrimSpace(mine), []byte("\n"))[6]
	var last receiptchain.Entry
	_ = json.Unmarshal(lastLine, &last)
	want, _ := json.Marshal(got)
	if canon, _ := receiptchain.Canonical(want); !bytes.Equal(canon, last.Receipt) {
		t.Errorf("last entry's receipt:\n got %s\nwant %s (GET /v1/receipts/c1)", last.Receipt, canon)
	}
	// Each receipt's record carries the hash of its latest entry.
	if seq, hash, err := projections.ReceiptChainHash(ctx, env.Pool, env.OrgID, "c1"); err != nil || seq != 7 || hash != rep.HeadHash {
		t.Errorf("c1's record: got entry %d hash %s (%v); want entry 7 hash %s", seq, hash, err, rep.HeadHash)
	}

	// The other organisation has its own chain, starting from the genesis.
	theirs := chainOf(t, env, other)
	trep, err := receiptchain.Verify(bytes.NewReader(theirs), receiptchain.Options{})
	if err != nil || trep.Entries != 2 || trep.OrgID != other {
		t.Errorf("their chain: got %+v, %v; want 2 entries of %s", trep, err, other)
	}
	if !bytes.Contains(theirs, []byte(`"prevHash":"`+receiptchain.Genesis+`"`)) || bytes.Contains(theirs, []byte(`"c1"`)) {
		t.Errorf("their chain does not start from the genesis or holds our receipts:\n%s", theirs)
	}

	// Rebuild both receipt read models from position 0: the same bytes.
	for _, name := range []string{projections.ReceiptsName, projections.ReceiptChainName} {
		if err := env.Runner.Rebuild(ctx, name, nil); err != nil {
			t.Fatalf("rebuild %s: %v", name, err)
		}
	}
	if again := chainOf(t, env, env.OrgID); !bytes.Equal(again, mine) {
		t.Errorf("after a rebuild our chain changed:\nbefore %s\nafter  %s", mine, again)
	}
	if again := chainOf(t, env, other); !bytes.Equal(again, theirs) {
		t.Errorf("after a rebuild their chain changed:\nbefore %s\nafter  %s", theirs, again)
	}
	if seq, hash, err := projections.ReceiptChainHash(ctx, env.Pool, env.OrgID, "c1"); err != nil || seq != 7 || hash != rep.HeadHash {
		t.Errorf("c1's record after the rebuild: got entry %d hash %s (%v); want entry 7 hash %s", seq, hash, err, rep.HeadHash)
	}
}
