package sim

import (
	"fmt"
	"image"
	"image/color"
)

// Android widget classes used in snapshots.
const (
	classFrame       = "android.widget.FrameLayout"
	classLinear      = "android.widget.LinearLayout"
	classText        = "android.widget.TextView"
	classButton      = "android.widget.Button"
	classImage       = "android.widget.ImageView"
	classImageButton = "android.widget.ImageButton"
	classEdit        = "android.widget.EditText"
	classSwitch      = "android.widget.Switch"
	classRecycler    = "androidx.recyclerview.widget.RecyclerView"
	classScroll      = "android.widget.ScrollView"
	classWebView     = "android.webkit.WebView"
	classSeekBar     = "android.widget.SeekBar"
)

// palette is the system theme; the Dark theme toggle in Settings switches it
// for every app.
type palette struct {
	dark                                bool
	bg, surface, surface2, text, text2  color.RGBA
	divider, wallpaper, navBg, navIcon  color.RGBA
	toastBg, toastText, scrim, selected color.RGBA
}

func (p *Phone) palette() palette {
	if p.st.Settings.Toggles[toggleDark] {
		return palette{dark: true,
			bg: rgb(0x12, 0x12, 0x14), surface: rgb(0x20, 0x21, 0x24), surface2: rgb(0x30, 0x31, 0x34),
			text: rgb(0xe8, 0xea, 0xed), text2: rgb(0x9a, 0xa0, 0xa6), divider: rgb(0x3c, 0x40, 0x43),
			wallpaper: rgb(0x0e, 0x1a, 0x2b), navBg: rgb(0x00, 0x00, 0x00), navIcon: rgb(0xe8, 0xea, 0xed),
			toastBg: rgb(0xe8, 0xea, 0xed), toastText: rgb(0x20, 0x21, 0x24), scrim: color.RGBA{0, 0, 0, 0xb0},
			selected: rgb(0x2c, 0x4a, 0x7a)}
	}
	return palette{
		bg: rgb(0xff, 0xff, 0xff), surface: rgb(0xf1, 0xf3, 0xf4), surface2: rgb(0xe3, 0xe6, 0xea),
		text: rgb(0x1f, 0x1f, 0x1f), text2: rgb(0x5f, 0x63, 0x68), divider: rgb(0xda, 0xdc, 0xe0),
		wallpaper: rgb(0x1f, 0x3b, 0x5a), navBg: rgb(0xf8, 0xf9, 0xfa), navIcon: rgb(0x3c, 0x40, 0x43),
		toastBg: rgb(0x32, 0x33, 0x36), toastText: rgb(0xf1, 0xf3, 0xf4), scrim: color.RGBA{0, 0, 0, 0x80},
		selected: rgb(0xc2, 0xdb, 0xff)}
}

// appColors returns an app's bar colour and the text colour on it.
func (p *Phone) appColors(pkg string) (bar, onBar color.RGBA) {
	a, _ := appByPkg(pkg)
	if p.st.Settings.Toggles[toggleDark] {
		return a.darkBg, rgb(0xf1, 0xf3, 0xf4)
	}
	return a.color, a.onBar
}

// contrast picks dark or light text for a background.
func contrast(bg color.RGBA) color.RGBA {
	if 299*int(bg.R)+587*int(bg.G)+114*int(bg.B) > 150000 {
		return rgb(0x1f, 0x1f, 0x1f)
	}
	return rgb(0xff, 0xff, 0xff)
}

func white() color.RGBA { return rgb(0xff, 0xff, 0xff) }

// newNode starts an element of the given class.
func newNode(class, pkg, id string, r image.Rectangle) *node {
	return &node{el: Element{Class: class, Package: pkg, ResourceID: id, Enabled: true}, rect: r}
}

// newLabel is a single-line TextView; text too long for its width is drawn
// with an ellipsis while the element keeps the whole text.
func newLabel(pkg, id, text string, r image.Rectangle, fk faceKey, col color.RGBA, align hAlign, padX int) *node {
	n := newNode(classText, pkg, id, r)
	n.el.Text = text
	n.txt = &textBox{lines: []string{ellipsize(fk, text, r.Dx()-2*padX)}, face: fk, col: col, align: align, padX: padX}
	return n
}

func (p *Phone) face(f fontID, size int) faceKey { return faceKey{f, max(6, p.d(size))} }

func (p *Phone) statusH() int { return p.d(100) }
func (p *Phone) navH() int    { return p.d(144) }

