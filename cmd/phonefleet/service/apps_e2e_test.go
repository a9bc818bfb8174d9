package service

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"phonefleet/commands/apps"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/http/apitest"
	"phonefleet/internal/adbsim"
	"phonefleet/internal/sim"
	"phonefleet/testutil"
)

// appsClient calls the running service and checks every answer against
// the served OpenAPI document.
type appsClient struct {
	t    *testing.T
	base string
	v    *apitest.Validator
	// token, when set, is sent as the bearer (an API key).
	token string
}

func (c appsClient) do(method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			c.t.Fatal(err)
		}
	}
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(raw))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	c.v.Check(c.t, req, resp, b)
	var m map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return resp.StatusCode, m
}

func (c appsClient) must(method, path string, body any, want int) map[string]any {
	c.t.Helper()
	st, m := c.do(method, path, body)
	if st != want {
		c.t.Fatalf("%s %s: got %d %v; want %d", method, path, st, m, want)
	}
	return m
}

// waitFinished polls a tracked request until every device has ended.
func (c appsClient) waitFinished(path string) map[string]any {
	c.t.Helper()
	var last map[string]any
	waitUntil(c.t, 2*time.Minute, path+" finished", func() (bool, error) {
		last = c.must(http.MethodGet, path, nil, http.StatusOK)
		return last["state"] == "finished", nil
	})
	return last
}

// deviceOf returns a request's progress for one device.
func deviceOf(t *testing.T, req map[string]any, id string) map[string]any {
	t.Helper()
	for _, d := range req["devices"].([]any) {
		if m := d.(map[string]any); m["deviceId"] == id {
			return m
		}
	}
	t.Fatalf("no device %s in %v", id, req)
	return nil
}

