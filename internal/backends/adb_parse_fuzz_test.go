package backends

import (
	"bytes"
	"testing"

	"phonefleet/domain"
)

// FuzzParseUIDump reads arbitrary `uiautomator dump` output, as a phone
// (or anything behind an adb server) can print it: nothing panics; a tree
// read has no more elements than the dump has nodes (plus a root), every
// ref is "e" and six base-36 digits and no two elements share one (a tap
// by ref must name one element); and the same dump reads the same refs.
func FuzzParseUIDump(f *testing.F) {
	for _, s := range []string{
		`<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation="0"><node index="0" text="" resource-id="" class="android.widget.FrameLayout" package="com.x" bounds="[0,0][1080,2400]"><node index="0" text="OK" resource-id="com.x:id/ok" class="android.widget.Button" clickable="true" bounds="[10,10][200,100]" /><node text="OK" resource-id="com.x:id/ok" class="android.widget.Button" bounds="[10,110][200,200]" /></node></hierarchy>UI hierarchy dumped to: /dev/tty`,
		`<hierarchy rotation="0"/>`, `<hierarchy><node bounds="[0,0][1,1]"/><node bounds="[0,0][1,1]"/></hierarchy>`,
		`<hierarchy><node bounds="[a,0][1,1]"/></hierarchy>`, `<hierarchy><node bounds="[0,0][1,1]">`, `ERROR: null root node returned by UiTestAutomationBridge.`,
		`<hierarchy><node bounds="[0,0][1,1]" resource-id="a#0"/><node bounds="[0,0][1,1]" resource-id="a"/><node bounds="[0,0][1,1]"/></hierarchy>`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, dump []byte) {
		root, err := parseUIDump(dump, 1080, 2400)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		var walk func(e domain.UIElement)
		walk = func(e domain.UIElement) {
			if len(e.Ref) != 7 || e.Ref[0] != 'e' || seen[e.Ref] {
				t.Fatalf("%q: ref %q malformed or repeated", dump, e.Ref)
			}
			seen[e.Ref] = true
			for _, c := range e.Children {
				walk(c)
			}
		}
		walk(root)
		if n := bytes.Count(dump, []byte("<node")); len(seen) > n+1 {
			t.Fatalf("%q: %d elements from %d nodes", dump, len(seen), n)
		}
		again, err := parseUIDump(dump, 1080, 2400)
		if err != nil || again.Ref != root.Ref || len(again.Children) != len(root.Children) {
			t.Fatalf("%q read twice differently (%v)", dump, err)
		}
	})
}

// FuzzParseDeviceFacts reads arbitrary `wm size`, `dumpsys power` and
// `df` output: sizes and free space are never negative.
func FuzzParseDeviceFacts(f *testing.F) {
	for _, s := range []string{
		"Physical size: 1080x2400\nOverride size: 720x1600\n", "Physical size: 99999999999999999999x1\n",
		"Filesystem 1K-blocks Used Available Use% Mounted on\n/dev/block/dm-5 5000 1000 4000 20% /data\n",
		"/dev/x 1 1 9223372036854775807 1% /data\n", "/dev/x 1 1 -5 1% /data\n", "mWakefulness=Asleep",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, out string) {
		if w, h := parseWMSize(out); w < 0 || h < 0 {
			t.Fatalf("%q: size %dx%d", out, w, h)
		}
		if b := parseDFAvailable(out); b != nil && *b < 0 {
			t.Fatalf("%q: %d bytes free", out, *b)
		}
		_ = parseScreenOn(out)
	})
}
