package apps

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"phonefleet/domain"
	"phonefleet/internal/sim"
)

// TestEmbeddedCatalogShipsTheSimPhonesApps checks the embedded catalog:
// every version's file opens, hashes to the SHA-256 the catalog names
// (so the fleet would send it), and is the sim's own build of the app,
// which a sim phone and the adb emulation accept.
func TestEmbeddedCatalogShipsTheSimPhonesApps(t *testing.T) {
	a := &Apps{cfg: Config{Catalog: domain.DefaultAppCatalog()}}
	var pkgs []string
	for _, app := range a.cfg.Catalog.Apps {
		for _, v := range app.Versions {
			data, err := a.openAPK(v)
			if err != nil {
				t.Fatalf("%s %s: %v", app.Package, v.Version, err)
			}
			apk := domain.APK{Package: app.Package, Version: v.Version, SHA256: v.SHA256, Data: data}
			if err := apk.Verify(); err != nil {
				t.Errorf("%s %s: %v", app.Package, v.Version, err)
			}
			want, err := sim.CatalogAPK(app.Package)
			if err != nil || !bytes.Equal(data, want) {
				t.Errorf("%s %s: the embedded file is not the sim's build (%v)", app.Package, v.Version, err)
			}
		}
		pkgs = append(pkgs, app.Package)
	}
	for _, s := range sim.Catalog() {
		if !strings.Contains(strings.Join(pkgs, ","), s.Package) {
			t.Errorf("the sim's installable %s is not in the embedded catalog", s.Package)
		}
	}
}

// TestCatalogFileIsCheckedAndReadRelativeToItself loads a catalog file
// whose APK path is relative to it, and refuses malformed ones.
func TestCatalogFileIsCheckedAndReadRelativeToItself(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.apk"), []byte("bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := `{"apps":[{"package":"com.example.x","title":"X","versions":[{"version":"1","apk":"x.apk","sha256":"` +
		strings.Repeat("0", 64) + `","minSdk":21,"abis":["arm64-v8a"]}]}]}`
	path := filepath.Join(dir, "apps.json")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	c, d, err := LoadCatalog(path)
	if err != nil {
		t.Fatal(err)
	}
	_, v, ok := c.Find("com.example.x", "1")
	if !ok {
		t.Fatal("version 1 not found")
	}
	a := &Apps{cfg: Config{Catalog: c, CatalogDir: d}}
	if data, err := a.openAPK(v); err != nil || string(data) != "bytes" {
		t.Fatalf("open x.apk: got %q, %v", data, err)
	}
	apk := domain.APK{Package: "com.example.x", Version: "1", SHA256: v.SHA256, Data: []byte("bytes")}
	if err := apk.Verify(); domain.ErrorCode(err) != domain.CodeInvalidArgument || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("a file that does not hash to its sha256: got %v; want invalid_argument apk_hash_mismatch", err)
	}
	for _, bad := range []string{
		`{"apps":[{"package":"x","title":"X","versions":[]}]}`,
		strings.Replace(good, `"minSdk":21`, `"minSdk":0`, 1),
		strings.Replace(good, strings.Repeat("0", 64), "ABC", 1),
		strings.Replace(good, `"title"`, `"titel"`, 1),
		`{"apps":[` + good[9:len(good)-2] + `,` + good[9:len(good)-2] + `]}`,
	} {
		if _, err := domain.ParseAppCatalog([]byte(bad)); err == nil {
			t.Errorf("catalog %s: accepted; want refused", bad)
		}
	}
}

// TestIneligibleSaysWhy checks each reason a device cannot install.
func TestIneligibleSaysWhy(t *testing.T) {
	free := int64(100)
	v := domain.CatalogVersion{Version: "1", MinSDK: 30, ABIs: []string{"arm64-v8a"}}
	ok := domain.DeviceSoftware{SDK: 34, OSVersion: "14", ABIs: []string{"x86_64", "arm64-v8a"}, CanInstall: true, StorageFreeBytes: &free}
	for _, tc := range []struct {
		change func(s *domain.DeviceSoftware)
		size   int64
		want   string
	}{
		{func(*domain.DeviceSoftware) {}, 50, ""},
		{func(s *domain.DeviceSoftware) { s.CanInstall = false }, 0, domain.ReasonInstallUnsupported},
		{func(s *domain.DeviceSoftware) { s.SDK = 29 }, 0, domain.ReasonOSTooOld},
		{func(s *domain.DeviceSoftware) { s.ABIs = []string{"x86_64"} }, 0, domain.ReasonABIUnsupported},
		{func(*domain.DeviceSoftware) {}, 500, domain.ReasonInsufficientSpace},
	} {
		s := ok
		tc.change(&s)
		reason, msg, fits := v.Ineligible(s, tc.size)
		if reason != tc.want || fits != (tc.want == "") || (tc.want != "" && msg == "") {
			t.Errorf("%+v size %d: got %q %q %v; want %q", s, tc.size, reason, msg, fits, tc.want)
		}
	}
}
