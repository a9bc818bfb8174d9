package service

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/apitest"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/testutil"
)

// TestPoolThroughTheService runs the hosted service with its pool-returns
// worker: organisation A (given pay-as-you-go access as the payment
// webhook records it) takes pool devices through an OAuth app and its
// admin's session up to its limit (SERVICE_PAYG_DEVICE_LIMIT, 2), is then
// refused fleet_at_capacity, and after releasing one lease gets its unit
// back from the worker and can take again. B, without access, is refused
// forbidden and never sees A's devices; A's API key is refused
// permission_denied. Every answer matches the OpenAPI document.
func TestPoolThroughTheService(t *testing.T) {
	idp := identitytest.New(t)
	a, base := startHosted(t, idp)
	ctx := testutil.Context(t)
	v := apitest.FromHandler(t, a.server.Handler())
	aud := "http://tenancy.test/mcp"
	adminA := idp.Console(t, aud, "user_a", "org_a", "admin")
	adminB := idp.Console(t, aud, "user_b", "org_b", "admin")
	idp.SetRole("user_a", "org_a", "admin")
	appA := idp.App(t, aud, "user_a", "org_a", "third-party")

	call := checkedCaller(t, v, base)
	devicesOf := func(token string) []string {
		t.Helper()
		var ids []string
		for _, d := range call(token, "GET", "/v1/devices", "", http.StatusOK)["devices"].([]any) {
			ids = append(ids, d.(map[string]any)["deviceId"].(string))
		}
		return ids
	}

	// Pay-as-you-go access for A: a paid payg order on its billing account.
	order := domain.NewID(domain.PrefixOrder)
	news, err := eventstore.Encode[domain.Event](domain.Events, "org_a",
		domain.CheckoutStarted{OrgID: "org_a", OrderID: order, Choice: domain.PurchaseChoice{Sku: domain.SkuEmulator, Billing: domain.BillingPayg, Quantity: 1},
			Currency: "usd", UnitAmount: 3, RequestDigest: "test", At: time.Now().UTC()},
		domain.OrderPaid{OrderID: order, ProviderEventID: "evt_" + order, PaidAt: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Store().Append(ctx, domain.AccountStream("org_a"), eventstore.NoStream, news...); err != nil {
		t.Fatal(err)
	}

	if e := call(adminB, "POST", "/v1/devices/take", "", http.StatusForbidden)["error"].(map[string]any); e["code"] != "forbidden" {
		t.Errorf("B without access: got %v; want forbidden", e)
	}
	key := call(adminA, "POST", "/v1/api-keys", `{"name":"pool","scopes":["devices:read","devices:lease"]}`, http.StatusCreated)["token"].(string)
	if e := call(key, "POST", "/v1/devices/take", "", http.StatusForbidden)["error"].(map[string]any); e["code"] != "permission_denied" {
		t.Errorf("A's API key: got %v; want permission_denied", e)
	}

	byApp := call(appA, "POST", "/v1/devices/take", `{"ttlSeconds":600}`, http.StatusCreated)
	byAdmin := call(adminA, "POST", "/v1/devices/take", "", http.StatusCreated)
	appDev, adminDev := byApp["deviceId"].(string), byAdmin["deviceId"].(string)
	e := call(adminA, "POST", "/v1/devices/take", "", http.StatusConflict)["error"].(map[string]any)
	if ms, _ := e["retryAfterMs"].(float64); e["code"] != "fleet_at_capacity" || e["holding"] != float64(2) || e["limit"] != float64(2) ||
		ms < 1000 || ms > 300_000 {
		t.Errorf("third take: got %v; want fleet_at_capacity holding 2 limit 2, retryAfterMs within the admin's 300 s lease", e)
	}
	if got := devicesOf(adminA); len(got) != 2 {
		t.Errorf("A's devices %v; want its two pool devices", got)
	}
	if got := devicesOf(adminB); len(got) != 0 {
		t.Errorf("B's devices %v; want none", got)
	}
	if e := call(adminB, "GET", "/v1/devices/"+appDev, "", http.StatusConflict)["error"].(map[string]any); e["reason"] != "not_found" {
		t.Errorf("B reading A's pool device: got %v; want device_unavailable not_found", e)
	}

	// The app gives its device back; the worker returns the unit.
	call(appA, "DELETE", fmt.Sprintf("/v1/devices/%s/lease?leaseId=%s", appDev, byApp["leaseId"]), "", http.StatusNoContent)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := devicesOf(adminA)
		if len(got) == 1 && got[0] == adminDev {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's devices after the release: %v; want only %s once the worker returned the other", got, adminDev)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if e := call(adminA, "GET", "/v1/devices/"+appDev, "", http.StatusConflict)["error"].(map[string]any); e["reason"] != "not_found" {
		t.Errorf("the returned device: got %v; want device_unavailable not_found, as one that never existed", e)
	}
	again := call(adminA, "POST", "/v1/devices/take", "", http.StatusCreated)
	if again["deviceId"] == appDev {
		t.Errorf("the unit came back as the same device; want a fresh one")
	}

	evs, err := a.Store().Load(ctx, domain.PoolStreamID, 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ev := range evs {
		names = append(names, ev.Type)
		if ev.Type == "pool.device_returned" {
			m, _ := ev.DecodeMetadata()
			var ret domain.PoolDeviceReturned
			if err := json.Unmarshal(ev.Data, &ret); err != nil || ret.DeviceID != appDev || ret.Reason != domain.PoolReturnLeaseEnded ||
				m.ActorID != "pool-returns" || ev.OrgID != "org_a" {
				t.Errorf("return %s by %+v under %s; want %s back for lease_ended by the pool-returns worker", ev.Data, m, ev.OrgID, appDev)
			}
		}
	}
	want := "pool.device_taken pool.device_taken pool.device_returned pool.device_taken"
	if strings.Join(names, " ") != want {
		t.Errorf("pool stream %v; want %s", names, want)
	}
}
