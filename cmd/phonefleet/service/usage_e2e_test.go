package service

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"phonefleet/commands/fleet"
	"phonefleet/domain"
	"phonefleet/http/apitest"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/testutil"
)

// TestUsageThroughTheService runs the hosted service: organisation A's
// admin leases one phone and releases it, starts a run on the other and
// cancels it; organisation B leases its own phone. GET /v1/usage then
// reports, for each organisation, exactly the time between each lease's
// recorded acquisition and release (read back from the event log), the
// person's lease as lease time and the run's as run time; the same for a
// key with devices:read, and for a key narrowed to one phone only that
// phone. A key without devices:read, and an OAuth app, are refused; B
// asking about A's phone gets the answer an unknown phone gets. Every
// answer matches the OpenAPI document.
func TestUsageThroughTheService(t *testing.T) {
	idp := identitytest.New(t)
	a, base := startHosted(t, idp)
	ctx := testutil.Context(t)
	v := apitest.FromHandler(t, a.server.Handler())
	aud := "http://tenancy.test/mcp"
	adminA := idp.Console(t, aud, "user_a", "org_a", "admin")
	adminB := idp.Console(t, aud, "user_b", "org_b", "admin")

	call := checkedCaller(t, v, base)
	register := func(org string, n int) []string {
		t.Helper()
		ids, err := a.app.Fleet.RegisterDevices.Handle(ctx, fleet.RegisterDevices{OrgID: org, Backend: domain.BackendSim, Count: n})
		if err != nil || len(ids) != n {
			t.Fatalf("register %d sim phones for %s: %v (%v)", n, org, err, ids)
		}
		return ids
	}
	devsA, devsB := register("org_a", 2), register("org_b", 1)
	leaseAndRelease := func(token, dev string) {
		t.Helper()
		l := call(token, "POST", "/v1/devices/"+dev+"/lease", `{"ttlSeconds":60}`, http.StatusCreated)
		call(token, "DELETE", fmt.Sprintf("/v1/devices/%s/lease?leaseId=%s", dev, l["leaseId"]), "", http.StatusNoContent)
	}
	leaseAndRelease(adminA, devsA[0])
	run := call(adminA, "POST", "/v1/runs", `{"deviceId":"`+devsA[1]+`","goal":"open notes","executor":"external"}`, http.StatusCreated)
	call(adminA, "POST", "/v1/runs/"+run["runId"].(string)+"/cancel", "", http.StatusOK)
	leaseAndRelease(adminB, devsB[0])

	// What the event log says each phone was held for, by billing period
	// (a lease straddling a month's end counts in both).
	held := func(dev string) (periods []string, total time.Duration, holder string) {
		t.Helper()
		recorded, err := a.store.Load(ctx, domain.DeviceStream(dev), 1)
		if err != nil {
			t.Fatal(err)
		}
		var from time.Time
		for _, e := range recorded {
			ev, err := domain.Events.Decode(e.Type, e.SchemaVersion, e.Data)
			if err != nil {
				t.Fatal(err)
			}
			switch ev := ev.(type) {
			case domain.LeaseAcquired:
				from, holder = ev.AcquiredAt, ev.Holder.Kind
			case domain.LeaseReleased:
				total += ev.ReleasedAt.Sub(from)
				for _, p := range []string{domain.BillingPeriodOf(from).Name(), domain.BillingPeriodOf(ev.ReleasedAt).Name()} {
					if len(periods) == 0 || periods[len(periods)-1] != p {
						periods = append(periods, p)
					}
				}
			}
		}
		if total <= 0 {
			t.Fatalf("phone %s: no lease held and released in the log", dev)
		}
		return periods, total, holder
	}
	// reported adds up a phone's figures over periods, as token sees them.
	reported := func(token, dev string, periods []string) (seconds, lease, runSecs float64) {
		t.Helper()
		for _, p := range periods {
			rep := call(token, "GET", "/v1/usage?period="+p, "", http.StatusOK)
			for _, d := range rep["devices"].([]any) {
				d := d.(map[string]any)
				if d["deviceId"] == dev {
					seconds += d["seconds"].(float64)
					lease += d["leaseSeconds"].(float64)
					runSecs += d["runSeconds"].(float64)
				}
			}
		}
		return
	}
	const µs = 1e-6
	near := func(got float64, want time.Duration) bool {
		d := got - want.Seconds()
		return d < µs && d > -µs
	}
	for _, c := range []struct {
		token, dev, kind string
	}{{adminA, devsA[0], domain.ActorUser}, {adminA, devsA[1], domain.ActorRun}, {adminB, devsB[0], domain.ActorUser}} {
		periods, total, holder := held(c.dev)
		if holder != c.kind {
			t.Fatalf("phone %s: held by a %s; want a %s", c.dev, holder, c.kind)
		}
		seconds, lease, runSecs := reported(c.token, c.dev, periods)
		wantLease, wantRun := total, time.Duration(0)
		if c.kind == domain.ActorRun {
			wantLease, wantRun = 0, total
		}
		if !near(seconds, total) || !near(lease, wantLease) || !near(runSecs, wantRun) {
			t.Errorf("phone %s: reported %v s (lease %v, run %v); want %v (lease %v, run %v) as the log says",
				c.dev, seconds, lease, runSecs, total.Seconds(), wantLease.Seconds(), wantRun.Seconds())
		}
	}

	now := domain.BillingPeriodOf(time.Now()).Name()
	mine := call(adminA, "GET", "/v1/usage?period="+now, "", http.StatusOK)
	theirs := call(adminB, "GET", "/v1/usage?period="+now, "", http.StatusOK)
	for _, d := range theirs["devices"].([]any) {
		if id := d.(map[string]any)["deviceId"]; id != devsB[0] {
			t.Errorf("organisation B sees device %v; want its own phone only", id)
		}
	}
	foreign := call(adminB, "GET", "/v1/usage?period="+now+"&deviceId="+devsA[0], "", http.StatusOK)
	unknown := call(adminB, "GET", "/v1/usage?period="+now+"&deviceId="+domain.NewID(domain.PrefixDevice), "", http.StatusOK)
	delete(foreign, "asOf")
	delete(unknown, "asOf")
	if fj, uj := fmt.Sprint(foreign), fmt.Sprint(unknown); fj != uj || len(foreign["devices"].([]any)) != 0 {
		t.Errorf("B asking about A's phone: %s; about an unknown phone: %s; want one empty answer", fj, uj)
	}

	// Keys: devices:read sees what the admin sees; narrowed, one phone;
	// without devices:read, refused.
	mint := func(body string) string {
		t.Helper()
		return call(adminA, "POST", "/v1/api-keys", body, http.StatusCreated)["token"].(string)
	}
	reader := mint(`{"name":"usage reader","scopes":["devices:read"]}`)
	narrow := mint(`{"name":"usage one phone","scopes":["devices:read"],"deviceIds":["` + devsA[0] + `"]}`)
	runner := mint(`{"name":"usage runner","scopes":["runs:start","devices:act"]}`)
	byKey := call(reader, "GET", "/v1/usage?period="+now, "", http.StatusOK)
	if fmt.Sprint(byKey["devices"]) != fmt.Sprint(mine["devices"]) || byKey["totalSeconds"] != mine["totalSeconds"] {
		t.Errorf("a devices:read key: got %v; want what the admin sees, %v", byKey, mine)
	}
	one := call(narrow, "GET", "/v1/usage?period="+now, "", http.StatusOK)
	for _, d := range one["devices"].([]any) {
		if id := d.(map[string]any)["deviceId"]; id != devsA[0] {
			t.Errorf("a key narrowed to %s sees %v", devsA[0], id)
		}
	}
	if e := call(runner, "GET", "/v1/usage", "", http.StatusForbidden)["error"].(map[string]any); e["code"] != "permission_denied" || e["scope"] != "devices:read" {
		t.Errorf("a key without devices:read: got %v; want permission_denied naming devices:read", e)
	}
	idp.SetRole("user_a", "org_a", "admin")
	app := idp.App(t, aud, "user_a", "org_a", "third-party")
	if e := call(app, "GET", "/v1/usage", "", http.StatusForbidden)["error"].(map[string]any); e["code"] != "permission_denied" || e["where"] != "the console's usage page" {
		t.Errorf("an OAuth app: got %v; want permission_denied naming the console's usage page", e)
	}
}
