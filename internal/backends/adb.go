package backends

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"phonefleet/domain"
	"phonefleet/internal/adb"
	"phonefleet/internal/sim"
)

// ADBHost drives the adb devices of every organisation in this process
// through one adb server. It keeps one adapter (with its long-lived
// shell and cached capabilities) per device.
type ADBHost struct {
	client *adb.Client
	// catalog returns the APK of a catalog package.
	catalog func(pkg string) ([]byte, bool)

	mu   sync.Mutex
	devs map[string]*ADBDevice
}

// NewADBHost returns a host over the adb server client talks to; catalog
// returns the APK install_app sends for a catalog package (nil:
// CatalogAPK, the sim catalog's).
func NewADBHost(client *adb.Client, catalog func(pkg string) ([]byte, bool)) *ADBHost {
	if catalog == nil {
		catalog = CatalogAPK
	}
	return &ADBHost{client: client, catalog: catalog, devs: map[string]*ADBDevice{}}
}

// CatalogAPK returns the APK the catalog ships for pkg (sim.CatalogAPK:
// the catalog is the sim's until the service has a store of real APKs).
func CatalogAPK(pkg string) ([]byte, bool) {
	b, err := sim.CatalogAPK(pkg)
	return b, err == nil
}

// Client returns the adb server client.
func (h *ADBHost) Client() *adb.Client { return h.client }

// Device returns the adapter of adb device d (its Serial is the adb
// serial), reading its capabilities from the device the first time.
// Errors: device_unavailable (offline: no adb server answers, naming
// SERVICE_ADB_ADDR), device_disconnected (the server does not have the
// device), backend_command_failed.
func (h *ADBHost) Device(ctx context.Context, d *domain.Device) (*ADBDevice, error) {
	h.mu.Lock()
	a, ok := h.devs[d.ID]
	h.mu.Unlock()
	if ok && a.serial == d.Serial {
		return a, nil
	}
	if d.Serial == "" {
		return nil, domain.Errorf(domain.CodeBackendResolutionFailed, "adb device %s names no serial", d.ID).With("deviceId", d.ID)
	}
	a = &ADBDevice{client: h.client, serial: d.Serial, deviceID: d.ID, session: h.client.NewSession(d.Serial), catalog: h.catalog}
	if err := a.probe(ctx); err != nil {
		a.session.Close()
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.devs[d.ID]; ok {
		old.session.Close()
	}
	h.devs[d.ID] = a
	return a, nil
}

// Forget drops the adapter of a device (its shell and cached
// capabilities), as when its adb connection went away.
func (h *ADBHost) Forget(deviceID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.devs[deviceID]; ok {
		a.session.Close()
		delete(h.devs, deviceID)
	}
}

// Close ends every kept shell.
func (h *ADBHost) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, a := range h.devs {
		a.session.Close()
		delete(h.devs, id)
	}
}

// ADBDevice adapts one device behind an adb server to domain.Backend.
// Input goes through one long-lived shell (adb.Session); screenshots,
// UI dumps and installs through exec: (raw bytes).
type ADBDevice struct {
	client   *adb.Client
	serial   string
	deviceID string
	session  *adb.Session
	catalog  func(string) ([]byte, bool)
	// PerCommand, when set, opens one shell: connection per command
	// instead of the kept one (the benchmark compares the two).
	PerCommand bool

	caps domain.Capabilities
	sdk  int

	mu       sync.Mutex
	screenOn bool
}

// ADB version thresholds.
const (
	sdkExec           = 21 // exec: (raw screenshots, dumps)
	sdkPackageInstall = 24 // cmd package install -S
)

