package sim

import (
	"image"
	"image/color"
	"slices"
)

func (p *Phone) storeView(c image.Rectangle) (*node, color.RGBA) {
	pal := p.palette()
	W := p.model.Width
	bar, _ := p.appColors(PkgStore)
	v := newNode(classFrame, PkgStore, "android:id/content", c)
	v.fill = pal.bg
	barB := c.Min.Y + p.d(168)
	v.add(p.appBar(PkgStore, "Store", image.Rect(0, c.Min.Y, W, barB), nil))

	list := newNode(classRecycler, PkgStore, PkgStore+":id/list", image.Rect(0, barB, W, c.Max.Y))
	cat := Catalog()
	rowH := p.d(220)
	off := p.scroller(list, &p.st.Store.Scroll, len(cat)*rowH+p.d(24), "the store")
	btnW := p.d(230)
	for i, a := range cat {
		def, _ := appByPkg(a.Package)
		y := list.rect.Min.Y + p.d(24) + i*rowH - off
		row := newNode(classLinear, PkgStore, "", image.Rect(0, y, W, y+rowH))
		row.key = "app:" + a.Package
		icon := newNode(classImage, PkgStore, PkgStore+":id/icon", image.Rect(p.d(48), y+p.d(30), p.d(48)+p.d(140), y+p.d(170)))
		icon.el.ContentDesc = a.Label
		icon.icon, icon.iconCol, icon.fill2, icon.iconSize, icon.badge = iconAppIcon, def.color, white(), p.d(140), a.Label
		textR := W - p.d(48) - btnW - p.d(24)
		row.add(icon,
			newLabel(PkgStore, PkgStore+":id/title", a.Label, image.Rect(p.d(228), y+p.d(36), textR, y+p.d(100)), p.face(fontMedium, 48), pal.text, alignLeft, 0),
			newLabel(PkgStore, PkgStore+":id/description", a.Description, image.Rect(p.d(228), y+p.d(104), textR, y+p.d(160)), p.face(fontRegular, 36), pal.text2, alignLeft, 0))
		installed := slices.Contains(p.st.Installed, a.Package)
		label := "Install"
		if installed {
			label = "Open"
		}
		br := image.Rect(W-p.d(48)-btnW, y+p.d(54), W-p.d(48), y+p.d(166))
		btn := newLabel(PkgStore, PkgStore+":id/action", label, br, p.face(fontMedium, 42), white(), alignCenter, 0)
		btn.el.Class = classButton
		btn.fill, btn.radius = bar, br.Dy()/2
		pkg := a.Package
		if installed {
			btn.fill, btn.txt.col = pal.surface2, pal.text
			btn.onTap = func() (string, error) { return p.launch(pkg) }
		} else {
			btn.onTap = func() (string, error) { return p.install(pkg) }
		}
		row.add(btn)
		list.add(row)
	}
	v.add(list)
	return v, bar
}
