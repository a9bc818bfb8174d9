package backends

import (
	"encoding/json"
	"strings"
	"testing"

	"phonefleet/domain"
)

const dumpXML = `<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation="0">` +
	`<node index="0" text="" resource-id="" class="android.widget.FrameLayout" package="com.example" content-desc="" checkable="false" checked="false" clickable="false" enabled="true" focusable="false" focused="false" scrollable="false" long-clickable="false" password="false" selected="false" bounds="[0,0][1080,2400]">` +
	`<node index="0" text="Save" resource-id="com.example:id/save" class="android.widget.Button" package="com.example" content-desc="" checkable="false" checked="false" clickable="true" enabled="true" focusable="true" focused="false" scrollable="false" long-clickable="true" password="false" selected="false" bounds="[40,100][400,220]" />` +
	`<node index="1" text="" resource-id="" class="android.widget.EditText" package="com.example" content-desc="Note" hint="Write here" checkable="false" checked="false" clickable="true" enabled="false" focusable="true" focused="true" scrollable="false" long-clickable="false" password="true" selected="false" bounds="[0,300][1080,500]" />` +
	`<node index="2" text="日本語" resource-id="com.example:id/save" class="android.widget.Button" package="com.example" content-desc="" checkable="true" checked="true" clickable="true" enabled="true" focusable="true" focused="false" scrollable="true" long-clickable="false" password="false" selected="false" bounds="[40,600][400,720]" />` +
	`</node></hierarchy>UI hierchary dumped to: /dev/tty`

// TestParseUIDump maps a uiautomator dump onto the sim's element model
// and gives the same refs to the same screen.
func TestParseUIDump(t *testing.T) {
	root, err := parseUIDump([]byte(dumpXML), 1080, 2400)
	if err != nil {
		t.Fatal(err)
	}
	if root.Class != "android.widget.FrameLayout" || root.Bounds != [4]int{0, 0, 1080, 2400} || len(root.Children) != 3 {
		t.Fatalf("root: got %+v", root)
	}
	save, note, other := root.Children[0], root.Children[1], root.Children[2]
	want := domain.UIElement{Ref: save.Ref, Class: "android.widget.Button", Package: "com.example", ResourceID: "com.example:id/save",
		Text: "Save", Bounds: [4]int{40, 100, 400, 220}, Clickable: true, LongClickable: true, Focusable: true, Enabled: true}
	if got, _ := json.Marshal(save); string(got) != string(must(json.Marshal(want))) {
		t.Errorf("save: got %s; want %s", got, must(json.Marshal(want)))
	}
	if note.Hint != "Write here" || note.ContentDesc != "Note" || note.Enabled || !note.Focused || !note.Password || save.Password {
		t.Errorf("note: got %+v", note)
	}
	if !other.Checkable || !other.Checked || !other.Scrollable || other.Text != "日本語" {
		t.Errorf("third: got %+v", other)
	}
	refs := map[string]bool{root.Ref: true}
	for _, c := range root.Children {
		if refs[c.Ref] {
			t.Errorf("ref %s given twice", c.Ref)
		}
		refs[c.Ref] = true
		if len(c.Ref) != 7 || c.Ref[0] != 'e' {
			t.Errorf("ref %q: want e and six base-36 digits", c.Ref)
		}
	}
	again, _ := parseUIDump([]byte(dumpXML), 1080, 2400)
	if again.Children[0].Ref != save.Ref || again.Children[2].Ref != other.Ref {
		t.Errorf("the same screen gave other refs")
	}
	// An element with an id keeps its ref when a sibling is put before it.
	moved := strings.Replace(dumpXML, `<node index="0" text="Save"`, `<node index="9" text="" class="android.view.View" bounds="[0,0][1,1]" /><node index="0" text="Save"`, 1)
	m, err := parseUIDump([]byte(moved), 1080, 2400)
	if err != nil {
		t.Fatal(err)
	}
	if m.Children[1].Ref != save.Ref {
		t.Errorf("save's ref moved with a new sibling before it: %s → %s", save.Ref, m.Children[1].Ref)
	}
	if f, ok := root.Find(other.Ref); !ok || f.Text != "日本語" {
		t.Errorf("Find: got %+v, %v", f, ok)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestParseUIDumpRefusals: a cut dump is told apart from one that is not
// a dump, and several windows get one root.
func TestParseUIDumpRefusals(t *testing.T) {
	if _, err := parseUIDump([]byte(dumpXML[:300]), 1080, 2400); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("cut: got %v; want truncated", err)
	}
	if _, err := parseUIDump([]byte("ERROR: could not get idle state."), 1080, 2400); err == nil || strings.Contains(err.Error(), "truncated") {
		t.Errorf("no dump: got %v", err)
	}
	two := `<hierarchy rotation="0"><node class="a" bounds="[0,0][10,10]"/><node class="b" bounds="[0,10][10,20]"/></hierarchy>`
	root, err := parseUIDump([]byte(two), 10, 20)
	if err != nil || root.Class != "hierarchy" || len(root.Children) != 2 || root.Bounds != [4]int{0, 0, 10, 20} {
		t.Errorf("two windows: got %+v, %v", root, err)
	}
	empty, err := parseUIDump([]byte(`<hierarchy rotation="0"/>`), 10, 20)
	if err != nil || len(empty.Children) != 0 {
		t.Errorf("empty: got %+v, %v", empty, err)
	}
}

// TestTypeTextCommand: printable ASCII goes through input text, quoted
// for sh with spaces as %s; anything else through the ADBKeyBoard
// broadcast, base64-encoded.
func TestTypeTextCommand(t *testing.T) {
	tests := []struct{ in, cmd, how string }{
		{"hello world", `input text 'hello%sworld'`, viaInputText},
		{`it's $HOME; rm -rf / & "x"`, `input text 'it'\''s%s$HOME;%srm%s-rf%s/%s&%s"x"'`, viaInputText},
		{"héllo", "am broadcast -a ADB_INPUT_B64 --es msg aMOpbGxv", viaADBKeyBoard},
		{"日本", "am broadcast -a ADB_INPUT_B64 --es msg 5pel5pys", viaADBKeyBoard},
		{"100%s", "am broadcast -a ADB_INPUT_B64 --es msg MTAwJXM=", viaADBKeyBoard},
		{"a\nb", "am broadcast -a ADB_INPUT_B64 --es msg YQpi", viaADBKeyBoard},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			cmd, how := typeTextCommand(tt.in)
			if cmd != tt.cmd || how != tt.how {
				t.Errorf("got %q (%s); want %q (%s)", cmd, how, tt.cmd, tt.how)
			}
		})
	}
}

