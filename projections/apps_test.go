package projections_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// TestAppsRebuildsToTheSameRows records two organisations' installations
// and inventory refreshes (devices queued, working, installed, failed) and
// what their devices reported, reads every row of the apps read model,
// rebuilds it from position 0 and expects the same rows.
func TestAppsRebuildsToTheSameRows(t *testing.T) {
	pool := testutil.SmallPool(t, 6)
	s := eventstore.New(pool, eventstore.WithUpcaster(domain.Events))
	r, err := projections.NewRunner(s, quiet, []projections.Projection{projections.Apps{}}, projections.WithPollInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testutil.Context(t))
	done := make(chan struct{})
	if err := r.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	var last eventstore.Appended
	appendTo := func(org, stream string, evs ...domain.Event) {
		t.Helper()
		news, err := eventstore.Encode(domain.Events, org, evs...)
		if err != nil {
			t.Fatal(err)
		}
		if last, err = s.Append(ctx, stream, eventstore.AnyVersion, news...); err != nil {
			t.Fatal(err)
		}
	}
	for i, org := range []string{"org_a", "org_b"} {
		by := domain.CreatorOf(domain.Auth{OrgID: org, Kind: domain.PrincipalConsole, UserID: "u_" + org, Role: domain.RoleAdmin})
		dev1, dev2 := fmt.Sprintf("dev_%d1", i), fmt.Sprintf("dev_%d2", i)
		at := now.Add(time.Duration(i) * time.Minute)
		sw := func(apps ...string) domain.DeviceSoftware {
			free := int64(1 << 30)
			s := domain.DeviceSoftware{OSVersion: "14", SDK: 34, ABIs: []string{"x86_64"}, StorageFreeBytes: &free, CanInstall: true,
				Apps: []domain.InstalledApp{{Package: "com.android.settings", Version: "14", System: true}}}
			for _, a := range apps {
				s.Apps = append(s.Apps, domain.InstalledApp{Package: a, Version: "8.4"})
			}
			return s
		}
		refresh := domain.AppRequestStream(org, "refresh")
		appendTo(org, refresh, domain.AppInventoryRefreshRequested{RequestKey: "refresh", OrgID: org, Devices: []string{dev1, dev2},
			Requester: by, Fingerprint: "f", RequestedAt: at})
		appendTo(org, refresh, domain.AppDeviceWorkStarted{RequestKey: "refresh", DeviceID: dev1, State: domain.AppDeviceReading, At: at})
		appendTo(org, domain.AppSoftwareStream(dev1), domain.AppDeviceSoftwareRead{DeviceID: dev1, OrgID: org, Software: sw(), ReadAt: at})
		appendTo(org, refresh, domain.AppDeviceWorkFinished{RequestKey: "refresh", DeviceID: dev1, State: domain.AppDeviceRead, At: at},
			domain.AppDeviceWorkFinished{RequestKey: "refresh", DeviceID: dev2, State: domain.AppDeviceFailed, Code: "device_unavailable",
				Reason: "offline", Message: "offline", At: at})
		install := domain.AppRequestStream(org, "install")
		appendTo(org, install, domain.AppInstallationRequested{InstallationID: domain.NewID(domain.PrefixInstallation), RequestKey: "install",
			OrgID: org, Package: "com.example.calculator", Title: "Calculator", Version: "8.4", SHA256: strings.Repeat("a", 64),
			Devices: []string{dev1, dev2}, Requester: by, Fingerprint: "g", RequestedAt: at.Add(time.Second)})
		appendTo(org, install, domain.AppDeviceWorkStarted{RequestKey: "install", DeviceID: dev1, State: domain.AppDeviceInstalling, At: at})
		appendTo(org, install, domain.AppDeviceWorkFinished{RequestKey: "install", DeviceID: dev1, State: domain.AppDeviceInstalled,
			ActionID: "act_1", IdempotencyKey: "app-install-1", At: at.Add(2 * time.Second)})
		appendTo(org, domain.AppSoftwareStream(dev1), domain.AppDeviceSoftwareRead{DeviceID: dev1, OrgID: org,
			Software: sw("com.example.calculator"), ReadAt: at.Add(3 * time.Second)})
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := r.WaitFor(wctx, projections.AppsName, last); err != nil {
		t.Fatal(err)
	}
	read := func() string {
		t.Helper()
		var b strings.Builder
		for _, q := range []string{
			`SELECT org_id, request_key, kind, installation_id, package, title, version, devices::text, requester_kind, requester_id, requested_at, updated_at FROM public.app_requests ORDER BY 1, 2`,
			`SELECT org_id, request_key, device_id, position, state, code, reason, message, action_id, idempotency_key, updated_at FROM public.app_request_devices ORDER BY 1, 2, 3`,
			`SELECT device_id, org_id, os_version, sdk, abis::text, storage_free_bytes, can_install, read_at FROM public.app_software ORDER BY 1`,
			`SELECT device_id, org_id, package, version, system FROM public.app_inventory ORDER BY 1, 3`,
			`SELECT device_id, package, org_id, version, installation_id, installed_at FROM public.app_managed ORDER BY 1, 2`,
		} {
			rows, err := pool.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				vals, err := rows.Values()
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&b, "%v\n", vals)
			}
			rows.Close()
		}
		return b.String()
	}
	before := read()
	for _, want := range []string{"[org_a install dev_01 0 installed", "[org_b refresh dev_12 1 failed device_unavailable offline",
		"[dev_01 com.example.calculator org_a 8.4"} {
		if !strings.Contains(before, want) {
			t.Fatalf("read model lacks %q:\n%s", want, before)
		}
	}
	if err := r.Rebuild(wctx, projections.AppsName, nil); err != nil {
		t.Fatal(err)
	}
	if after := read(); after != before {
		t.Fatalf("rebuild changed the apps read model:\nbefore %s\nafter  %s", before, after)
	}
}