// build lays out the current screen. It is called for every observation
// and every input, so it must not change state (except to clamp scroll
// offsets while normalizing).
func (p *Phone) build() *node {
	screen := p.screenRect()
	root := newNode(classFrame, p.foreground(), "", screen)
	root.key = "root"
	if !p.st.ScreenOn {
		root.fill = rgb(0, 0, 0)
		root.el.ContentDesc = "Screen off"
		finalize(root, screen)
		return root
	}
	W, H := p.model.Width, p.model.Height
	content := image.Rect(0, p.statusH(), W, H-p.navH())
	var body *node
	var bar color.RGBA
	switch p.st.Screen {
	case screenHome:
		body, bar = p.homeView(content)
	case screenRecents:
		body, bar = p.recentsView(content)
	default:
		body, bar = p.appView(content)
	}
	root.add(p.statusBar(bar), body, p.navBar(bar))
	if d := p.st.Dialog; d != nil {
		// A modal dialog owns the app's window: what lies beneath is
		// visible but takes no input, so the snapshot does not offer it.
		inert(body)
		root.add(p.dialogView(content, d))
	}
	if p.st.VolumeAt > 0 && p.st.VolumeAt == p.st.Events {
		root.add(p.volumeView(content))
	}
	if p.st.Toast != "" && p.st.ToastAt == p.st.Events {
		root.add(p.toastView(content))
	}
	finalize(root, screen)
	return root
}

// inert removes every input handler in a subtree.
func inert(n *node) {
	n.onTap, n.onLong, n.onScroll = nil, nil, nil
	for _, k := range n.kids {
		inert(k)
	}
}

func (p *Phone) appView(c image.Rectangle) (*node, color.RGBA) {
	switch p.st.Foreground {
	case PkgSettings:
		return p.settingsView(c)
	case PkgNotes:
		return p.notesView(c)
	case PkgBrowser:
		return p.browserView(c)
	case PkgStore:
		return p.storeView(c)
	case PkgCalculator:
		return p.calculatorView(c)
	case PkgCounter:
		return p.counterView(c)
	}
	// validate and launch admit only known packages.
	panic("sim: no view for " + p.st.Foreground)
}

func (p *Phone) statusBar(bg color.RGBA) *node {
	W, h := p.model.Width, p.statusH()
	fg := contrast(bg)
	sb := newNode(classFrame, PkgSystemUI, PkgSystemUI+":id/status_bar", image.Rect(0, 0, W, h))
	sb.fill = bg
	fk := p.face(fontMedium, 38)
	clock := p.clock().Format("15:04")
	sb.add(newLabel(PkgSystemUI, PkgSystemUI+":id/clock", clock, image.Rect(p.d(48), 0, p.d(48)+measure(fk, clock)+p.d(8), h), fk, fg, alignLeft, 0))

	level := p.battery()
	pct := fmt.Sprintf("%d%%", level)
	right := W - p.d(48)
	pw := measure(fk, pct) + p.d(4)
	sb.add(newLabel(PkgSystemUI, PkgSystemUI+":id/battery_percent", pct, image.Rect(right-pw, 0, right, h), fk, fg, alignRight, 0))
	right -= pw + p.d(8)
	icon := func(id, desc string, kind iconKind, w int) *node {
		n := newNode(classImage, PkgSystemUI, id, image.Rect(right-w, p.d(22), right, h-p.d(22)))
		n.el.ContentDesc = desc
		n.icon, n.iconCol = kind, fg
		right -= w + p.d(14)
		return n
	}
	bat := icon(PkgSystemUI+":id/battery", fmt.Sprintf("Battery %d percent", level), iconBattery, p.d(40))
	bat.level, bat.fill2 = level, bg
	sb.add(bat)
	tg := p.st.Settings.Toggles
	if tg[toggleWifi] {
		sb.add(icon(PkgSystemUI+":id/wifi_signal", "Wi-Fi signal full", iconWifi, p.d(56)))
	}
	if tg[toggleAirplane] {
		sb.add(icon(PkgSystemUI+":id/airplane", "Airplane mode on", iconAirplane, p.d(56)))
	}
	return sb
}

