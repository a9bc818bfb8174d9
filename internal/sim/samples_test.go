package sim

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var samples = flag.String("samples", "", "write full-size sample screenshots (sim-<screen>.png) into this directory")

// TestWriteSamples saves full-size screenshots of interesting screens for a
// person to look at: go test ./internal/sim -run Samples -samples /tmp
func TestWriteSamples(t *testing.T) {
	if *samples == "" {
		t.Skip("no -samples directory given")
	}
	for _, sc := range screens(t) {
		b, err := sc.p.Screenshot()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*samples, "sim-"+sc.name+".png"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The two screens named in the brief: Settings after toggling Wi-Fi,
	// and Notes with the scripted note saved.
	p := newPhone(t)
	for _, s := range session() {
		s.do(t, p)
		switch s.name {
		case "toggle_wifi":
			writeShot(t, p, filepath.Join(*samples, "sim-settings.png"))
		case "save_note":
			writeShot(t, p, filepath.Join(*samples, "sim-notes.png"))
		}
	}
}

func writeShot(t *testing.T, p *Phone, path string) {
	t.Helper()
	b, err := p.Screenshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