// probe reads what the device is (Android version, screen size, screen
// state) and derives its capabilities.
func (a *ADBDevice) probe(ctx context.Context) error {
	out, err := a.client.Shell(ctx, a.serial, "getprop ro.build.version.sdk")
	if err != nil {
		return a.mapErr(err, "getprop", false)
	}
	a.sdk, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	out, err = a.client.Shell(ctx, a.serial, "wm size")
	if err != nil {
		return a.mapErr(err, "wm size", false)
	}
	w, h := parseWMSize(string(out))
	on, err := a.queryScreen(ctx)
	if err != nil {
		return err
	}
	a.screenOn = on
	actions := []domain.ActionType{}
	for _, t := range domain.ActionTypes {
		if t == domain.ActionInstallApp && a.sdk != 0 && a.sdk < sdkPackageInstall {
			continue
		}
		actions = append(actions, t)
	}
	exec := a.sdk == 0 || a.sdk >= sdkExec
	a.caps = domain.Capabilities{Actions: actions, Screenshot: exec, UISnapshot: exec, Wake: true, Stop: true, Reset: true,
		Width: w, Height: h}
	return nil
}

var wmSizeRe = regexp.MustCompile(`(Physical|Override) size: (\d+)x(\d+)`)

// parseWMSize reads `wm size`; an override wins over the physical size.
func parseWMSize(s string) (w, h int) {
	for _, m := range wmSizeRe.FindAllStringSubmatch(s, -1) {
		w, _ = strconv.Atoi(m[2])
		h, _ = strconv.Atoi(m[3])
		if m[1] == "Override" {
			break
		}
	}
	return w, h
}

// queryScreen asks whether the screen is on (`dumpsys power`); a device
// that does not say is taken to be on.
func (a *ADBDevice) queryScreen(ctx context.Context) (bool, error) {
	out, err := a.client.Shell(ctx, a.serial, "dumpsys power")
	if err != nil {
		return false, a.mapErr(err, "dumpsys power", false)
	}
	return parseScreenOn(string(out)), nil
}

// parseScreenOn reads `dumpsys power`.
func parseScreenOn(s string) bool {
	switch {
	case strings.Contains(s, "mWakefulness=Asleep"), strings.Contains(s, "mWakefulness=Dozing"),
		strings.Contains(s, "Display Power: state=OFF"), strings.Contains(s, "mScreenOn=false"):
		return false
	}
	return true
}

// Serial returns the device's adb serial.
func (a *ADBDevice) Serial() string { return a.serial }

// SDK returns the device's Android API level (0 when it did not say).
func (a *ADBDevice) SDK() int { return a.sdk }

// Capabilities implements domain.Backend, from what probe read.
func (a *ADBDevice) Capabilities() domain.Capabilities { return a.caps }

func (a *ADBDevice) isScreenOn() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.screenOn
}

func (a *ADBDevice) setScreenOn(on bool) {
	a.mu.Lock()
	a.screenOn = on
	a.mu.Unlock()
}

// Observe implements domain.Backend. The screen hash is the SHA-256 of
// the screencap PNG, so a screenshot is taken even when only the hash is
// asked for; it is returned as PNG then too (so a frame keeps it). A UI
// snapshot is taken between two screenshots and retried while they
// differ, so picture, tree and hash are of one screen. Set-of-marks
// pictures are capability_unsupported.
func (a *ADBDevice) Observe(ctx context.Context, opts domain.ObserveOptions) (domain.Observation, error) {
	if !a.caps.Screenshot {
		return domain.Observation{}, domain.Errorf(domain.CodeCapabilityUnsupported, "this device's Android version has no raw screenshots").
			With("capability", "screenshot")
	}
	if opts.Image && opts.Marks != nil {
		return domain.Observation{}, domain.Errorf(domain.CodeCapabilityUnsupported, "adb devices do not draw set-of-marks pictures").
			With("capability", "marks")
	}
	if opts.MaxWidth < 0 {
		return domain.Observation{}, domain.Errorf(domain.CodeInvalidArgument, "maxWidth must be positive")
	}
	shot, err := a.screencap(ctx)
	if err != nil {
		return domain.Observation{}, err
	}
	var tree domain.UIElement
	for attempt := 0; opts.Snapshot; attempt++ {
		if tree, err = a.dumpUI(ctx, shot.w, shot.h); err != nil {
			return domain.Observation{}, err
		}
		again, err := a.screencap(ctx)
		if err != nil {
			return domain.Observation{}, err
		}
		if again.hash == shot.hash || attempt == 3 {
			shot = again
			break
		}
		shot = again
	}
	obs := domain.Observation{ScreenHash: shot.hash, Width: shot.w, Height: shot.h, ScreenOn: a.isScreenOn(), PNG: shot.png}
	if opts.Image {
		if err := a.picture(&obs, shot, opts); err != nil {
			return domain.Observation{}, err
		}
	}
	if opts.Snapshot {
		if obs.Snapshot, err = json.Marshal(tree); err != nil {
			return obs, internal(err)
		}
	}
	return obs, nil
}

