package sim

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestWrap(t *testing.T) {
	fk := faceKey{fontRegular, 46}
	tests := []struct {
		name     string
		text     string
		width    int
		maxLines int
		minLines int
		ellipsis bool
	}{
		{"short text stays on one line", "hello", 800, 0, 1, false},
		{"words wrap at spaces", strings.Repeat("phone fleet ", 20), 600, 0, 6, false},
		{"CJK without spaces breaks between runes", strings.Repeat("世界", 40), 600, 0, 6, false},
		{"a long word breaks", strings.Repeat("x", 200), 500, 0, 5, false},
		{"line limit ends with an ellipsis", strings.Repeat("phone fleet ", 40), 600, 3, 3, true},
		{"empty text is one empty line", "", 500, 2, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lines := wrap(fk, tc.text, tc.width, tc.maxLines)
			if len(lines) < tc.minLines || (tc.maxLines > 0 && len(lines) > tc.maxLines) {
				t.Errorf("got %d lines; want %d..%d: %q", len(lines), tc.minLines, tc.maxLines, lines)
			}
			for i := 0; i+1 < len(lines) && !tc.ellipsis; i++ {
				next, _, _ := strings.Cut(lines[i+1], " ")
				if measure(fk, lines[i]+" "+next) <= tc.width && !strings.Contains(tc.text, "世") && !strings.HasPrefix(tc.text, "xxx") {
					t.Errorf("line %d %q could have taken %q", i, lines[i], next)
				}
			}
			for _, l := range lines {
				if w := measure(fk, l); w > tc.width {
					t.Errorf("got line %q of width %d; want at most %d", l, w, tc.width)
				}
			}
			last := lines[len(lines)-1]
			if got := strings.HasSuffix(last, ellipsis); got != tc.ellipsis {
				t.Errorf("got ellipsis %v on %q; want %v", got, last, tc.ellipsis)
			}
			if !tc.ellipsis && strings.Join(strings.Fields(strings.Join(lines, "")), "") != strings.Join(strings.Fields(tc.text), "") {
				t.Errorf("wrapping lost text: %q", lines)
			}
		})
	}
}

func TestEllipsize(t *testing.T) {
	fk := faceKey{fontRegular, 42}
	long := strings.Repeat("abcdefghij", 100) + "END"
	end := ellipsizeStart(fk, long, 600)
	if !strings.HasPrefix(end, ellipsis) || !strings.HasSuffix(end, "END") || measure(fk, end) > 600 {
		t.Errorf("ellipsizeStart: got %q (width %d)", end, measure(fk, end))
	}
	start := ellipsize(fk, long, 600)
	if !strings.HasSuffix(start, ellipsis) || !strings.HasPrefix(start, "abc") || measure(fk, start) > 600 {
		t.Errorf("ellipsize: got %q (width %d)", start, measure(fk, start))
	}
	if got := ellipsize(fk, "short", 600); got != "short" {
		t.Errorf("got %q; want short text unchanged", got)
	}
}

// TestFallbackGlyphs checks that runes the Go fonts lack still take room
// (a hex box, wider for CJK and emoji) and that joiners take none.
func TestFallbackGlyphs(t *testing.T) {
	fk := faceKey{fontRegular, 48}
	tests := []struct {
		name string
		r    rune
		min  int
		max  int
	}{
		{"Latin with accent has a real glyph", 'é', 10, 40},
		{"CJK gets a square box", '世', 40, 48},
		{"emoji gets a square box", '🙂', 40, 48},
		{"zero width joiner takes no room", '\u200d', 0, 0},
		{"variation selector takes no room", '\ufe0f', 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := measure(fk, string(tc.r))
			if w < tc.min || w > tc.max {
				t.Errorf("got width %d; want %d..%d", w, tc.min, tc.max)
			}
		})
	}
	if n := utf8.RuneCountInString("👩\u200d💻"); n != 3 {
		t.Fatalf("test string has %d runes", n)
	}
}
