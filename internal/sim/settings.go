package sim

import (
	"fmt"
	"hash/fnv"
	"image"
	"image/color"
	"slices"
	"strings"
	"unicode/utf8"
)

// Settings toggles, by the keys the state stores them under.
const (
	toggleWifi        = "wifi"
	toggleBluetooth   = "bluetooth"
	toggleAirplane    = "airplane"
	toggleMobileData  = "mobile_data"
	toggleHotspot     = "hotspot"
	toggleNFC         = "nfc"
	toggleDark        = "dark_theme"
	toggleBrightness  = "adaptive_brightness"
	toggleRotate      = "auto_rotate"
	toggleLocation    = "location"
	toggleDND         = "do_not_disturb"
	toggleSaver       = "battery_saver"
	toggleAdaptiveBat = "adaptive_battery"
	toggleVibrate     = "vibrate"
	toggleLockNotif   = "lock_screen_notifications"
	toggleFindDevice  = "find_my_device"
	toggleTalkBack    = "talkback"
	toggleCaptions    = "live_caption"
	toggleAutoTime    = "automatic_time"
)

func defaultToggles() map[string]bool {
	return map[string]bool{
		toggleWifi: true, toggleBluetooth: false, toggleAirplane: false, toggleMobileData: true,
		toggleHotspot: false, toggleNFC: true, toggleDark: false, toggleBrightness: true,
		toggleRotate: false, toggleLocation: true, toggleDND: false, toggleSaver: false,
		toggleAdaptiveBat: true, toggleVibrate: true, toggleLockNotif: true, toggleFindDevice: true,
		toggleTalkBack: false, toggleCaptions: false, toggleAutoTime: true,
	}
}

// Settings pages.
const (
	pageMain    = "main"
	pageAbout   = "about"
	pageApps    = "apps"
	pageAppInfo = "app:" // followed by a package name
	// pageScreenLock sets a screen lock password: its field is marked
	// password in the UI tree (reached from Security & privacy).
	pageScreenLock = "screen_lock"
)

// settingsRow is one row of a settings page: a toggle, a link to another
// page, or a read-only value.
type settingsRow struct {
	key     string
	title   string
	summary string
	toggle  string // toggle key, for switch rows
	page    string // target page, for link rows
	badge   color.RGBA
}

var subpages = []struct{ id, title, summary string }{
	{"network", "Network & internet", "Wi-Fi, mobile data, hotspot"},
	{"connected", "Connected devices", "Bluetooth, NFC"},
	{"notifications", "Notifications", "Notification history, conversations"},
	{pageApps, "Apps", ""},
	{"battery", "Battery", ""},
	{"storage", "Storage", ""},
	{"sound", "Sound & vibration", ""},
	{"display", "Display", "Dark theme, brightness, auto-rotate"},
	{"security", "Security & privacy", "Screen lock, Find My Device"},
	{"location", "Location", ""},
	{"accessibility", "Accessibility", "TalkBack, Live Caption"},
	{"system", "System", "Languages, date & time, updates"},
	{pageAbout, "About phone", ""},
}

func knownSettingsPage(id string) bool {
	if id == pageMain || id == pageScreenLock {
		return true
	}
	if pkg, ok := strings.CutPrefix(id, pageAppInfo); ok {
		_, known := appByPkg(pkg)
		return known
	}
	return slices.ContainsFunc(subpages, func(s struct{ id, title, summary string }) bool { return s.id == id })
}

func pageTitle(id string) string {
	if id == pageScreenLock {
		return "Screen lock"
	}
	if pkg, ok := strings.CutPrefix(id, pageAppInfo); ok {
		a, _ := appByPkg(pkg)
		return a.info.Label
	}
	for _, s := range subpages {
		if s.id == id {
			return s.title
		}
	}
	return "Settings"
}

var badgeColors = []color.RGBA{
	rgb(0x1a, 0x73, 0xe8), rgb(0x18, 0x80, 0x38), rgb(0xe3, 0x74, 0x00), rgb(0xa1, 0x42, 0xf4),
	rgb(0xd9, 0x30, 0x25), rgb(0x00, 0x89, 0x7b), rgb(0x5f, 0x63, 0x68), rgb(0xc2, 0x18, 0x5b),
}

func onOff(v bool) string {
	if v {
		return "On"
	}
	return "Off"
}

// serialNumber derives stable per-device numbers from the serial.
func (p *Phone) serialNumber(salt string, mod uint32) uint32 {
	h := fnv.New32a()
	h.Write([]byte(salt + p.st.Serial))
	return h.Sum32() % mod
}