// screenshot is one screencap.
type screenshot struct {
	png  []byte
	hash string
	w, h int
}

func (a *ADBDevice) screencap(ctx context.Context) (screenshot, error) {
	out, err := a.client.Exec(ctx, a.serial, "screencap -p", nil)
	if err != nil {
		return screenshot{}, a.mapErr(err, "screencap", false)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(out))
	if err != nil || !bytes.HasSuffix(out, pngEnd) {
		// A device that drops mid-stream leaves a cut PNG behind.
		return screenshot{}, a.disconnected("screencap")
	}
	sum := sha256.Sum256(out)
	return screenshot{png: out, hash: hex.EncodeToString(sum[:16]), w: cfg.Width, h: cfg.Height}, nil
}

// pngEnd is the IEND chunk that closes every PNG.
var pngEnd = []byte{0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82}

func (a *ADBDevice) dumpUI(ctx context.Context, w, h int) (domain.UIElement, error) {
	out, err := a.client.Exec(ctx, a.serial, "uiautomator dump /dev/tty", nil)
	if err != nil {
		return domain.UIElement{}, a.mapErr(err, "uiautomator dump", false)
	}
	tree, err := parseUIDump(out, w, h)
	if err != nil {
		if strings.Contains(err.Error(), "truncated") {
			return domain.UIElement{}, a.disconnected("uiautomator dump")
		}
		return domain.UIElement{}, commandFailed("uiautomator dump").Wrap(err)
	}
	return tree, nil
}

// Act implements domain.Backend. Input is sent through the kept shell;
// the result's ScreenHash is left empty, so the executor takes the after
// frame.
func (a *ADBDevice) Act(ctx context.Context, act domain.Action) (domain.ActionResult, error) {
	if err := a.caps.Check(act); err != nil {
		return domain.ActionResult{}, err
	}
	if !a.isScreenOn() && act.Type != domain.ActionKey && act.Type != domain.ActionInstallApp {
		return domain.ActionResult{}, domain.Errorf(domain.CodeDeviceUnavailable, "the screen is off; wake the device first").
			With("reason", domain.ReasonAsleep)
	}
	res := domain.ActionResult{Changed: true}
	var err error
	switch act.Type {
	case domain.ActionTap:
		err = a.shell(ctx, inputTap(act.X, act.Y))
		res.Description = fmt.Sprintf("tapped (%d, %d)", act.X, act.Y)
	case domain.ActionDoubleTap:
		err = a.shell(ctx, inputTap(act.X, act.Y)+"; "+inputTap(act.X, act.Y))
		res.Description = fmt.Sprintf("double-tapped (%d, %d)", act.X, act.Y)
	case domain.ActionLongPress:
		err = a.shell(ctx, inputSwipe(act.X, act.Y, act.X, act.Y, durationOr(act.DurationMs, 600)))
		res.Description = fmt.Sprintf("long-pressed (%d, %d)", act.X, act.Y)
	case domain.ActionSwipe:
		err = a.shell(ctx, inputSwipe(act.X1, act.Y1, act.X2, act.Y2, durationOr(act.DurationMs, 300)))
		res.Description = fmt.Sprintf("swiped (%d, %d) → (%d, %d)", act.X1, act.Y1, act.X2, act.Y2)
	case domain.ActionTypeText:
		cmd, how := typeTextCommand(act.Text)
		err = a.shell(ctx, cmd)
		res.Description = fmt.Sprintf("typed %d characters (%s)", len([]rune(act.Text)), how)
	case domain.ActionKey:
		var code string
		if code, err = keyCode(act.Key); err != nil {
			return res, err
		}
		err = a.shell(ctx, "input keyevent "+code)
		res.Description = "pressed " + strings.TrimPrefix(code, "KEYCODE_")
		if err == nil && (code == "KEYCODE_POWER" || code == "KEYCODE_SLEEP" || code == "KEYCODE_WAKEUP") {
			if on, qerr := a.queryScreen(ctx); qerr == nil {
				a.setScreenOn(on)
			}
		}
	case domain.ActionOpenApp:
		if !validPackage(act.Package) {
			return res, domain.Errorf(domain.CodeInvalidArgument, "package %q is not a valid Android package name", act.Package)
		}
		err = a.openApp(ctx, act.Package)
		res.Description, res.Foreground = "opened "+act.Package, act.Package
	case domain.ActionInstallApp:
		err = a.install(ctx, act.Package, act.APK)
		res.Description = "installed " + act.Package
	default:
		return res, domain.Errorf(domain.CodeCapabilityUnsupported, "an adb device cannot %s", act.Type).With("capability", string(act.Type))
	}
	if err != nil {
		return domain.ActionResult{}, err
	}
	res.ScreenOn = a.isScreenOn()
	return res, nil
}