// appsCatalogFile writes a catalog beside its APKs: the embedded
// Calculator, a Counter whose file was changed after its SHA-256 was
// taken (tampered), and an app that needs a newer Android than any sim
// phone runs.
func appsCatalogFile(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	counter, err := sim.CatalogAPK(sim.PkgCounter)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(counter)
	tampered := append(bytes.Clone(counter), []byte("payload=evil\n")...)
	if err := os.WriteFile(filepath.Join(dir, "counter.apk"), tampered, 0o600); err != nil {
		t.Fatal(err)
	}
	calc, err := sim.CatalogAPK(sim.PkgCalculator)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "future.apk"), calc, 0o600); err != nil {
		t.Fatal(err)
	}
	calcSum := sha256.Sum256(calc)
	catalog := fmt.Sprintf(`{"apps":[
	 {"package":"com.example.calculator","title":"Calculator","versions":[{"version":"8.4","apk":"embedded:apks/com.example.calculator-8.4.apk",
	  "sha256":%q,"minSdk":29,"abis":[]}]},
	 {"package":"com.example.counter","title":"Counter","versions":[{"version":"1.2","apk":"counter.apk","sha256":%q,"minSdk":29,"abis":[]}]},
	 {"package":"com.example.future","title":"Future","versions":[{"version":"1.0","apk":"future.apk","sha256":%q,"minSdk":99,"abis":["arm64-v8a"]}]}
	]}`, hex.EncodeToString(calcSum[:]), hex.EncodeToString(sum[:]), hex.EncodeToString(calcSum[:]))
	path := filepath.Join(dir, "apps.json")
	if err := os.WriteFile(path, []byte(catalog), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAppStoreInstallsOnASimAndAnADBPhone runs the service with one sim
// phone and one sim phone served over adb through a real adb server. It
// reads both phones' software as a tracked refresh, installs Calculator on
// both (the adb one through `adb install`'s stream to the device) and
// sees both end installed with a receipt each and the app in their
// inventory as managed; the same requestKey answers the same
// installation, and reused for another request is refused. A tampered
// Counter APK fails on the adb phone with apk_hash_mismatch and nothing
// reaches it; an app needing a newer Android fails with os_too_old, as
// the catalog said beforehand; a device leased by someone waits queued and
// installs once the lease is given back; a device a stopped process left
// installing is resumed once stale and ends installed. Keys without the
// apps scopes are refused naming them; every answer matches the contract.
func TestAppStoreInstallsOnASimAndAnADBPhone(t *testing.T) {
	server := testutil.ADBServer(t)
	phone, err := sim.New(sim.DefaultModel, "apps-adb-1")
	if err != nil {
		t.Fatal(err)
	}
	daemon, err := adbsim.Start(phone, adbsim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = daemon.Close() })
	testutil.ConnectADB(t, server, daemon.Addr())

	env := localEnv(t, testutil.DatabaseURL(t), 1)
	env["SERVICE_ADB_ADDR"], env["SERVICE_ADB_DISCOVER"] = server, "true"
	env["SERVICE_APP_CATALOG_FILE"] = appsCatalogFile(t)
	app, base := startApp(t, env)
	c := appsClient{t: t, base: base, v: apitest.FromHandler(t, app.server.Router())}

	var simDev, adbDev string
	waitUntil(t, time.Minute, "the sim and the adb phone in GET /v1/devices", func() (bool, error) {
		_, r := c.do(http.MethodGet, "/v1/devices", nil)
		for _, d := range r["devices"].([]any) {
			m := d.(map[string]any)
			if m["status"] != "online" {
				continue
			}
			switch m["backend"] {
			case "adb":
				adbDev = m["deviceId"].(string)
			case "sim":
				simDev = m["deviceId"].(string)
			}
		}
		return simDev != "" && adbDev != "", nil
	})

	// Before anything was read, the catalog says so for every device.
	cat := c.must(http.MethodGet, "/v1/app-store/catalog", nil, http.StatusOK)
	for _, d := range cat["apps"].([]any)[0].(map[string]any)["versions"].([]any)[0].(map[string]any)["devices"].([]any) {
		if m := d.(map[string]any); m["installable"] != false || m["reason"] != domain.ReasonSoftwareNotRead {
			t.Fatalf("catalog before any read: got %v; want inventory_not_read", m)
		}
	}

	// The inventory refresh, as a tracked request.
	r := c.must(http.MethodPost, "/v1/app-library/inventory/refreshes", map[string]any{"requestKey": "refresh-1"}, http.StatusAccepted)
	if r["kind"] != "inventory_refresh" || len(r["devices"].([]any)) != 2 {
		t.Fatalf("refresh: got %v; want both devices queued", r)
	}
	r = c.waitFinished("/v1/app-library/requests/refresh-1")
	for _, id := range []string{simDev, adbDev} {
		if d := deviceOf(t, r, id); d["state"] != "read" {
			t.Fatalf("refresh of %s: got %v; want read", id, d)
		}
	}
	caps := c.must(http.MethodGet, "/v1/app-library/device-capabilities", nil, http.StatusOK)
	for _, d := range caps["devices"].([]any) {
		m := d.(map[string]any)
		if m["read"] != true || m["osVersion"] != "14" || m["sdk"] != float64(34) || m["canInstall"] != true ||
			!slices.Contains(m["abis"].([]any), any("x86_64")) {
			t.Fatalf("capabilities: got %v; want Android 14 (API 34), x86_64, can install", m)
		}
		// Both phones are Pixel 7s (128 GiB, 9 of them the system's).
		if free, _ := m["storageFreeBytes"].(float64); free != float64(119<<30) {
			t.Fatalf("capabilities of %s: storageFreeBytes %v; want %d (the phone's df /data, or the sim's own figure)", m["deviceId"], m["storageFreeBytes"], int64(119<<30))
		}
		var installable []string
		for _, i := range m["installable"].([]any) {
			installable = append(installable, i.(map[string]any)["package"].(string))
		}
		if !slices.Contains(installable, "com.example.calculator") || slices.Contains(installable, "com.example.future") {
			t.Fatalf("capabilities of %s: installable %v; want Calculator and not Future", m["deviceId"], installable)
		}
	}
	// A device that cannot install says why, in the catalog first.
	cat = c.must(http.MethodGet, "/v1/app-store/catalog", nil, http.StatusOK)
	future := cat["apps"].([]any)[2].(map[string]any)["versions"].([]any)[0].(map[string]any)
	for _, d := range future["devices"].([]any) {
		if m := d.(map[string]any); m["installable"] != false || m["reason"] != domain.ReasonOSTooOld || m["message"] == nil {
			t.Fatalf("Future in the catalog: got %v; want os_too_old with a message", m)
		}
	}

	// Calculator on both phones.
	body := map[string]any{"requestKey": "install-calc", "package": "com.example.calculator", "version": "8.4", "devices": []string{simDev, adbDev}}
	first := c.must(http.MethodPost, "/v1/app-store/installations", body, http.StatusAccepted)
	id := str(t, first, "installationId")
	for _, d := range first["devices"].([]any) {
		if s := d.(map[string]any)["state"]; s != "queued" && s != "installing" && s != "installed" {
			t.Fatalf("first answer: got %v", d)
		}
	}
	again := c.must(http.MethodPost, "/v1/app-store/installations", body, http.StatusOK)
	if again["installationId"] != id || again["requestKey"] != "install-calc" {
		t.Fatalf("retry with the same requestKey: got %v; want installation %s", again, id)
	}
	other := map[string]any{"requestKey": "install-calc", "package": "com.example.calculator", "version": "8.4", "devices": []string{simDev}}
	if st, m := c.do(http.MethodPost, "/v1/app-store/installations", other); st != http.StatusConflict ||
		m["error"].(map[string]any)["code"] != "idempotency_conflict" {
		t.Fatalf("the key reused for another request: got %d %v; want 409 idempotency_conflict", st, m)
	}
	done := c.waitFinished("/v1/app-store/installations/" + id)
	for _, dev := range []string{simDev, adbDev} {
		d := deviceOf(t, done, dev)
		if d["state"] != "installed" || d["receiptIdempotencyKey"] == nil {
			t.Fatalf("installation on %s: got %v; want installed with a receipt", dev, d)
		}
		rc := c.must(http.MethodGet, "/v1/receipts/"+d["receiptIdempotencyKey"].(string), nil, http.StatusOK)
		if rc["action"] != "install_app" || rc["state"] != "committed" || rc["deviceId"] != dev {
			t.Fatalf("receipt of the install on %s: got %v", dev, rc)
		}
	}
	if byKey := c.must(http.MethodGet, "/v1/app-store/installations/by-request/install-calc", nil, http.StatusOK); byKey["installationId"] != id {
		t.Fatalf("by request key: got %v", byKey)
	}
	if !slices.ContainsFunc(phone.InstalledApps(), func(a sim.AppInfo) bool { return a.Package == sim.PkgCalculator }) {
		t.Fatalf("the adb phone's apps after the install: %v; want Calculator", phone.InstalledApps())
	}
	inv := c.must(http.MethodGet, "/v1/app-library/inventory", nil, http.StatusOK)
	for _, d := range inv["devices"].([]any) {
		m := d.(map[string]any)
		var calc map[string]any
		for _, a := range m["apps"].([]any) {
			if a.(map[string]any)["package"] == "com.example.calculator" {
				calc = a.(map[string]any)
			}
		}
		if calc == nil || calc["managed"] != true || calc["managedVersion"] != "8.4" || calc["version"] != "8.4" {
			t.Fatalf("inventory of %s: Calculator %v; want managed 8.4", m["deviceId"], calc)
		}
	}

	// A tampered APK is refused before anything reaches the adb phone.
	execs := daemon.Stats().Streams["exec"]
	tam := c.must(http.MethodPost, "/v1/app-store/installations", map[string]any{"requestKey": "install-counter", "package": "com.example.counter",
		"version": "1.2", "devices": []string{adbDev}}, http.StatusAccepted)
	tam = c.waitFinished("/v1/app-store/installations/" + str(t, tam, "installationId"))
	if d := deviceOf(t, tam, adbDev); d["state"] != "failed" || d["reason"] != domain.ReasonAPKHashMismatch || d["receiptIdempotencyKey"] != nil {
		t.Fatalf("tampered APK: got %v; want failed apk_hash_mismatch and no receipt", d)
	}
	if n := daemon.Stats().Streams["exec"]; n != execs {
		t.Fatalf("the adb phone served %d exec streams during the tampered install; want none (nothing sent)", n-execs)
	}
	if slices.ContainsFunc(phone.InstalledApps(), func(a sim.AppInfo) bool { return a.Package == sim.PkgCounter }) {
		t.Fatal("the adb phone has Counter after the tampered install")
	}

	// A device that cannot install says why in the installation too.
	fut := c.must(http.MethodPost, "/v1/app-store/installations", map[string]any{"requestKey": "install-future", "package": "com.example.future",
		"version": "1.0", "devices": []string{simDev}}, http.StatusAccepted)
	fut = c.waitFinished("/v1/app-store/installations/" + str(t, fut, "installationId"))
	if d := deviceOf(t, fut, simDev); d["state"] != "failed" || d["reason"] != domain.ReasonOSTooOld || d["message"] == nil {
		t.Fatalf("Future on the sim phone: got %v; want failed os_too_old with a message", d)
	}

	// A leased device waits, queued, for its lease.
	lease := c.must(http.MethodPost, "/v1/devices/"+simDev+"/lease", map[string]any{}, http.StatusCreated)
	wait := c.must(http.MethodPost, "/v1/app-store/installations", map[string]any{"requestKey": "install-waits", "package": "com.example.calculator",
		"version": "8.4", "devices": []string{simDev}}, http.StatusAccepted)
	pass, err := app.appWorker().RunOnce(testutil.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.must(http.MethodGet, "/v1/app-store/installations/by-request/install-waits", nil, http.StatusOK); deviceOf(t, got, simDev)["state"] != "queued" ||
		!slices.Contains(pass.States, apps.WorkWaiting) {
		t.Fatalf("while leased: got %v (the pass said %v); want queued, waiting for the lease", got, pass.States)
	}
	c.must(http.MethodDelete, "/v1/devices/"+simDev+"/lease?leaseId="+str(t, lease, "leaseId"), nil, http.StatusNoContent)
	wait = c.waitFinished("/v1/app-store/installations/" + str(t, wait, "installationId"))
	if d := deviceOf(t, wait, simDev); d["state"] != "installed" {
		t.Fatalf("after the lease was given back: got %v; want installed", d)
	}

	// A device a stopped process left installing is taken up again once
	// its state is stale (by the worker's clock), and ends installed.
	lease = c.must(http.MethodPost, "/v1/devices/"+simDev+"/lease", map[string]any{}, http.StatusCreated)
	c.must(http.MethodPost, "/v1/app-store/installations", map[string]any{"requestKey": "install-stuck", "package": "com.example.calculator",
		"version": "8.4", "devices": []string{simDev}}, http.StatusAccepted)
	news, err := eventstore.Encode(domain.Events, app.orgID, domain.Event(domain.AppDeviceWorkStarted{RequestKey: "install-stuck",
		DeviceID: simDev, State: domain.AppDeviceInstalling, At: time.Now()}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.store.Append(testutil.Context(t), domain.AppRequestStream(app.orgID, "install-stuck"), eventstore.AnyVersion, news...); err != nil {
		t.Fatal(err)
	}
	c.must(http.MethodDelete, "/v1/devices/"+simDev+"/lease?leaseId="+str(t, lease, "leaseId"), nil, http.StatusNoContent)
	waitUntil(t, time.Minute, "the stuck device shown installing", func() (bool, error) {
		got := c.must(http.MethodGet, "/v1/app-store/installations/by-request/install-stuck", nil, http.StatusOK)
		return deviceOf(t, got, simDev)["state"] == "installing", nil
	})
	later := app.appWorker()
	later.Now = func() time.Time { return time.Now().Add(time.Hour) }
	if _, err := later.RunOnce(testutil.Context(t)); err != nil {
		t.Fatal(err)
	}
	stuck := c.must(http.MethodGet, "/v1/app-store/installations/by-request/install-stuck", nil, http.StatusOK)
	if d := deviceOf(t, stuck, simDev); d["state"] != "installed" || d["receiptIdempotencyKey"] == nil {
		t.Fatalf("the resumed install: got %v; want installed, with its receipt", d)
	}

	// Lists and refusals.
	page := c.must(http.MethodGet, "/v1/app-store/installations?limit=2", nil, http.StatusOK)
	if list := page["installations"].([]any); len(list) != 2 || list[0].(map[string]any)["requestKey"] != "install-stuck" || page["nextBefore"] == nil {
		t.Fatalf("installations page: got %v; want the two newest and a cursor", page)
	}
	// Scopes (spec 5.4): reading needs apps:read, installing apps:write.
	key := func(scopes ...string) appsClient {
		m := c.must(http.MethodPost, "/v1/api-keys", map[string]any{"name": "apps scopes", "scopes": scopes}, http.StatusCreated)
		k := c
		k.token = str(t, m, "token")
		return k
	}
	for _, tc := range []struct {
		c            appsClient
		method, path string
		body         any
		scope        string
	}{
		{key("devices:read"), http.MethodGet, "/v1/app-store/catalog", nil, "apps:read"},
		{key("devices:read"), http.MethodGet, "/v1/app-library/inventory", nil, "apps:read"},
		{key("apps:read"), http.MethodPost, "/v1/app-store/installations", body, "apps:write"},
		{key("apps:read"), http.MethodPost, "/v1/app-library/inventory/refreshes", map[string]any{"requestKey": "r"}, "apps:write"},
	} {
		st, m := tc.c.do(tc.method, tc.path, tc.body)
		if e, _ := m["error"].(map[string]any); st != http.StatusForbidden || e["code"] != "permission_denied" || e["scope"] != tc.scope {
			t.Errorf("%s %s: got %d %v; want 403 permission_denied naming %s", tc.method, tc.path, st, m, tc.scope)
		}
	}
	if got := key("apps:read").must(http.MethodGet, "/v1/app-store/installations/"+id, nil, http.StatusOK); got["installationId"] != id {
		t.Errorf("an apps:read key reads the installation: got %v", got)
	}

	for _, tc := range []struct {
		method, path string
		body         any
		status       int
		code         string
	}{
		{http.MethodPost, "/v1/app-store/installations", map[string]any{"requestKey": "x", "package": "com.example.calculator", "version": "9.9",
			"devices": []string{simDev}}, 400, "invalid_argument"},
		{http.MethodPost, "/v1/app-store/installations", map[string]any{"requestKey": "", "package": "com.example.calculator", "version": "8.4",
			"devices": []string{simDev}}, 400, "invalid_argument"},
		{http.MethodPost, "/v1/app-store/installations", map[string]any{"requestKey": "a/b", "package": "com.example.calculator", "version": "8.4",
			"devices": []string{simDev}}, 400, "invalid_argument"},
		{http.MethodPost, "/v1/app-store/installations", map[string]any{"requestKey": "y", "package": "com.example.calculator", "version": "8.4",
			"devices": []string{domain.NewID(domain.PrefixDevice)}}, 409, "device_unavailable"},
		{http.MethodGet, "/v1/app-store/installations/" + domain.NewID(domain.PrefixInstallation), nil, 404, "not_found"},
		{http.MethodGet, "/v1/app-store/installations/by-request/refresh-1", nil, 404, "not_found"},
		{http.MethodGet, "/v1/app-library/requests/nothing-here", nil, 404, "not_found"},
		{http.MethodGet, "/v1/app-store/installations?before=nope", nil, 400, "invalid_argument"},
	} {
		st, m := c.do(tc.method, tc.path, tc.body)
		if st != tc.status || m["error"].(map[string]any)["code"] != tc.code {
			t.Errorf("%s %s: got %d %v; want %d %s", tc.method, tc.path, st, m, tc.status, tc.code)
		}
	}
}
