package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/receiptchain"
	"phonefleet/testutil"
	"phonefleet/testutil/fleettest"
)

// TestReceiptsExport streams an organisation's chain (more entries than
// one page of the export reads), checks the answer and every line against
// the contract, and verifies the export offline: every receipt of the
// organisation, each change one entry, none of another organisation's.
func TestReceiptsExport(t *testing.T) {
	fs := newFleetServer(t, fleettest.Options{Devices: 1})
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)
	// Another organisation's receipts, before and after ours.
	other := func(key string) {
		req := domain.ActionRequested{ActionID: domain.NewID(domain.PrefixAction), DeviceID: "dev_elsewhere", IdempotencyKey: key,
			Action: domain.ActionTap, Arguments: []byte(`{"x":1,"y":1}`), Actor: domain.Actor{Kind: "user", ID: "user_eve"},
			LeaseID: "lse_x", FencingToken: 1, RequestedAt: at}
		name, version, data, err := domain.Events.Encode(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fs.env.Store.Append(testutil.Context(t), domain.ActionStream(req.ActionID), eventstore.NoStream,
			eventstore.NewEvent{Type: name, SchemaVersion: version, OrgID: "org_elsewhere", Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	other("elsewhere-1")
	byKey := seedReceipts(t, fs.env, 1000, at)
	other("elsewhere-2")
	if len(byKey) != 1000 {
		t.Fatalf("seeded %d receipts; want 1,000", len(byKey))
	}
	// One action carried out, and reviewed: three entries.
	dev := fs.env.DeviceIDs[0]
	_, b := fs.do(t, "POST", "/v1/devices/"+dev+"/lease", "", 201)
	leaseID := decodeInto[map[string]any](t, b)["leaseId"].(string)
	const reviewed = "real-1"
	fs.do(t, "POST", "/v1/devices/"+dev+"/actions", `{"action":"key","arguments":{"key":"HOME"},"idempotencyKey":"`+reviewed+`","leaseId":"`+leaseID+`"}`, 200)
	fs.do(t, "POST", "/v1/receipts/"+reviewed+"/reviewed", `{"note":"checked"}`, 200)

	resp, body := fs.do(t, "GET", "/v1/receipts/export", "", 200)
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("got Content-Type %q; want application/x-ndjson", ct)
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	n := 0
	var last []byte
	for sc.Scan() {
		n++
		last = append(last[:0], sc.Bytes()...)
		if bytes.HasPrefix(last, []byte(`{"end":`)) {
			fs.v.CheckSchema(t, "ReceiptExportEnd", last)
		} else {
			fs.v.CheckSchema(t, "ReceiptChainEntry", last)
		}
		if bytes.Contains(last, []byte("elsewhere")) {
			t.Fatalf("line %d: %s; want no receipt of another organisation", n, last)
		}
	}
	if n != 1004 || !bytes.HasPrefix(last, []byte(`{"end":`)) {
		t.Fatalf("got %d lines ending %s; want 1,003 entries and the end line", n, last)
	}
	rep, err := receiptchain.Verify(bytes.NewReader(body), receiptchain.Options{})
	if err != nil {
		t.Fatalf("verify the export: %v", err)
	}
	if rep.Entries != 1003 || rep.Receipts != 1001 || rep.OrgID != fs.env.OrgID {
		t.Errorf("got %+v; want 1,003 entries of 1,001 receipts of %s", rep, fs.env.OrgID)
	}

	// The real export, tampered with: each harm is named at its line.
	lines := bytes.Split(bytes.TrimSuffix(body, []byte("\n")), []byte("\n"))
	keyAt := func(i int) string {
		var e receiptchain.Entry
		if err := json.Unmarshal(lines[i], &e); err != nil {
			t.Fatal(err)
		}
		var r struct {
			IdempotencyKey string `json:"idempotencyKey"`
		}
		_ = json.Unmarshal(e.Receipt, &r)
		return r.IdempotencyKey
	}
	for _, tc := range []struct {
		name   string
		tamper func(l [][]byte) [][]byte
		line   int
		key    string
		kind   string
	}{
		{"one byte altered", func(l [][]byte) [][]byte {
			l[9] = bytes.Replace(l[9], []byte(`"x":1`), []byte(`"x":2`), 1)
			return l
		}, 10, keyAt(9), receiptchain.Altered},
		{"one line dropped", func(l [][]byte) [][]byte { return append(l[:600:600], l[601:]...) }, 601, keyAt(600), receiptchain.Removed},
		{"two lines swapped", func(l [][]byte) [][]byte { l[20], l[30] = l[30], l[20]; return l }, 21, keyAt(30), receiptchain.Reordered},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := tc.tamper(append([][]byte(nil), lines...))
			_, err := receiptchain.Verify(bytes.NewReader(bytes.Join(ls, []byte("\n"))), receiptchain.Options{})
			var p *receiptchain.Problem
			if !errors.As(err, &p) || p.Line != tc.line || p.Key != tc.key || p.Kind != tc.kind {
				t.Errorf("got %v; want line %d, receipt %q %s", err, tc.line, tc.key, tc.kind)
			}
		})
	}

	// A second export is the same chain, extended by what happened since.
	fs.do(t, "POST", "/v1/receipts/"+reviewed+"/reviewed", `{"note":"again"}`, 200)
	_, again := fs.do(t, "GET", "/v1/receipts/export", "", 200)
	prefix := body[:bytes.LastIndex(body[:len(body)-1], []byte("\n"))+1] // without the end line
	if !bytes.HasPrefix(again, prefix) {
		t.Error("the second export does not begin with the first one's entries")
	}
	if rep2, err := receiptchain.Verify(bytes.NewReader(again), receiptchain.Options{}); err != nil || rep2.Entries != 1004 {
		t.Errorf("second export: got %+v, %v; want 1,004 entries verified", rep2, err)
	}
}

// TestReceiptsExportRefusals: OAuth apps and keys narrowed to a device
// subset may not export; a caller without devices:read may not either.
func TestReceiptsExportRefusals(t *testing.T) {
	fs := newFleetServer(t, fleettest.Options{Devices: 1})
	base := fs.env.Auth
	app := base
	app.Kind, app.UserID = domain.PrincipalApp, "user_app"
	subset := base
	subset.Kind, subset.APIKeyID, subset.Devices = domain.PrincipalAPIKey, "key_subset", []string{fs.env.DeviceIDs[0]}
	noRead := base
	noRead.Scopes = []domain.Scope{domain.ScopeDevicesAct}
	for _, tc := range []struct {
		name string
		auth domain.Auth
		code domain.Code
	}{
		{"an OAuth app", app, domain.CodePermissionDenied},
		{"a key narrowed to some devices", subset, domain.CodePermissionDenied},
		{"no devices:read", noRead, domain.CodePermissionDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fs.s.app.Fleet.ExportReceipts.Handle(testutil.Context(t), fleet.ExportReceipts{Auth: tc.auth})
			var de *domain.Error
			if !errors.As(err, &de) || de.Code != tc.code {
				t.Errorf("got %v; want %s", err, tc.code)
			}
		})
	}
}