func (p *Phone) toggleRow(key, title string) settingsRow {
	tg := p.st.Settings.Toggles
	summary := onOff(tg[key])
	switch key {
	case toggleWifi:
		if tg[key] {
			summary = "Connected to PhoneFleet-5G"
		}
	case toggleMobileData:
		if tg[key] {
			summary = "PhoneFleet Mobile · 5G"
		}
	case toggleLocation:
		if tg[key] {
			summary = "On · 3 apps have access"
		}
	case toggleSaver:
		summary = fmt.Sprintf("%s · %d%%", onOff(tg[key]), p.battery())
	}
	return settingsRow{key: key, title: title, summary: summary, toggle: key}
}

func (p *Phone) linkRow(id string) settingsRow {
	for _, s := range subpages {
		if s.id == id {
			r := settingsRow{key: id, title: s.title, summary: s.summary, page: id}
			switch id {
			case pageApps:
				r.summary = fmt.Sprintf("%d apps installed", len(p.st.Installed))
			case "battery":
				r.summary = fmt.Sprintf("%d%%", p.battery())
			case "storage":
				r.summary = fmt.Sprintf("%d%% used · %d GB free", 20+p.serialNumber("storage", 30), 64+p.serialNumber("free", 40))
			case "sound":
				r.summary = fmt.Sprintf("Media volume %d of %d", p.st.Volume, maxVolume)
			case "location":
				r.summary = onOff(p.st.Settings.Toggles[toggleLocation])
			case pageAbout:
				r.summary = p.model.DisplayName
			}
			return r
		}
	}
	return settingsRow{key: id, title: id}
}

func info(key, title, value string) settingsRow {
	return settingsRow{key: key, title: title, summary: value}
}