func (a *ADBDevice) openApp(ctx context.Context, pkg string) error {
	res, err := a.run(ctx, "monkey -p "+pkg+" -c android.intent.category.LAUNCHER 1")
	if err != nil {
		return a.mapErr(err, "monkey", true)
	}
	if bytes.Contains(res.Output, []byte("No activities found")) || bytes.Contains(res.Output, []byte("monkey aborted")) {
		return domain.Errorf(domain.CodeInvalidArgument, "%s is not installed", pkg).With("reason", "app_not_installed")
	}
	if res.Status != 0 {
		return commandFailed("monkey")
	}
	return nil
}

// install streams an APK to the device: file, the app store's (already
// checked against its SHA-256), or the backend's catalog build of pkg.
func (a *ADBDevice) install(ctx context.Context, pkg string, file *domain.APK) error {
	apk, ok := a.catalog(pkg)
	if file != nil {
		apk, ok = file.Data, true
	}
	if !ok || !validPackage(pkg) {
		return domain.Errorf(domain.CodeInvalidArgument, "%s is not in the catalog", pkg).With("reason", "not_in_catalog")
	}
	out, err := a.client.Exec(ctx, a.serial, fmt.Sprintf("cmd package install -S %d", len(apk)), bytes.NewReader(apk))
	if err != nil {
		return a.mapErr(err, "cmd package install", true)
	}
	if !bytes.Contains(out, []byte("Success")) {
		if len(out) == 0 {
			return a.outcomeUnknown("cmd package install")
		}
		if m := installFailure.FindSubmatch(out); m != nil {
			// The package manager's own words: the reason an installation
			// reports.
			return domain.Errorf(domain.CodeInvalidArgument, "the device refused the APK: %s", m[1]).
				With("reason", "install_failed").With("deviceSays", string(m[1]))
		}
		return commandFailed("cmd package install")
	}
	return nil
}

// parseDFAvailable reads the Available column (1K blocks) of df's line
// for /data, in bytes; nil when there is none.
func parseDFAvailable(out string) *int64 {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[len(f)-1] == "/data" {
			// A count that is negative, or whose bytes would overflow, is
			// no free space a phone has: the storage stays unknown.
			if kb, err := strconv.ParseInt(f[3], 10, 64); err == nil && kb >= 0 && kb <= math.MaxInt64/1024 {
				b := kb * 1024
				return &b
			}
		}
	}
	return nil
}

// installFailure is the package manager's refusal: Failure [CODE: detail].
var installFailure = regexp.MustCompile(`Failure \[([^\]\n]{1,300})\]`)