func (p *Phone) navBar(appBar color.RGBA) *node {
	W, H := p.model.Width, p.model.Height
	pal := p.palette()
	bg, fg := pal.navBg, pal.navIcon
	if p.st.Screen != screenApp {
		bg, fg = appBar, contrast(appBar)
	}
	nb := newNode(classFrame, PkgSystemUI, PkgSystemUI+":id/navigation_bar_frame", image.Rect(0, H-p.navH(), W, H))
	nb.fill = bg
	bw := p.d(220)
	button := func(id, desc string, kind iconKind, cx int, act func() string) *node {
		n := newNode(classImageButton, PkgSystemUI, PkgSystemUI+":id/"+id, image.Rect(cx-bw/2, H-p.navH(), cx+bw/2, H))
		n.el.ContentDesc = desc
		n.icon, n.iconCol = kind, fg
		n.onTap = func() (string, error) { return act(), nil }
		return n
	}
	return nb.add(
		button("back", "Back", iconBack, W/2-p.d(300), p.back),
		button("home", "Home", iconHome, W/2, p.home),
		button("recent_apps", "Overview", iconRecents, W/2+p.d(300), p.overview),
	)
}

func (p *Phone) toastView(c image.Rectangle) *node {
	pal := p.palette()
	fk := p.face(fontRegular, 40)
	w := min(measure(fk, p.st.Toast)+p.d(112), c.Dx()-p.d(96))
	r := image.Rect((c.Dx()-w)/2, c.Max.Y-p.d(260), (c.Dx()+w)/2, c.Max.Y-p.d(140))
	n := newLabel(PkgSystemUI, PkgSystemUI+":id/toast_text", p.st.Toast, r, fk, pal.toastText, alignCenter, p.d(56))
	n.fill, n.radius = pal.toastBg, r.Dy()/2
	n.passThrough = true
	return n
}

func (p *Phone) volumeView(c image.Rectangle) *node {
	pal := p.palette()
	r := image.Rect(c.Max.X-p.d(150), c.Min.Y+p.d(360), c.Max.X-p.d(40), c.Min.Y+p.d(1000))
	n := newNode(classSeekBar, PkgSystemUI, PkgSystemUI+":id/volume_row_slider", r)
	n.el.ContentDesc = fmt.Sprintf("Media volume %d of %d", p.st.Volume, maxVolume)
	n.fill, n.radius = pal.surface, r.Dx()/2
	n.icon, n.iconCol, n.fill2 = iconVolume, rgb(0x1a, 0x73, 0xe8), pal.surface2
	n.level = p.st.Volume * 100 / maxVolume
	n.passThrough = true
	return n
}

// dialogView is a modal alert: the scrim swallows touches, so only its
// buttons, BACK and HOME get the phone out of it.
func (p *Phone) dialogView(c image.Rectangle, d *dialogState) *node {
	pal := p.palette()
	pkg := p.foreground()
	scrim := newNode(classFrame, pkg, "", c)
	scrim.fill = pal.scrim
	scrim.absorb = true
	w := c.Dx() - p.d(160)
	titleFk, msgFk, btnFk := p.face(fontMedium, 54), p.face(fontRegular, 42), p.face(fontMedium, 42)
	pad := p.d(64)
	msg := wrap(msgFk, d.Message, w-2*pad, 4)
	lineH := p.d(58)
	h := pad + p.d(76) + p.d(24) + lineH*len(msg) + p.d(40) + p.d(120) + p.d(24)
	x0, y0 := c.Min.X+(c.Dx()-w)/2, c.Min.Y+(c.Dy()-h)/2
	panel := newNode(classFrame, pkg, "android:id/parentPanel", image.Rect(x0, y0, x0+w, y0+h))
	panel.fill, panel.radius = pal.surface, p.d(48)
	panel.absorb = true
	y := y0 + pad
	panel.add(newLabel(pkg, "android:id/alertTitle", d.Title, image.Rect(x0+pad, y, x0+w-pad, y+p.d(76)), titleFk, pal.text, alignLeft, 0))
	y += p.d(76) + p.d(24)
	m := newNode(classText, pkg, "android:id/message", image.Rect(x0+pad, y, x0+w-pad, y+lineH*len(msg)))
	m.el.Text = d.Message
	m.txt = &textBox{lines: msg, face: msgFk, col: pal.text2, valign: vTop, lineH: lineH}
	panel.add(m)
	by := y0 + h - p.d(24) - p.d(120)
	accent := rgb(0x1a, 0x73, 0xe8)
	if pal.dark {
		accent = rgb(0x8a, 0xb4, 0xf8)
	}
	bw1 := measure(btnFk, d.Confirm) + p.d(80)
	bw2 := measure(btnFk, d.Cancel) + p.d(80)
	ok := newLabel(pkg, "android:id/button1", d.Confirm, image.Rect(x0+w-p.d(32)-bw1, by, x0+w-p.d(32), by+p.d(120)), btnFk, accent, alignCenter, 0)
	ok.el.Class = classButton
	ok.onTap = func() (string, error) { return p.confirmDialog(), nil }
	cancel := newLabel(pkg, "android:id/button2", d.Cancel, image.Rect(ok.rect.Min.X-bw2, by, ok.rect.Min.X, by+p.d(120)), btnFk, accent, alignCenter, 0)
	cancel.el.Class = classButton
	cancel.onTap = func() (string, error) {
		p.st.Dialog = nil
		return "cancelled: " + d.Title, nil
	}
	panel.add(cancel, ok)
	return scrim.add(panel)
}