// rows returns the rows of a settings page in display order.
func (p *Phone) rows(page string) []settingsRow {
	m := p.model
	var rows []settingsRow
	switch page {
	case pageMain:
		rows = []settingsRow{
			p.toggleRow(toggleWifi, "Wi-Fi"), p.toggleRow(toggleBluetooth, "Bluetooth"),
			p.toggleRow(toggleAirplane, "Airplane mode"), p.toggleRow(toggleMobileData, "Mobile data"),
			p.toggleRow(toggleHotspot, "Hotspot & tethering"), p.toggleRow(toggleNFC, "NFC"),
			p.toggleRow(toggleDark, "Dark theme"), p.toggleRow(toggleBrightness, "Adaptive brightness"),
			p.toggleRow(toggleRotate, "Auto-rotate screen"), p.toggleRow(toggleLocation, "Location"),
			p.toggleRow(toggleDND, "Do Not Disturb"), p.toggleRow(toggleSaver, "Battery saver"),
		}
		for _, s := range subpages {
			if s.id != "location" {
				rows = append(rows, p.linkRow(s.id))
			}
		}
	case "network":
		rows = []settingsRow{p.toggleRow(toggleWifi, "Wi-Fi"), p.toggleRow(toggleMobileData, "Mobile data"),
			p.toggleRow(toggleHotspot, "Hotspot & tethering"), p.toggleRow(toggleAirplane, "Airplane mode"),
			info("ip", "IP address", p.ipAddress()), info("proxy", "Proxy", p.proxySummary())}
	case "connected":
		rows = []settingsRow{p.toggleRow(toggleBluetooth, "Bluetooth"), p.toggleRow(toggleNFC, "NFC"),
			info("paired", "Previously connected devices", "None")}
	case "notifications":
		rows = []settingsRow{p.toggleRow(toggleLockNotif, "Notifications on lock screen"),
			p.toggleRow(toggleDND, "Do Not Disturb"), info("history", "Notification history", "No recent notifications")}
	case pageApps:
		for _, pkg := range p.st.Installed {
			a, _ := appByPkg(pkg)
			rows = append(rows, settingsRow{key: pkg, title: a.info.Label, summary: "Version " + a.info.Version, page: pageAppInfo + pkg})
		}
	case "battery":
		rows = []settingsRow{info("level", "Battery level", fmt.Sprintf("%d%%", p.battery())),
			p.toggleRow(toggleSaver, "Battery saver"), p.toggleRow(toggleAdaptiveBat, "Adaptive Battery"),
			info("since", "Screen time since full charge", fmt.Sprintf("%d min", p.st.Events))}
	case "storage":
		rows = []settingsRow{info("used", "Used", fmt.Sprintf("%d%%", 20+p.serialNumber("storage", 30))),
			info("free", "Free", fmt.Sprintf("%d GB", 64+p.serialNumber("free", 40))),
			info("apps", "Apps", fmt.Sprintf("%d installed", len(p.st.Installed))),
			info("notes", "Notes", fmt.Sprintf("%d saved", len(p.st.Notes.Notes)))}
	case "sound":
		rows = []settingsRow{info("media", "Media volume", fmt.Sprintf("%d of %d", p.st.Volume, maxVolume)),
			p.toggleRow(toggleVibrate, "Vibrate for calls"), p.toggleRow(toggleDND, "Do Not Disturb")}
	case "display":
		rows = []settingsRow{p.toggleRow(toggleDark, "Dark theme"), p.toggleRow(toggleBrightness, "Adaptive brightness"),
			p.toggleRow(toggleRotate, "Auto-rotate screen"),
			info("resolution", "Screen resolution", fmt.Sprintf("%d × %d", m.Width, m.Height)),
			info("timeout", "Screen timeout", "Never (simulated)")}
	case "security":
		lock := "None"
		if p.st.Settings.LockSet {
			lock = "Password"
		}
		rows = []settingsRow{{key: "lock", title: "Screen lock", summary: lock, page: pageScreenLock}, p.toggleRow(toggleFindDevice, "Find My Device"),
			info("patch", "Security update", "6 January 2025")}
	case "location":
		rows = []settingsRow{p.toggleRow(toggleLocation, "Use location"), info("recent", "Recent access", "Browser, Notes")}
	case "accessibility":
		rows = []settingsRow{p.toggleRow(toggleTalkBack, "TalkBack"), p.toggleRow(toggleCaptions, "Live Caption")}
	case "system":
		rows = []settingsRow{info("lang", "Languages", "English (United Kingdom)"),
			p.toggleRow(toggleAutoTime, "Set time automatically"),
			info("time", "Date & time", p.clock().Format("Mon 2 Jan 2006, 15:04")),
			info("update", "System update", "Up to date")}
	case pageAbout:
		rows = []settingsRow{info("name", "Device name", m.DisplayName), info("model", "Model", m.Manufacturer+" "+m.DisplayName),
			info("serial", "Serial number", p.st.Serial), info("android", "Android version", m.AndroidVersion),
			info("build", "Build number", "PFSIM."+strings.ReplaceAll(ClockStart().Format("06.01.02"), ".", "")+".001"),
			info("ip", "IP address", p.ipAddress()), info("mac", "Wi-Fi MAC address", p.macAddress()),
			info("uptime", "Up time", fmt.Sprintf("%d:%02d", p.st.Events/60, p.st.Events%60))}
	default:
		if pkg, ok := strings.CutPrefix(page, pageAppInfo); ok {
			a, _ := appByPkg(pkg)
			kind := "Installed from Store"
			if a.info.System {
				kind = "Pre-installed"
			}
			rows = []settingsRow{info("package", "Package", pkg), info("version", "Version", a.info.Version),
				info("source", "Source", kind), info("about", "Description", a.info.Description)}
		}
	}
	for i := range rows {
		rows[i].badge = badgeColors[i%len(badgeColors)]
	}
	return rows
}

func (p *Phone) ipAddress() string {
	if !p.st.Settings.Toggles[toggleWifi] {
		return "Unavailable"
	}
	return fmt.Sprintf("192.168.1.%d", 2+p.serialNumber("ip", 250))
}

func (p *Phone) macAddress() string {
	v := p.serialNumber("mac", 1<<24)
	return fmt.Sprintf("02:5f:a1:%02x:%02x:%02x", v>>16, (v>>8)&0xff, v&0xff)
}

// flip toggles a setting, with airplane mode switching the radios off and
// restoring them afterwards as Android does.
func (p *Phone) flip(key, title string) string {
	s := &p.st.Settings
	on := !s.Toggles[key]
	s.Toggles[key] = on
	if key == toggleAirplane {
		radios := []string{toggleWifi, toggleBluetooth, toggleMobileData}
		if on {
			s.AirplaneSaved = nil
			for _, r := range radios {
				if s.Toggles[r] {
					s.AirplaneSaved = append(s.AirplaneSaved, r)
					s.Toggles[r] = false
				}
			}
		} else {
			for _, r := range s.AirplaneSaved {
				s.Toggles[r] = true
			}
			s.AirplaneSaved = nil
		}
	}
	return fmt.Sprintf("turned %s %s", title, strings.ToLower(onOff(on)))
}

