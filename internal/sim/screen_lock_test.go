package sim

import (
	"errors"
	"strings"
	"testing"
)

// TestScreenLockPasswordField: Settings → Security & privacy → Screen lock
// (reached from the launcher's Settings) shows a password field marked
// password in the tree and in the uiautomator dump, its text hidden as
// dots; typing focuses nothing until it is tapped, DEL and ENTER work on
// it, leaving the page forgets a password not set, and Set (or ENTER)
// sets the lock, which Security & privacy then shows. The state survives
// State/Restore at each step.
func TestScreenLockPasswordField(t *testing.T) {
	p := newPhone(t)
	ok := must(t)
	ok(p.OpenApp(PkgSettings))
	for range 5 {
		if _, found := p.Snapshot().Find(byText("Security & privacy")); found {
			break
		}
		ok(p.Swipe(540, 2000, 540, 800, 300))
	}
	tapOn(t, p, byText("Security & privacy"))
	find(t, p, byID(PkgSettings+":id/summary", "None"))
	tapOn(t, p, byText("Screen lock"))
	field := find(t, p, byID(PkgSettings+":id/password_entry"))
	if !field.Password || field.Focused || field.Text != "" {
		t.Fatalf("the password field %+v; want marked password, not focused, empty", field)
	}
	if _, err := p.TypeText("1234"); !errors.Is(err, ErrNoFocusedField) {
		t.Fatalf("typing before the field has focus: %v; want ErrNoFocusedField", err)
	}
	tapOn(t, p, byID(PkgSettings+":id/password_entry"))
	ok(p.TypeText("12345"))
	ok(p.PressKey("DEL"))
	p = clone(t, p)
	field = find(t, p, byID(PkgSettings+":id/password_entry"))
	if !field.Password || !field.Focused || field.Text != "••••" || strings.Contains(dump(p.Snapshot()), "1234") {
		t.Fatalf("the field after typing: %+v; want focused, four dots, the password nowhere in the tree", field)
	}
	if ref, id := p.focusedRef(); ref == "" || id != PkgSettings+":id/password_entry" {
		t.Errorf("focused field %q %q; want the password field", ref, id)
	}
	xml := string(UIAutomatorXML(p.Snapshot()))
	if !strings.Contains(xml, `resource-id="com.android.settings:id/password_entry"`) || !strings.Contains(xml, `password="true"`) {
		t.Errorf("the uiautomator dump does not mark the field password:\n%s", xml)
	}
	if set := find(t, p, byID(PkgSettings+":id/set_password")); !set.Enabled {
		t.Errorf("Set %+v; want enabled with four characters", set)
	}

	// Leaving the page forgets the password typed.
	ok(p.PressKey("BACK"))
	tapOn(t, p, byText("Screen lock"))
	if field := find(t, p, byID(PkgSettings+":id/password_entry")); field.Text != "" || field.Focused {
		t.Fatalf("the field after leaving and coming back: %+v; want empty, not focused", field)
	}

	// Set sets the lock and goes back.
	tapOn(t, p, byID(PkgSettings+":id/password_entry"))
	ok(p.TypeText("abcd"))
	tapOn(t, p, byID(PkgSettings+":id/set_password"))
	p = clone(t, p)
	find(t, p, byID(PkgSettings+":id/summary", "Password"))
	find(t, p, byText("Screen lock set"))
}
