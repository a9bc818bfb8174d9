package service

import (
	"context"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"phonefleet/domain"
	"phonefleet/internal/gateway"
	"phonefleet/internal/identity/identitytest"
	"phonefleet/testutil"
)

// consoleGateway is what the tests read of a gateway from the API.
type consoleGateway struct {
	GatewayID string  `json:"gatewayId"`
	Name      string  `json:"name"`
	State     string  `json:"state"`
	Version   *string `json:"version"`
	RevokedAt *string `json:"revokedAt"`
	RevokedBy *struct {
		Kind string `json:"kind"`
		ID   string `json:"id"`
	} `json:"revokedBy"`
	Connected   bool    `json:"connected"`
	Instance    *string `json:"instance"`
	ConnectedAt *string `json:"connectedAt"`
	LastSeenAt  *string `json:"lastSeenAt"`
}

// consoleGatewayVersion is the version the test's gateway reports.
const consoleGatewayVersion = "9.8.7-console"

// TestConsoleGatewaysEnrollAndRevoke runs the service in local mode and
// drives the gateways page in a real headless Chromium:
//
//   - "Add a gateway" (a name, two hours) shows a one-time enrollment code
//     in a dialog with a copy button: the exact command to run on the site
//     (GATEWAY_URL=<the console's origin> GATEWAY_ENROLL_CODE=<code>
//     phonefleet gateway), the code's expiry two hours on, and that the
//     code works once; once the dialog is closed the code is nowhere in
//     the page, and reloading does not show it again;
//   - a gateway (gateway.RunAgent, in this process, with one sim phone)
//     enrolls with the code from the command and connects: without a click
//     the list shows it connected, through this instance, with the version
//     it runs, and its phone is online;
//   - Revoke asks first, naming the gateway and saying its phones go
//     offline; confirmed, the list shows it revoked (when, by whom) and
//     disconnected, its phone goes offline, and the gateway's credential
//     is refused (the agent stops).
//
// Screenshots: the code dialog, the list with the gateway connected (at
// 1280×800 and a phone's width), the confirmation and the revoked list.
func TestConsoleGatewaysEnrollAndRevoke(t *testing.T) {
	dir := t.TempDir()
	a, base := startApp(t, map[string]string{
		"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_ADDR": "127.0.0.1:0",
		"SERVICE_DATA_DIR": filepath.Join(dir, "data"), "SERVICE_SIM_DEVICES": "0",
	})
	api := newAdminAPI(t, a, base)
	list := func() []consoleGateway {
		t.Helper()
		var out struct {
			Gateways []consoleGateway `json:"gateways"`
		}
		api.json("GET", "/v1/gateways", "", "", http.StatusOK, &out)
		return out.Gateways
	}

	ctx := testutil.Browser(t)
	wait, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	admDo(t, wait, "open the gateways page",
		chromedp.Navigate(base+"/#/gateways"),
		chromedp.WaitVisible(chromedp.CSS(`#gateway-add`)))
	if got := admEval[string](t, wait, `document.getElementById('gateways-summary').textContent`); !strings.Contains(got, "No gateways yet") {
		t.Errorf("with no gateway the page says %q; want that there is none yet", got)
	}
	if n := admEval[int](t, wait, `document.querySelectorAll('nav a[href="#/gateways"][aria-current=page]').length`); n != 1 {
		t.Errorf("the nav marks %d Gateways links as the current page; want 1", n)
	}
	admCheckA11y(t, wait, "gateways page, no gateways")

	// Add a gateway: a code valid two hours, shown once.
	before := time.Now()
	admDo(t, wait, "create an enrollment code",
		chromedp.SendKeys(chromedp.ID("gateway-name"), "lab-1"),
		chromedp.SetValue(chromedp.ID("gateway-hours"), "2"),
		chromedp.Click(chromedp.CSS(`#gateway-add button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.secret-dialog textarea`)))
	after := time.Now()
	cmd, err := chromedp.Run(wait, chromedp.Value(chromedp.CSS(`dialog.secret-dialog textarea`)))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`^GATEWAY_URL=` + regexp.QuoteMeta(base) + ` GATEWAY_ENROLL_CODE=(pfe_[0-9A-Za-z_]+) phonefleet gateway$`).FindStringSubmatch(cmd)
	if m == nil {
		t.Fatalf("the dialog's command is %q; want GATEWAY_URL=%s GATEWAY_ENROLL_CODE=pfe_… phonefleet gateway", cmd, base)
	}
	code := m[1]
	dialog := admEval[string](t, wait, `document.querySelector('dialog.secret-dialog').textContent`)
	if !strings.Contains(dialog, code) || !strings.Contains(dialog, "works once") || !strings.Contains(dialog, "shown this once") {
		t.Errorf("the dialog says %q; want the code, that it works once and that it is shown once", dialog)
	}
	expires, err := time.Parse(time.RFC3339, admEval[string](t, wait, `document.querySelector('dialog.secret-dialog time').getAttribute('datetime')`))
	if err != nil {
		t.Fatal(err)
	}
	if expires.Before(before.Add(2*time.Hour-time.Second)) || expires.After(after.Add(2*time.Hour+time.Second)) {
		t.Errorf("the code expires %v; want two hours after it was made (%v to %v)", expires, before.Add(2*time.Hour), after.Add(2*time.Hour))
	}
	admCheckA11y(t, wait, "code dialog")
	if focused := admEval[string](t, wait, `document.activeElement.textContent`); focused != "Copy" {
		t.Errorf("the dialog's focus is on %q; want its Copy button", focused)
	}
	testutil.Screenshot(t, ctx, "gateways-code-once")

	secret := code[strings.LastIndex(code, "_")+1:]
	admDo(t, wait, "close the code dialog",
		chromedp.Click(chromedp.CSS(`dialog.secret-dialog button.primary`)),
		chromedp.WaitNotPresent(chromedp.CSS(`dialog.secret-dialog`)),
		chromedp.WaitVisible(chromedp.CSS(`#gateway-add`)))
	if admPageHolds(t, wait, secret) {
		t.Fatal("after the dialog closed, the page still holds the code")
	}
	admDo(t, wait, "reload the page", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#gateway-add`)))
	if admPageHolds(t, wait, secret) || admEval[bool](t, wait, `!!document.querySelector('dialog')`) {
		t.Fatal("after a reload the page shows the code again")
	}

	// The site's computer runs the command: the gateway enrolls with the
	// code and connects.
	agentCtx, stopAgent := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- gateway.RunAgent(agentCtx, gateway.AgentConfig{URLs: []string{base}, DataDir: filepath.Join(dir, "gateway"),
			EnrollCode: code, SimDevices: 1, Version: consoleGatewayVersion, Logger: slog.New(slog.DiscardHandler)})
	}()
	t.Cleanup(func() {
		stopAgent()
		<-done
	})

	var gw consoleGateway
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if gs := list(); len(gs) == 1 && gs[0].Connected {
			gw = gs[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API lists %+v; want the gateway connected", list())
		}
	}
	if gw.Name != "lab-1" || gw.State != "active" || gw.Version == nil || *gw.Version != consoleGatewayVersion || gw.Instance == nil {
		t.Fatalf("the API lists %+v; want lab-1, active, running %s, through an instance", gw, consoleGatewayVersion)
	}
	device := waitDeviceStatus(t, api, "lab-1/sim-1", domain.DeviceOnline)

	// The page shows it connected without a click.
	row := `tr[data-gateway-id="` + gw.GatewayID + `"]`
	admPoll[bool](t, wait, "the row of the connected gateway", `!!document.querySelector('`+row+`[data-connected=true]')`)
	text := admEval[string](t, wait, `document.querySelector('`+row+`').textContent`)
	for _, want := range []string{"lab-1", "connected", "since", "through instance " + *gw.Instance, consoleGatewayVersion, "active"} {
		if !strings.Contains(text, want) {
			t.Errorf("the gateway's row says %q; want %q in it", text, want)
		}
	}
	if got := admEval[string](t, wait, `document.getElementById('gateways-summary').textContent`); !strings.Contains(got, "1 connected") {
		t.Errorf("the summary says %q; want 1 connected", got)
	}
	admCheckA11y(t, wait, "gateways page, one gateway")
	testutil.Screenshot(t, ctx, "gateways")
	admPhoneScreenshot(t, wait, "gateways-phone")

	// Revoke, confirmed.
	admDo(t, wait, "ask to revoke",
		chromedp.Click(chromedp.CSS(row+` button[aria-label="Revoke lab-1"]`)),
		chromedp.WaitVisible(chromedp.CSS(`dialog.confirm-dialog`)))
	if got := admEval[string](t, wait, `document.querySelector('dialog.confirm-dialog').textContent`); !strings.Contains(got, "lab-1") || !strings.Contains(got, "offline") {
		t.Errorf("the confirmation says %q; want it to name lab-1 and say its phones go offline", got)
	}
	admCheckA11y(t, wait, "revoke confirmation")
	testutil.Screenshot(t, ctx, "gateways-revoke-confirm")
	admDo(t, wait, "revoke",
		chromedp.Click(chromedp.CSS(`dialog.confirm-dialog button[value=confirm]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`dialog.confirm-dialog`)))
	admPoll[bool](t, wait, "the row of the revoked, disconnected gateway",
		`!!document.querySelector('`+row+`[data-state=revoked][data-connected=false].inactive')`)
	text = admEval[string](t, wait, `document.querySelector('`+row+`').textContent`)
	for _, want := range []string{"lab-1", "revoked", "disconnected", "last seen", consoleGatewayVersion} {
		if !strings.Contains(text, want) {
			t.Errorf("the revoked gateway's row says %q; want %q in it", text, want)
		}
	}
	if admEval[bool](t, wait, `!!document.querySelector('`+row+` button')`) {
		t.Error("the revoked gateway's row still offers an action")
	}
	gs := list()
	if len(gs) != 1 || gs[0].State != "revoked" || gs[0].Connected || gs[0].RevokedAt == nil || gs[0].RevokedBy == nil {
		t.Fatalf("after revoking the API lists %+v; want lab-1 revoked and disconnected", gs)
	}
	if !strings.Contains(text, "by "+gs[0].RevokedBy.ID) {
		t.Errorf("the revoked gateway's row says %q; want who revoked it (%s)", text, gs[0].RevokedBy.ID)
	}
	if got := waitDeviceStatus(t, api, "lab-1/sim-1", domain.DeviceOffline); got != device {
		t.Errorf("the gateway's phone is %s after revoking; want the same device %s", got, device)
	}
	select {
	case err := <-done:
		done <- err // for the cleanup
		if err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("the revoked gateway stopped with %v; want its credential refused", err)
		}
	case <-time.After(90 * time.Second):
		t.Error("the revoked gateway's agent still runs; want its credential refused")
	}
	testutil.Screenshot(t, ctx, "gateways-revoked")
}

// waitDeviceStatus waits until the device named name is listed with
// status and returns its id.
func waitDeviceStatus(t *testing.T, api *adminAPI, name, status string) string {
	t.Helper()
	var seen []string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var page struct {
			Devices []struct {
				DeviceID string `json:"deviceId"`
				Name     string `json:"name"`
				Status   string `json:"status"`
			} `json:"devices"`
		}
		api.json("GET", "/v1/devices?limit=200", "", "", http.StatusOK, &page)
		seen = seen[:0]
		for _, d := range page.Devices {
			if d.Name == name && d.Status == status {
				return d.DeviceID
			}
			seen = append(seen, d.Name+" "+d.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API lists devices %v; want %s %s", seen, name, status)
		}
	}
}

// TestConsoleGatewaysMemberIsToldItIsAnAdminsPage signs a member in to the
// hosted console and opens the gateways page: the API refuses the list
// (403 permission_denied), and the page says gateways are an admin's,
// with no list and no form.
func TestConsoleGatewaysMemberIsToldItIsAnAdminsPage(t *testing.T) {
	idp := identitytest.New(t)
	_, front := startHostedConsole(t, idp, nil)
	idp.RegisterClient(consoleClientID, front+"/")
	idp.SignInAs("user_m", "org_a", domain.RoleMember)

	ctx := testutil.Browser(t)
	wait, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	admDo(t, wait, "sign in as a member and open the gateways page",
		chromedp.Navigate(front+"/#/gateways"),
		chromedp.WaitVisible(chromedp.CSS(`#main .signin button`)),
		chromedp.Click(chromedp.CSS(`#main .signin button`)),
		chromedp.WaitVisible(chromedp.ID(`allow`)),
		chromedp.Click(chromedp.ID(`allow`)),
		chromedp.WaitVisible(chromedp.CSS(`#main .gateways-denied`)))
	text := admEval[string](t, wait, `document.getElementById('main').textContent`)
	for _, want := range []string{"Gateways", "permission_denied", "managed by the organisation's admins"} {
		if !strings.Contains(text, want) {
			t.Errorf("the member's page says %q; want %q in it", text, want)
		}
	}
	if n := admEval[int](t, wait, `document.querySelectorAll('#main form, #main table, #main button').length`); n != 0 {
		t.Errorf("the member's page shows %d forms, tables or buttons; want none", n)
	}
	admCheckA11y(t, wait, "gateways page, a member")
	testutil.Screenshot(t, ctx, "gateways-member")
}