// Software implements domain.SoftwareReader: the release, API level and
// ABIs from the system properties, the packages from the package manager
// (system and third-party apart), the free space of /data from df. The
// device's package list carries no version names; a df the adapter cannot
// read leaves the storage unknown.
func (a *ADBDevice) Software(ctx context.Context) (domain.DeviceSoftware, error) {
	prop := func(name string) (string, error) {
		out, err := a.client.Shell(ctx, a.serial, "getprop "+name)
		if err != nil {
			return "", a.mapErr(err, "getprop", false)
		}
		return strings.TrimSpace(string(out)), nil
	}
	release, err := prop("ro.build.version.release")
	if err != nil {
		return domain.DeviceSoftware{}, err
	}
	abis, err := prop("ro.product.cpu.abilist")
	if err != nil {
		return domain.DeviceSoftware{}, err
	}
	sw := domain.DeviceSoftware{OSVersion: release, SDK: a.sdk, ABIs: []string{}, Apps: []domain.InstalledApp{},
		CanInstall: slices.Contains(a.caps.Actions, domain.ActionInstallApp)}
	for _, abi := range strings.Split(abis, ",") {
		if abi = strings.TrimSpace(abi); abi != "" {
			sw.ABIs = append(sw.ABIs, abi)
		}
	}
	if out, err := a.client.Shell(ctx, a.serial, "df -k /data"); err == nil {
		sw.StorageFreeBytes = parseDFAvailable(string(out))
	}
	for _, kind := range []struct {
		flag   string
		system bool
	}{{"-s", true}, {"-3", false}} {
		out, err := a.client.Shell(ctx, a.serial, "pm list packages "+kind.flag)
		if err != nil {
			return domain.DeviceSoftware{}, a.mapErr(err, "pm list packages", false)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if pkg, ok := strings.CutPrefix(strings.TrimSpace(line), "package:"); ok && pkg != "" {
				sw.Apps = append(sw.Apps, domain.InstalledApp{Package: pkg, System: kind.system})
			}
		}
	}
	return sw, nil
}

// Wake implements domain.Backend.
func (a *ADBDevice) Wake(ctx context.Context) error {
	if err := a.shell(ctx, "input keyevent KEYCODE_WAKEUP"); err != nil {
		return outcomeAsDisconnected(err)
	}
	a.setScreenOn(true)
	return nil
}

// Stop implements domain.Backend: the screen goes off.
func (a *ADBDevice) Stop(ctx context.Context) error {
	if err := a.shell(ctx, "input keyevent KEYCODE_SLEEP"); err != nil {
		return outcomeAsDisconnected(err)
	}
	a.setScreenOn(false)
	return nil
}

// Reset implements domain.Backend as far as adb can: the data of every
// third-party app is cleared (`pm clear`), the screen woken and the home
// screen shown. Installed apps stay installed.
func (a *ADBDevice) Reset(ctx context.Context) error {
	res, err := a.run(ctx, "pm list packages -3")
	if err != nil {
		return outcomeAsDisconnected(a.mapErr(err, "pm list packages", true))
	}
	if res.Status != 0 {
		return commandFailed("pm list packages")
	}
	var cmds []string
	for _, line := range strings.Split(string(res.Output), "\n") {
		if pkg, ok := strings.CutPrefix(strings.TrimSpace(line), "package:"); ok && validPackage(pkg) {
			cmds = append(cmds, "pm clear "+pkg+" >/dev/null")
		}
	}
	cmds = append(cmds, "input keyevent KEYCODE_WAKEUP", "input keyevent KEYCODE_HOME")
	if err := a.shell(ctx, strings.Join(cmds, " && ")); err != nil {
		return outcomeAsDisconnected(err)
	}
	a.setScreenOn(true)
	return nil
}

// SetNetworkProxy implements domain.NetworkProxyConfigurer with Android's
// global HTTP proxy setting (`settings put global http_proxy host:port`;
// `:0` clears it). Android's setting carries no credentials: the phone
// reaches the proxy by its address alone (docs/decisions.md, "Managed
// proxies").
func (a *ADBDevice) SetNetworkProxy(ctx context.Context, p *domain.NetworkProxy) error {
	value := ":0"
	if p != nil {
		if p.Host == "" || p.Port <= 0 || p.Port > 65535 || strings.ContainsAny(p.Host, " ;'\"&|$`") {
			return domain.Errorf(domain.CodeInvalidArgument, "a network proxy needs a host and a port 1-65535")
		}
		value = net.JoinHostPort(p.Host, strconv.Itoa(p.Port))
	}
	return a.shell(ctx, "settings put global http_proxy "+value)
}