// TestCommandConstruction: keys, packages, input lines, device answers.
func TestCommandConstruction(t *testing.T) {
	keys := []struct{ in, want string }{
		{"home", "KEYCODE_HOME"}, {"KEYCODE_BACK", "KEYCODE_BACK"}, {"backspace", "KEYCODE_DEL"},
		{"recents", "KEYCODE_APP_SWITCH"}, {"66", "66"},
	}
	for _, k := range keys {
		if got, err := keyCode(k.in); err != nil || got != k.want {
			t.Errorf("keyCode(%q): got %q, %v; want %q", k.in, got, err, k.want)
		}
	}
	for _, bad := range []string{"HOME; reboot", "a b", ""} {
		if _, err := keyCode(bad); domain.ErrorCode(err) != domain.CodeInvalidArgument {
			t.Errorf("keyCode(%q): got %v; want invalid_argument", bad, err)
		}
	}
	for p, ok := range map[string]bool{"com.example.notes": true, "a.b": true, "notes": false, "com.x;reboot": false, "com..x": false} {
		if validPackage(p) != ok {
			t.Errorf("validPackage(%q): got %v", p, !ok)
		}
	}
	if got := inputSwipe(1, 2, 3, 4, 500); got != "input swipe 1 2 3 4 500" {
		t.Errorf("swipe: got %q", got)
	}
	if got := commandName("input text 'secret'"); got != "input text" {
		t.Errorf("commandName: got %q; want the command without its data", got)
	}
	if w, h := parseWMSize("Physical size: 1080x2400\nOverride size: 720x1600\n"); w != 720 || h != 1600 {
		t.Errorf("wm size: got %dx%d; want the override", w, h)
	}
	if w, h := parseWMSize("Physical size: 1080x2400\n"); w != 1080 || h != 2400 {
		t.Errorf("wm size: got %dx%d", w, h)
	}
	if parseScreenOn("  mWakefulness=Asleep\n") || !parseScreenOn("mWakefulness=Awake") || !parseScreenOn("") {
		t.Errorf("parseScreenOn misread dumpsys power")
	}
}
