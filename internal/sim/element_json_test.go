package sim

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestElementAppendJSONIsMarshal: AppendJSON writes what json.Marshal
// writes, byte for byte, for the tree of every screen of the tour.
func TestElementAppendJSONIsMarshal(t *testing.T) {
	for _, sc := range screens(t) {
		t.Run(sc.name, func(t *testing.T) {
			root := sc.p.Snapshot()
			want, err := json.Marshal(root)
			if err != nil {
				t.Fatal(err)
			}
			if got := root.AppendJSON(nil); !bytes.Equal(got, want) {
				t.Errorf("AppendJSON differs from json.Marshal:\ngot  %s\nwant %s", got, want)
			}
		})
	}
}

// TestElementAppendJSONFields: every field, set and unset, and text
// that must be escaped (quotes, controls, HTML, invalid UTF-8, the line
// separators) come out as json.Marshal writes them.
func TestElementAppendJSONFields(t *testing.T) {
	texts := []string{"", "plain", `"quoted" \back\`, "\b\f\n\r\t\x00\x1f\x7f", "<a href=\"x\">&amp;</a>",
		"bad \xff\xfe utf-8 \xe2\x82", "line\u2028sep\u2029para", "三 🙂 é", "\xed\xa0\x80 surrogate"}
	leaf := Element{Ref: "leaf", Class: "android.widget.TextView", Bounds: Bounds{-1, 0, 1080, 2400}}
	for i, s := range texts {
		e := Element{Ref: s, Class: s, Package: s, ResourceID: s, Text: s, Hint: s, ContentDesc: s,
			Bounds: Bounds{i, -i, 1 << 20, -(1 << 31)}, Clickable: i%2 == 0, LongClickable: i%3 == 0,
			Focusable: i%2 == 1, Focused: i%4 == 0, Enabled: i%3 == 1, Checkable: i%5 == 0, Checked: i%2 == 0,
			Scrollable: i%3 == 2, Password: i%2 == 1}
		switch i % 3 {
		case 1:
			e.Children = []Element{leaf, {Ref: s, Children: []Element{}}}
		case 2:
			e.Children = []Element{}
		}
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.AppendJSON([]byte("prefix")); !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Errorf("text %q:\ngot  %s\nwant prefix%s", s, got, want)
		}
	}
}

// FuzzElementAppendJSON: for any text, AppendJSON is json.Marshal.
func FuzzElementAppendJSON(f *testing.F) {
	f.Add("hello", "<>&\"\\", false)
	f.Add("\xff\u2028", "\x00", true)
	f.Fuzz(func(t *testing.T, text, desc string, on bool) {
		e := Element{Ref: text, Class: desc, Text: text, ContentDesc: desc, Enabled: on, Clickable: !on,
			Children: []Element{{Ref: desc, Hint: text, Checked: on}}}
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	})
}