func (p *Phone) settingsBack() (string, bool) {
	s := &p.st.Settings
	if len(s.Stack) <= 1 {
		return "", false
	}
	if p.st.Focus == focusLockPassword {
		p.blur() // leaving the page abandons the password typed
	}
	s.Stack = s.Stack[:len(s.Stack)-1]
	return "back to " + pageTitle(s.Stack[len(s.Stack)-1].Page), true
}

func (p *Phone) settingsView(c image.Rectangle) (*node, color.RGBA) {
	pal := p.palette()
	W := p.model.Width
	v := newNode(classFrame, PkgSettings, "android:id/content", c)
	v.fill = pal.bg
	s := &p.st.Settings
	cur := &s.Stack[len(s.Stack)-1]
	var headerB int
	if cur.Page == pageMain {
		headerB = c.Min.Y + p.d(240)
		v.add(newLabel(PkgSettings, PkgSettings+":id/collapsing_toolbar", "Settings", image.Rect(0, c.Min.Y, W, headerB), p.face(fontRegular, 88), pal.text, alignLeft, p.d(56)))
	} else {
		headerB = c.Min.Y + p.d(168)
		bar := newNode(classFrame, PkgSettings, PkgSettings+":id/action_bar", image.Rect(0, c.Min.Y, W, headerB))
		bar.fill = pal.bg
		up := newLabel(PkgSettings, PkgSettings+":id/navigate_up", "←", image.Rect(p.d(16), c.Min.Y, p.d(16)+p.d(168), headerB), p.face(fontRegular, 64), pal.text, alignCenter, 0)
		up.el.Class, up.el.Text, up.el.ContentDesc = classImageButton, "", "Navigate up"
		up.onTap = func() (string, error) {
			desc, _ := p.settingsBack()
			return desc, nil
		}
		bar.add(up, newLabel(PkgSettings, PkgSettings+":id/action_bar_title", pageTitle(cur.Page), image.Rect(p.d(200), c.Min.Y, W-p.d(40), headerB), p.face(fontRegular, 60), pal.text, alignLeft, 0))
		v.add(bar)
	}
	if cur.Page == pageScreenLock {
		v.add(p.screenLockForm(image.Rect(0, headerB, W, c.Max.Y)))
		return v, pal.bg
	}
	list := newNode(classRecycler, PkgSettings, PkgSettings+":id/recycler_view", image.Rect(0, headerB, W, c.Max.Y))
	rows := p.rows(cur.Page)
	rowH := p.d(176)
	off := p.scroller(list, &cur.Scroll, len(rows)*rowH+p.d(24), pageTitle(cur.Page))
	accent := rgb(0x1a, 0x73, 0xe8)
	if pal.dark {
		accent = rgb(0x8a, 0xb4, 0xf8)
	}
	titleFk, sumFk := p.face(fontRegular, 48), p.face(fontRegular, 38)
	for i, r := range rows {
		y := list.rect.Min.Y + i*rowH - off
		row := newNode(classLinear, PkgSettings, "", image.Rect(0, y, W, y+rowH))
		row.key = "row:" + r.key
		icon := newNode(classImage, PkgSettings, PkgSettings+":id/icon", image.Rect(p.d(56), y+(rowH-p.d(84))/2, p.d(56)+p.d(84), y+(rowH+p.d(84))/2))
		icon.icon, icon.iconCol, icon.fill2, icon.badge = iconBadge, r.badge, white(), r.title
		row.add(icon)
		textR := W - p.d(56)
		if r.toggle != "" {
			textR = W - p.d(56) - p.d(140) - p.d(32)
		}
		row.add(newLabel(PkgSettings, PkgSettings+":id/title", r.title, image.Rect(p.d(184), y+p.d(28), textR, y+p.d(28)+p.d(66)), titleFk, pal.text, alignLeft, 0))
		if r.summary != "" {
			row.add(newLabel(PkgSettings, PkgSettings+":id/summary", r.summary, image.Rect(p.d(184), y+p.d(96), textR, y+p.d(96)+p.d(52)), sumFk, pal.text2, alignLeft, 0))
		}
		switch {
		case r.toggle != "":
			key, title := r.toggle, r.title
			act := func() (string, error) { return p.flip(key, title), nil }
			row.onTap = act
			sw := newNode(classSwitch, PkgSettings, PkgSettings+":id/switch_widget", image.Rect(W-p.d(56)-p.d(140), y+(rowH-p.d(84))/2, W-p.d(56), y+(rowH+p.d(84))/2))
			sw.el.Checkable, sw.el.Checked = true, s.Toggles[key]
			sw.el.Text = onOff(s.Toggles[key])
			sw.icon, sw.iconCol, sw.fill2, sw.fill3 = iconSwitch, accent, pal.text2, pal.bg
			sw.onTap = act
			row.add(sw)
		case r.page != "":
			target, title := r.page, r.title
			row.onTap = func() (string, error) {
				s.Stack = append(s.Stack, pageState{Page: target})
				return "opened " + title, nil
			}
		}
		list.add(row)
	}
	v.add(list)
	return v, pal.bg
}

