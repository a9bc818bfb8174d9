package sim

import (
	"bytes"
	"strconv"
)

// UIAutomatorXML renders a Snapshot tree the way `uiautomator dump` writes
// a window hierarchy on Android: one XML line, a <hierarchy rotation="0">
// holding nested <node> elements with the standard attributes (index,
// text, resource-id, class, package, content-desc, checkable, checked,
// clickable, enabled, focusable, focused, scrollable, long-clickable,
// password, selected, bounds). An element's hint, which uiautomator does
// not dump, is added as a trailing hint attribute when it is set; parsers
// of the standard format ignore it. The output has no trailing newline,
// as on a device, where "UI hierchary dumped to: …" follows directly.
func UIAutomatorXML(root Element) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation="0">`)
	writeUINode(&b, root, 0)
	b.WriteString(`</hierarchy>`)
	return b.Bytes()
}

func writeUINode(b *bytes.Buffer, e Element, index int) {
	b.WriteString(`<node index="`)
	b.WriteString(strconv.Itoa(index))
	attr := func(name, value string) {
		b.WriteString(`" `)
		b.WriteString(name)
		b.WriteString(`="`)
		escapeXMLAttr(b, value)
	}
	flag := func(name string, v bool) { attr(name, strconv.FormatBool(v)) }
	attr("text", e.Text)
	attr("resource-id", e.ResourceID)
	attr("class", e.Class)
	attr("package", e.Package)
	attr("content-desc", e.ContentDesc)
	flag("checkable", e.Checkable)
	flag("checked", e.Checked)
	flag("clickable", e.Clickable)
	flag("enabled", e.Enabled)
	flag("focusable", e.Focusable)
	flag("focused", e.Focused)
	flag("scrollable", e.Scrollable)
	flag("long-clickable", e.LongClickable)
	flag("password", e.Password)
	flag("selected", false)
	bo := e.Bounds
	attr("bounds", "["+strconv.Itoa(bo[0])+","+strconv.Itoa(bo[1])+"]["+strconv.Itoa(bo[2])+","+strconv.Itoa(bo[3])+"]")
	if e.Hint != "" {
		attr("hint", e.Hint)
	}
	if len(e.Children) == 0 {
		b.WriteString(`" />`)
		return
	}
	b.WriteString(`">`)
	for i, c := range e.Children {
		writeUINode(b, c, i)
	}
	b.WriteString(`</node>`)
}

// escapeXMLAttr escapes an attribute value as Android's XML serializer
// does: the markup characters as entities, control characters as
// character references, everything else (accents, CJK, emoji) as UTF-8.
func escapeXMLAttr(b *bytes.Buffer, s string) {
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '"':
			b.WriteString("&quot;")
		default:
			if r < 0x20 {
				b.WriteString("&#" + strconv.Itoa(int(r)) + ";")
			} else {
				b.WriteRune(r)
			}
		}
	}
}
