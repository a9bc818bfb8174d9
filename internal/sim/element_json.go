package sim

import (
	"strconv"
	"unicode/utf8"
)

// AppendJSON appends e as JSON to b: byte for byte what encoding/json's
// Marshal writes for it (the tests compare the two on every screen and on
// fuzzed text), without reflection. A set-of-marks observation marshals
// the tree of every picture, and reflection cost as much as drawing the
// marks.
func (e *Element) AppendJSON(b []byte) []byte {
	b = append(b, `{"ref":`...)
	b = appendJSONString(b, e.Ref)
	b = append(b, `,"class":`...)
	b = appendJSONString(b, e.Class)
	b = appendOmitString(b, `,"package":`, e.Package)
	b = appendOmitString(b, `,"resourceId":`, e.ResourceID)
	b = appendOmitString(b, `,"text":`, e.Text)
	b = appendOmitString(b, `,"hint":`, e.Hint)
	b = appendOmitString(b, `,"contentDesc":`, e.ContentDesc)
	b = append(b, `,"bounds":[`...)
	for i, v := range e.Bounds {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(v), 10)
	}
	b = append(b, ']')
	b = appendOmitTrue(b, `,"clickable":true`, e.Clickable)
	b = appendOmitTrue(b, `,"longClickable":true`, e.LongClickable)
	b = appendOmitTrue(b, `,"focusable":true`, e.Focusable)
	b = appendOmitTrue(b, `,"focused":true`, e.Focused)
	b = append(b, `,"enabled":`...)
	b = strconv.AppendBool(b, e.Enabled)
	b = appendOmitTrue(b, `,"checkable":true`, e.Checkable)
	b = appendOmitTrue(b, `,"checked":true`, e.Checked)
	b = appendOmitTrue(b, `,"scrollable":true`, e.Scrollable)
	b = appendOmitTrue(b, `,"password":true`, e.Password)
	if len(e.Children) > 0 {
		b = append(b, `,"children":[`...)
		for i := range e.Children {
			if i > 0 {
				b = append(b, ',')
			}
			b = e.Children[i].AppendJSON(b)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendOmitString appends key and s unless s is empty (omitempty).
func appendOmitString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendJSONString(append(b, key...), s)
}

// appendOmitTrue appends field (a key and true) when v holds (omitempty).
func appendOmitTrue(b []byte, field string, v bool) []byte {
	if v {
		b = append(b, field...)
	}
	return b
}

const hexDigits = "0123456789abcdef"

// jsonSafe says which ASCII bytes a JSON string holds as they are:
// printable ones but ", \ and the HTML-sensitive <, > and &.
var jsonSafe = func() (safe [utf8.RuneSelf]bool) {
	for c := byte(0x20); c < utf8.RuneSelf; c++ {
		safe[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return safe
}()

// appendJSONString appends s quoted as encoding/json quotes a string: ",
// \ and control characters escaped (\b, \f, \n, \r, \t by name), <, > and
// & as \u00XX (HTML-safe), invalid UTF-8 as \ufffd, and U+2028, U+2029
// escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
