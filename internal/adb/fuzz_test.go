package adb

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// FuzzReadHex reads arbitrary server answers as a hex length and its
// bytes: nothing panics, a length is four hex digits and never more than
// 0xffff bytes are taken, and a value read is exactly the bytes announced.
func FuzzReadHex(f *testing.F) {
	for _, s := range []string{"0000", "0003abc", "000aabc", "ffff", "-001x", "+001x", "0x01", "00", "zzzz", "0001é"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		b, err := readHex(bytes.NewReader(in))
		if err != nil {
			return
		}
		if len(in) < 4 || fmt.Sprintf("%04x", len(b)) != strings.ToLower(string(in[:4])) || !bytes.Equal(b, in[4:4+len(b)]) {
			t.Fatalf("%q read as %q", in, b)
		}
	})
}

// FuzzParseDevices reads arbitrary host:devices-l answers: one device per
// line with a serial and a state, no field holding white space, and the
// list written back in the server's form reads the same.
func FuzzParseDevices(f *testing.F) {
	for _, s := range []string{
		"emulator-5554\tdevice product:sdk model:Pixel_8 device:emu transport_id:1\n",
		"R5CT\tunauthorized usb:1-1 transport_id:2\nabc offline\n", "", "\n\n", "x", "a b model:", "a b model:x:y c:d",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		list := ParseDevices(s)
		var back strings.Builder
		for _, d := range list {
			for _, v := range []string{d.Serial, d.State, d.Model, d.Product, d.Device} {
				if strings.ContainsFunc(v, func(r rune) bool { return strings.ContainsRune(" \t\n\r\v\f\u0085\u00a0", r) }) {
					t.Fatalf("%q: field %q holds white space", s, v)
				}
			}
			if d.Serial == "" || d.State == "" {
				t.Fatalf("%q: device %+v without serial or state", s, d)
			}
			fmt.Fprintf(&back, "%s\t%s product:%s model:%s device:%s\n", d.Serial, d.State, d.Product, d.Model, d.Device)
		}
		again := ParseDevices(back.String())
		if fmt.Sprint(again) != fmt.Sprint(list) {
			t.Fatalf("%q read as %+v; written back as %q it reads %+v", s, list, back.String(), again)
		}
	})
}