// setLockPassword sets the screen lock to the password typed, and goes
// back to Security & privacy.
func (p *Phone) setLockPassword() string {
	s := &p.st.Settings
	n := utf8.RuneCountInString(s.PasswordDraft)
	if n < minLockPassword {
		return fmt.Sprintf("the password needs at least %d characters", minLockPassword)
	}
	s.LockSet = true
	p.blur()
	if len(s.Stack) > 1 {
		s.Stack = s.Stack[:len(s.Stack)-1]
	}
	p.toast("Screen lock set")
	return fmt.Sprintf("set a screen lock password of %d characters", n)
}

// minLockPassword is the shortest screen lock password, as Android's.
const minLockPassword = 4

// screenLockForm is the Screen lock page: a password field (its text
// hidden: dots on the screen and in the tree, password=true) and Set.
func (p *Phone) screenLockForm(r image.Rectangle) *node {
	pal := p.palette()
	W := p.model.Width
	accent := rgb(0x1a, 0x73, 0xe8)
	if pal.dark {
		accent = rgb(0x8a, 0xb4, 0xf8)
	}
	form := newNode(classLinear, PkgSettings, PkgSettings+":id/lock_form", r)
	y := r.Min.Y + p.d(48)
	form.add(newLabel(PkgSettings, PkgSettings+":id/headline", "Choose a password", image.Rect(p.d(56), y, W-p.d(56), y+p.d(80)),
		p.face(fontRegular, 56), pal.text, alignLeft, 0))
	y += p.d(96)
	form.add(newLabel(PkgSettings, PkgSettings+":id/sud_layout_description", fmt.Sprintf("At least %d characters", minLockPassword),
		image.Rect(p.d(56), y, W-p.d(56), y+p.d(56)), p.face(fontRegular, 38), pal.text2, alignLeft, 0))
	y += p.d(88)
	s := &p.st.Settings
	focused := p.st.Focus == focusLockPassword
	fr := image.Rect(p.d(56), y, W-p.d(56), y+p.d(150))
	field := newNode(classEdit, PkgSettings, PkgSettings+":id/password_entry", fr)
	dots := strings.Repeat("•", utf8.RuneCountInString(s.PasswordDraft))
	field.el.Text, field.el.Hint, field.el.Password = dots, "Password", true
	field.el.Focusable, field.el.Focused = true, focused
	field.fill, field.radius = pal.surface, p.d(20)
	field.stroke, field.strokeW = pal.divider, p.d(3)
	if focused {
		field.stroke, field.strokeW = accent, p.d(5)
	}
	fk := p.face(fontRegular, 48)
	tb := &textBox{face: fk, col: pal.text, padX: p.d(36), cursor: focused, cursorCol: accent, lines: []string{dots}}
	if dots == "" && !focused {
		tb.lines, tb.col = []string{"Password"}, pal.text2
	}
	field.txt = tb
	field.onTap = func() (string, error) {
		if p.st.Focus == focusLockPassword {
			return "the password field already has focus", nil
		}
		p.st.Focus = focusLockPassword
		return "focused the password field", nil
	}
	form.add(field)
	y += p.d(150) + p.d(48)
	br := image.Rect(W-p.d(56)-p.d(280), y, W-p.d(56), y+p.d(130))
	set := newLabel(PkgSettings, PkgSettings+":id/set_password", "Set", br, p.face(fontMedium, 48), white(), alignCenter, 0)
	set.el.Class = classButton
	set.fill, set.radius = accent, p.d(65)
	if utf8.RuneCountInString(s.PasswordDraft) < minLockPassword {
		set.el.Enabled = false
		set.fill, set.txt.col = pal.surface2, pal.text2
	}
	set.onTap = func() (string, error) { return p.setLockPassword(), nil }
	form.add(set)
	return form
}
