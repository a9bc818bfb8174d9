package sim

import (
	"fmt"
	"image"
	"image/color"
	"strconv"
)

func (p *Phone) counterView(c image.Rectangle) (*node, color.RGBA) {
	pal := p.palette()
	W := p.model.Width
	bar, onBar := p.appColors(PkgCounter)
	v := newNode(classFrame, PkgCounter, "android:id/content", c)
	v.fill = pal.bg
	barB := c.Min.Y + p.d(168)
	v.add(p.appBar(PkgCounter, "Counter", image.Rect(0, c.Min.Y, W, barB), nil))
	st := &p.st.Counter

	mid := c.Min.Y + c.Dy()*2/5
	v.add(newLabel(PkgCounter, PkgCounter+":id/count", strconv.Itoa(st.Count), image.Rect(0, mid-p.d(160), W, mid+p.d(160)), p.face(fontMedium, 220), pal.text, alignCenter, 0))
	v.add(newLabel(PkgCounter, PkgCounter+":id/hint", "Long press + to add 10", image.Rect(0, mid+p.d(170), W, mid+p.d(240)), p.face(fontRegular, 38), pal.text2, alignCenter, 0))

	by := c.Max.Y - p.d(420)
	bs := p.d(240)
	button := func(id, label, desc string, cx int, fk faceKey) *node {
		r := image.Rect(cx-bs/2, by, cx+bs/2, by+bs)
		b := newLabel(PkgCounter, PkgCounter+":id/"+id, label, r, fk, onBar, alignCenter, 0)
		b.el.Class, b.el.ContentDesc = classButton, desc
		b.fill, b.radius = bar, bs/2
		return b
	}
	dec := button("decrement", "−", "Decrease", W/2-p.d(300), p.face(fontMedium, 110))
	dec.onTap = func() (string, error) {
		st.Count--
		return fmt.Sprintf("count is %d", st.Count), nil
	}
	inc := button("increment", "+", "Increase", W/2+p.d(300), p.face(fontMedium, 110))
	inc.onTap = func() (string, error) {
		st.Count++
		return fmt.Sprintf("count is %d", st.Count), nil
	}
	inc.onLong = func() (string, error) {
		st.Count += 10
		return fmt.Sprintf("added 10; count is %d", st.Count), nil
	}
	reset := button("reset", "Reset", "Reset", W/2, p.face(fontMedium, 46))
	reset.fill, reset.txt.col = pal.surface2, pal.text
	reset.onTap = func() (string, error) {
		if st.Count == 0 {
			return "count is already 0", nil
		}
		st.Count = 0
		return "reset the count to 0", nil
	}
	v.add(dec, reset, inc)
	return v, bar
}