const dialogDeleteNote = "notes.delete"

func (p *Phone) confirmDialog() string {
	d := p.st.Dialog
	p.st.Dialog = nil
	switch d.Action {
	case dialogDeleteNote:
		return p.deleteNote(d.Arg)
	}
	return "closed the dialog"
}

func (p *Phone) homeView(c image.Rectangle) (*node, color.RGBA) {
	pal := p.palette()
	W := p.model.Width
	v := newNode(classFrame, PkgLauncher, PkgLauncher+":id/workspace", c)
	v.fill = pal.wallpaper
	fg := white()
	now := p.clock()
	y := c.Min.Y + p.d(90)
	v.add(newLabel(PkgLauncher, PkgLauncher+":id/clock", now.Format("15:04"), image.Rect(0, y, W, y+p.d(200)), p.face(fontMedium, 160), fg, alignCenter, 0))
	y += p.d(200)
	v.add(newLabel(PkgLauncher, PkgLauncher+":id/date", now.Format("Monday, 2 January"), image.Rect(0, y, W, y+p.d(72)), p.face(fontRegular, 46), rgb(0xdd, 0xe6, 0xf0), alignCenter, 0))

	top := c.Min.Y + p.d(470)
	cellH := p.d(290)
	lfk := p.face(fontRegular, 38)
	for i, pkg := range p.st.Installed {
		a, _ := appByPkg(pkg)
		col, row := i%4, i/4
		cell := image.Rect(col*W/4, top+row*cellH, (col+1)*W/4, top+(row+1)*cellH)
		n := newNode(classText, PkgLauncher, PkgLauncher+":id/icon", cell)
		n.key = "app:" + pkg
		n.el.Text, n.el.ContentDesc = a.info.Label, a.info.Label
		n.icon, n.iconCol, n.fill2, n.badge = iconAppIcon, a.color, white(), a.info.Label
		n.iconSize, n.iconTop = p.d(168), p.d(20)
		n.txt = &textBox{lines: []string{ellipsize(lfk, a.info.Label, cell.Dx()-p.d(16))}, face: lfk, col: fg, align: alignCenter, valign: vBottom, padY: p.d(24)}
		n.onTap = func() (string, error) { return p.launch(pkg) }
		v.add(n)
	}

	sr := image.Rect(p.d(56), c.Max.Y-p.d(200), W-p.d(56), c.Max.Y-p.d(64))
	search := newLabel(PkgLauncher, PkgLauncher+":id/search_container", "Search the web", sr, p.face(fontRegular, 42), rgb(0x5f, 0x63, 0x68), alignLeft, p.d(64))
	search.fill, search.radius = rgb(0xf1, 0xf3, 0xf4), sr.Dy()/2
	search.onTap = func() (string, error) {
		if _, err := p.launch(PkgBrowser); err != nil {
			return "", err
		}
		p.focusAddressBar()
		return "opened Browser with the address bar focused", nil
	}
	v.add(search)
	return v, pal.wallpaper
}

