package sim

import (
	"fmt"
	"image"
	"image/color"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

func (p *Phone) saveNote() string {
	n := &p.st.Notes
	text := strings.TrimSpace(n.Draft)
	if text == "" {
		return "nothing to save: the note is empty"
	}
	n.Notes = append(n.Notes, noteItem{ID: n.NextID, Text: text, SavedAt: p.st.Events})
	n.NextID++
	n.Draft = ""
	n.Scroll = 1 << 30 // show the new note; normalize clamps to the end
	p.toast("Note saved")
	return fmt.Sprintf("saved note %q", preview(text))
}

func (p *Phone) deleteNote(id int) string {
	n := &p.st.Notes
	i := slices.IndexFunc(n.Notes, func(x noteItem) bool { return x.ID == id })
	if i < 0 {
		return "the note was already gone"
	}
	text := n.Notes[i].Text
	n.Notes = slices.Delete(n.Notes, i, i+1)
	p.toast("Note deleted")
	return fmt.Sprintf("deleted note %q", preview(text))
}

func preview(s string) string {
	if utf8.RuneCountInString(s) <= 40 {
		return s
	}
	r := []rune(s)
	return string(r[:39]) + ellipsis
}

func (p *Phone) notesView(c image.Rectangle) (*node, color.RGBA) {
	pal := p.palette()
	W := p.model.Width
	bar, _ := p.appColors(PkgNotes)
	accent := rgb(0xb0, 0x6d, 0x00)
	cardBg := rgb(0xff, 0xf4, 0xd6)
	if pal.dark {
		accent, cardBg = rgb(0xf9, 0xc2, 0x2e), rgb(0x3a, 0x32, 0x1c)
	}
	v := newNode(classFrame, PkgNotes, "android:id/content", c)
	v.fill = pal.bg
	barB := c.Min.Y + p.d(168)
	v.add(p.appBar(PkgNotes, "Notes", image.Rect(0, c.Min.Y, W, barB), nil))

	n := &p.st.Notes
	focused := p.st.Focus == focusNotes
	top := barB + p.d(40)
	fieldH := p.d(150)
	saveW := p.d(250)
	fk := p.face(fontRegular, 48)
	fr := image.Rect(p.d(40), top, W-p.d(40)-saveW-p.d(24), top+fieldH)
	field := newNode(classEdit, PkgNotes, PkgNotes+":id/input", fr)
	field.el.Text, field.el.Hint = n.Draft, "Write a note…"
	field.el.Focusable, field.el.Focused = true, focused
	field.fill, field.radius = pal.surface, p.d(28)
	field.stroke, field.strokeW = pal.divider, p.d(3)
	if focused {
		field.stroke, field.strokeW = accent, p.d(5)
	}
	tb := &textBox{face: fk, col: pal.text, padX: p.d(36), cursor: focused, cursorCol: accent}
	if n.Draft == "" {
		tb.lines, tb.col = []string{"Write a note…"}, pal.text2
		if focused {
			// An empty focused field shows only the caret.
			tb.lines, tb.col = []string{""}, pal.text
		}
	} else {
		tb.lines = []string{ellipsizeStart(fk, n.Draft, fr.Dx()-2*p.d(36)-p.d(8))}
	}
	field.txt = tb
	field.onTap = func() (string, error) {
		if p.st.Focus == focusNotes {
			return "the note field already has focus", nil
		}
		p.st.Focus = focusNotes
		return "focused the note field", nil
	}
	v.add(field)

	sr := image.Rect(W-p.d(40)-saveW, top, W-p.d(40), top+fieldH)
	save := newLabel(PkgNotes, PkgNotes+":id/save", "Save", sr, p.face(fontMedium, 48), white(), alignCenter, 0)
	save.el.Class = classButton
	save.fill, save.radius = accent, fieldH/2
	if strings.TrimSpace(n.Draft) == "" {
		save.el.Enabled = false
		save.fill, save.txt.col = pal.surface2, pal.text2
	}
	save.onTap = func() (string, error) {
		if strings.TrimSpace(n.Draft) == "" {
			return "Save is disabled until the note has text", nil
		}
		return p.saveNote(), nil
	}
	v.add(save)

	hy := top + fieldH + p.d(36)
	count := "No notes yet"
	switch len(n.Notes) {
	case 0:
	case 1:
		count = "1 note · long press a note to delete it"
	default:
		count = fmt.Sprintf("%d notes · long press a note to delete it", len(n.Notes))
	}
	v.add(newLabel(PkgNotes, PkgNotes+":id/count", count, image.Rect(p.d(48), hy, W-p.d(48), hy+p.d(60)), p.face(fontRegular, 38), pal.text2, alignLeft, 0))

	list := newNode(classRecycler, PkgNotes, PkgNotes+":id/list", image.Rect(0, hy+p.d(76), W, c.Max.Y))
	nfk, tfk := p.face(fontRegular, 46), p.face(fontRegular, 34)
	lineH := p.d(62)
	pad := p.d(36)
	gap := p.d(28)
	type laid struct {
		item  noteItem
		lines []string
		h     int
	}
	var items []laid
	total := 0
	for _, it := range n.Notes {
		lines := wrap(nfk, it.Text, W-2*p.d(40)-2*pad, 4)
		h := pad + len(lines)*lineH + p.d(12) + p.d(48) + pad
		items = append(items, laid{it, lines, h})
		total += h + gap
	}
	off := p.scroller(list, &n.Scroll, total+gap, "notes")
	y := list.rect.Min.Y - off
	for _, it := range items {
		card := newNode(classLinear, PkgNotes, PkgNotes+":id/note_card", image.Rect(p.d(40), y, W-p.d(40), y+it.h))
		card.key = fmt.Sprintf("note:%d", it.item.ID)
		card.fill, card.radius = cardBg, p.d(32)
		id, text := it.item.ID, it.item.Text
		card.onLong = func() (string, error) {
			p.st.Dialog = &dialogState{Title: "Delete note?", Message: text, Confirm: "Delete", Cancel: "Cancel", Action: dialogDeleteNote, Arg: id}
			return fmt.Sprintf("asked to confirm deleting note %q", preview(text)), nil
		}
		body := newNode(classText, PkgNotes, PkgNotes+":id/note", image.Rect(card.rect.Min.X, y+pad, card.rect.Max.X, y+pad+len(it.lines)*lineH))
		body.el.Text = text
		body.txt = &textBox{lines: it.lines, face: nfk, col: pal.text, padX: pad, valign: vTop, lineH: lineH}
		saved := ClockStart().Add(time.Duration(it.item.SavedAt) * ClockStep).Format("Saved 15:04")
		ty := body.rect.Max.Y + p.d(12)
		card.add(body, newLabel(PkgNotes, PkgNotes+":id/time", saved, image.Rect(card.rect.Min.X, ty, card.rect.Max.X, ty+p.d(48)), tfk, pal.text2, alignLeft, pad))
		list.add(card)
		y += it.h + gap
	}
	v.add(list)
	return v, bar
}