// run runs one command line in the kept shell (or, with PerCommand, a
// shell of its own) and returns what it printed and its status.
func (a *ADBDevice) run(ctx context.Context, cmd string) (adb.Result, error) {
	if a.PerCommand {
		out, err := a.client.Shell(ctx, a.serial, cmd+"; echo __PF_STATUS__$?")
		if err != nil {
			return adb.Result{}, err
		}
		i := bytes.LastIndex(out, []byte("__PF_STATUS__"))
		if i < 0 {
			return adb.Result{}, fmt.Errorf("%w: no status from %s", adb.ErrDisconnected, cmd)
		}
		st, _ := strconv.Atoi(strings.TrimSpace(string(out[i+len("__PF_STATUS__"):])))
		return adb.Result{Output: bytes.ReplaceAll(out[:i], []byte("\r\n"), []byte("\n")), Status: st}, nil
	}
	return a.session.Run(ctx, cmd)
}

// shell runs an input command line: a non-zero status is
// backend_command_failed naming the command (its output is not shown).
func (a *ADBDevice) shell(ctx context.Context, cmd string) error {
	res, err := a.run(ctx, cmd)
	if err != nil {
		return a.mapErr(err, commandName(cmd), true)
	}
	if res.Status != 0 {
		return commandFailed(commandName(cmd))
	}
	return nil
}

// commandName is how an error names a command line: its first two words.
func commandName(cmd string) string {
	f := strings.Fields(cmd)
	if len(f) > 2 {
		f = f[:2]
	}
	return strings.Join(f, " ")
}

// mapErr turns the adb client's errors into domain errors. dispatched
// says the command may have reached the device, so a lost connection is
// action_outcome_unknown rather than device_disconnected.
func (a *ADBDevice) mapErr(err error, cmd string, dispatched bool) error {
	var de *domain.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &de):
		return err
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		if dispatched {
			return a.outcomeUnknown(cmd)
		}
		return err
	case errors.Is(err, adb.ErrServerUnavailable):
		return domain.Errorf(domain.CodeDeviceUnavailable, "%s", err.Error()).
			With("reason", domain.ReasonOffline).With("deviceId", a.deviceID).WithRetryable(true).Wrap(err)
	case errors.Is(err, adb.ErrDeviceGone):
		return a.disconnected(cmd).Wrap(err)
	case errors.Is(err, adb.ErrDisconnected):
		if dispatched {
			return a.outcomeUnknown(cmd).Wrap(err)
		}
		return a.disconnected(cmd).Wrap(err)
	}
	return commandFailed(cmd).Wrap(err)
}

func (a *ADBDevice) disconnected(cmd string) *domain.Error {
	return domain.Errorf(domain.CodeDeviceDisconnected, "device %s (adb %s) dropped off adb during `%s`", a.deviceID, a.serial, cmd).
		With("deviceId", a.deviceID).WithRetryable(true)
}

func (a *ADBDevice) outcomeUnknown(cmd string) *domain.Error {
	return domain.Errorf(domain.CodeActionOutcomeUnknown, "device %s (adb %s) dropped off adb during `%s`; it may have happened",
		a.deviceID, a.serial, cmd).With("deviceId", a.deviceID)
}

// outcomeAsDisconnected: wake, stop and reset have no unknown outcome in
// their contract; a drop during them is device_disconnected.
func outcomeAsDisconnected(err error) error {
	if domain.ErrorCode(err) == domain.CodeActionOutcomeUnknown {
		e := domain.AsError(err)
		return domain.Errorf(domain.CodeDeviceDisconnected, "%s", e.Message).WithRetryable(true).Wrap(err)
	}
	return err
}