func (p *Phone) recentsView(c image.Rectangle) (*node, color.RGBA) {
	bg := rgb(0x20, 0x21, 0x24)
	W := p.model.Width
	v := newNode(classFrame, PkgLauncher, PkgLauncher+":id/overview_panel", c)
	v.fill = bg
	if len(p.st.Recents) == 0 {
		v.add(newLabel(PkgLauncher, PkgLauncher+":id/empty_message", "No recent items", image.Rect(0, c.Min.Y, W, c.Max.Y), p.face(fontRegular, 48), rgb(0xbd, 0xc1, 0xc6), alignCenter, 0))
		return v, bg
	}
	list := newNode(classScroll, PkgLauncher, PkgLauncher+":id/task_list", image.Rect(0, c.Min.Y, W, c.Max.Y-p.d(180)))
	cardH, gap := p.d(560), p.d(48)
	total := gap + len(p.st.Recents)*(cardH+gap)
	off := p.scroller(list, &p.st.RecentsScroll, total, "recent apps")
	pal := p.palette()
	for i, pkg := range p.st.Recents {
		a, _ := appByPkg(pkg)
		barC, onBar := p.appColors(pkg)
		y := list.rect.Min.Y + gap + i*(cardH+gap) - off
		card := newNode(classFrame, PkgLauncher, PkgLauncher+":id/task", image.Rect(p.d(90), y, W-p.d(90), y+cardH))
		card.key = "task:" + pkg
		card.el.ContentDesc = a.info.Label
		card.fill, card.radius = pal.bg, p.d(40)
		card.clips = true
		card.onTap = func() (string, error) { return p.launch(pkg) }
		head := newLabel(PkgLauncher, PkgLauncher+":id/task_title", a.info.Label, image.Rect(card.rect.Min.X, y, card.rect.Max.X, y+p.d(150)), p.face(fontMedium, 52), onBar, alignLeft, p.d(48))
		head.fill, head.radius, head.square = barC, p.d(40), cornerBL|cornerBR
		card.add(head)
		body := newNode(classText, PkgLauncher, PkgLauncher+":id/task_description", image.Rect(card.rect.Min.X, y+p.d(150), card.rect.Max.X, y+cardH))
		body.el.Text = a.info.Description
		body.txt = &textBox{lines: wrap(p.face(fontRegular, 40), a.info.Description, body.rect.Dx()-p.d(96), 3), face: p.face(fontRegular, 40), col: pal.text2, valign: vTop, padX: p.d(48), padY: p.d(40), lineH: p.d(56)}
		card.add(body)
		list.add(card)
	}
	v.add(list)
	br := image.Rect(W/2-p.d(180), c.Max.Y-p.d(150), W/2+p.d(180), c.Max.Y-p.d(40))
	clearAll := newLabel(PkgLauncher, PkgLauncher+":id/clear_all", "Clear all", br, p.face(fontMedium, 42), rgb(0xe8, 0xea, 0xed), alignCenter, 0)
	clearAll.el.Class = classButton
	clearAll.fill, clearAll.radius = rgb(0x3c, 0x40, 0x43), br.Dy()/2
	clearAll.onTap = func() (string, error) {
		p.st.Recents = []string{}
		p.goHome()
		return "cleared recent apps", nil
	}
	v.add(clearAll)
	return v, bg
}

// scroller makes n a vertically scrolling container over content of the
// given total height whose offset lives at *offset. It returns the offset
// to lay the content out with.
func (p *Phone) scroller(n *node, offset *int, total int, what string) int {
	n.clips = true
	maxOff := max(0, total-n.rect.Dy())
	eff := max(0, min(*offset, maxOff))
	if p.normalizing {
		*offset = eff
	}
	if maxOff > 0 {
		n.onScroll = func(dy int) string {
			nv := max(0, min(eff+dy, maxOff))
			if nv == eff {
				if dy > 0 {
					return what + " already at the end"
				}
				return what + " already at the top"
			}
			*offset = nv
			dir := "down"
			if nv < eff {
				dir = "up"
			}
			return fmt.Sprintf("scrolled %s %s by %d px", what, dir, abs(nv-eff))
		}
	}
	return eff
}

// appBar is the coloured top bar of an app, with an up arrow when up is
// set.
func (p *Phone) appBar(pkg, title string, r image.Rectangle, up func() (string, error)) *node {
	bg, fg := p.appColors(pkg)
	bar := newNode(classFrame, pkg, pkg+":id/toolbar", r)
	bar.fill = bg
	x := p.d(56)
	if up != nil {
		b := newLabel(pkg, pkg+":id/navigate_up", "←", image.Rect(r.Min.X+p.d(16), r.Min.Y, r.Min.X+p.d(16)+r.Dy(), r.Max.Y), p.face(fontRegular, 64), fg, alignCenter, 0)
		b.el.Class, b.el.Text, b.el.ContentDesc = classImageButton, "", "Navigate up"
		b.onTap = up
		bar.add(b)
		x = p.d(16) + r.Dy() + p.d(8)
	}
	bar.add(newLabel(pkg, pkg+":id/action_bar_title", title, image.Rect(r.Min.X+x, r.Min.Y, r.Max.X-p.d(40), r.Max.Y), p.face(fontMedium, 60), fg, alignLeft, 0))
	return bar
}