func commandFailed(cmd string) *domain.Error {
	return domain.Errorf(domain.CodeBackendCommandFailed, "the device failed `%s`", cmd).With("command", cmd)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func durationOr(ms, def int) int {
	if ms > 0 {
		return ms
	}
	return def
}

func inputTap(x, y int) string { return fmt.Sprintf("input tap %d %d", x, y) }

func inputSwipe(x1, y1, x2, y2, ms int) string {
	return fmt.Sprintf("input swipe %d %d %d %d %d", x1, y1, x2, y2, ms)
}

// Text input methods, as the action's description reports them.
const (
	viaInputText   = "input text"
	viaADBKeyBoard = "ADBKeyBoard broadcast"
)

// typeTextCommand returns the command typing s: `input text` for
// printable ASCII (spaces as %s, the whole quoted for sh), and otherwise
// the ADBKeyBoard convention, `am broadcast -a ADB_INPUT_B64 --es msg
// <base64>`, which an installed ADBKeyBoard IME types as given. A text
// holding "%s" itself goes the second way, since `input text` would turn
// it into a space.
func typeTextCommand(s string) (cmd, how string) {
	ascii := s != "" && !strings.Contains(s, "%s")
	for _, r := range s {
		if r < 0x20 || r > 0x7e {
			ascii = false
			break
		}
	}
	if ascii {
		return "input text " + shellQuote(strings.ReplaceAll(s, " ", "%s")), viaInputText
	}
	return "am broadcast -a ADB_INPUT_B64 --es msg " + base64.StdEncoding.EncodeToString([]byte(s)), viaADBKeyBoard
}

// shellQuote quotes s as one sh word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

var (
	keyRe     = regexp.MustCompile(`^[A-Z0-9_]+$`)
	packageRe = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+$`)
)

// keyAliasesADB are the key names the sim accepts that Android spells
// otherwise.
var keyAliasesADB = map[string]string{"BACKSPACE": "DEL", "RETURN": "ENTER", "RECENTS": "APP_SWITCH", "OVERVIEW": "APP_SWITCH"}

// keyCode returns the KEYCODE_ name of a key (name, KEYCODE_ name, alias
// or number).
func keyCode(key string) (string, error) {
	k := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(key)), "KEYCODE_")
	if a, ok := keyAliasesADB[k]; ok {
		k = a
	}
	if !keyRe.MatchString(k) {
		return "", domain.Errorf(domain.CodeInvalidArgument, "unknown key %q", key)
	}
	if _, err := strconv.Atoi(k); err == nil {
		return k, nil
	}
	return "KEYCODE_" + k, nil
}

func validPackage(p string) bool { return len(p) <= 255 && packageRe.MatchString(p) }

// picture fills obs's image as opts ask: the screencap PNG itself, or a
// smaller PNG or a JPEG drawn from it in Go.
func (a *ADBDevice) picture(obs *domain.Observation, shot screenshot, opts domain.ObserveOptions) error {
	jpg := opts.Format == domain.ImageJPEG
	if !jpg && (opts.MaxWidth == 0 || opts.MaxWidth >= shot.w) {
		obs.Image, obs.ImageType, obs.ImageWidth, obs.ImageHeight = shot.png, "image/png", shot.w, shot.h
		return nil
	}
	img, err := png.Decode(bytes.NewReader(shot.png))
	if err != nil {
		return a.disconnected("screencap")
	}
	data, w, h, err := encodePicture(img, opts.MaxWidth, jpg, opts.Quality)
	if err != nil {
		return internal(err)
	}
	obs.Image, obs.ImageWidth, obs.ImageHeight = data, w, h
	obs.ImageType = "image/png"
	if jpg {
		obs.ImageType = "image/jpeg"
		obs.PNG = nil // a JPEG was asked for: no plain PNG of this look
	} else {
		obs.PNG = data
	}
	// The frame keeps no full-size PNG then; the screencap is its replay,
	// from which adbRenderer draws it.
	obs.Replay = shot.png
	return nil
}

var _ domain.Backend = (*ADBDevice)(nil)
