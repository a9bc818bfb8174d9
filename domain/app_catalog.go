package domain

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// The app store's catalog (spec 1 item 8, 4.5): the managed apps the
// deployment offers, each version with the location of its APK, the
// APK's SHA-256, the lowest Android API level it runs on and the ABIs it
// ships native code for. It comes from a file (SERVICE_APP_CATALOG_FILE,
// JSON) with an embedded default holding the sim phones' installable apps.

//go:embed catalogdata/apps.json
var defaultAppCatalogJSON []byte

// EmbeddedAPKs holds the APKs of the embedded catalog; a location
// "embedded:apks/NAME" names a file in it.
//
//go:embed catalogdata/apks
var EmbeddedAPKs embed.FS

// AppCatalog is the deployment's catalog of managed apps.
type AppCatalog struct {
	Apps []CatalogApp `json:"apps"`
}

// CatalogApp is one managed app.
type CatalogApp struct {
	Package  string           `json:"package"`
	Title    string           `json:"title"`
	Versions []CatalogVersion `json:"versions"`
}

// CatalogVersion is one installable version of a managed app.
type CatalogVersion struct {
	Version string `json:"version"`
	// APK is where the file is: "embedded:apks/NAME" (built in), an
	// absolute path, or a path relative to the catalog file.
	APK string `json:"apk"`
	// SHA256 is the hex SHA-256 of the APK; the file is refused before it
	// is sent to any phone when its bytes do not hash to it.
	SHA256 string `json:"sha256"`
	// MinSDK is the lowest Android API level the version runs on.
	MinSDK int `json:"minSdk"`
	// ABIs are the native ABIs the APK ships code for; empty means it has
	// none (any device can run it).
	ABIs []string `json:"abis"`
}

var (
	appPackagePattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+$`)
	sha256Pattern     = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// DefaultAppCatalog returns the embedded catalog.
func DefaultAppCatalog() *AppCatalog {
	c, err := ParseAppCatalog(defaultAppCatalogJSON)
	if err != nil {
		panic(fmt.Sprintf("embedded app catalog: %v", err)) // a defect of the build, caught by every test run
	}
	return c
}

// ParseAppCatalog reads and checks a catalog file; unknown fields are
// refused, so a misspelt field is found when the service starts.
func ParseAppCatalog(b []byte) (*AppCatalog, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c AppCatalog
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("app catalog: %w", err)
	}
	seen := map[string]bool{}
	for _, a := range c.Apps {
		if !appPackagePattern.MatchString(a.Package) || len(a.Package) > MaxPackageLen {
			return nil, fmt.Errorf("app catalog: %q is not a package name", a.Package)
		}
		if seen[a.Package] {
			return nil, fmt.Errorf("app catalog: %s is listed twice", a.Package)
		}
		seen[a.Package] = true
		if strings.TrimSpace(a.Title) == "" || len(a.Versions) == 0 {
			return nil, fmt.Errorf("app catalog: %s needs a title and at least one version", a.Package)
		}
		versions := map[string]bool{}
		for _, v := range a.Versions {
			if v.Version == "" || len(v.Version) > 64 || versions[v.Version] {
				return nil, fmt.Errorf("app catalog: %s has an empty, long or repeated version %q", a.Package, v.Version)
			}
			versions[v.Version] = true
			if v.APK == "" || !sha256Pattern.MatchString(v.SHA256) || v.MinSDK < 1 {
				return nil, fmt.Errorf("app catalog: %s %s needs apk, a lower-case hex sha256 and minSdk ≥ 1", a.Package, v.Version)
			}
		}
	}
	return &c, nil
}

// Find returns the catalog's version of an app.
func (c *AppCatalog) Find(pkg, version string) (CatalogApp, CatalogVersion, bool) {
	for _, a := range c.Apps {
		if a.Package != pkg {
			continue
		}
		for _, v := range a.Versions {
			if v.Version == version {
				return a, v, true
			}
		}
	}
	return CatalogApp{}, CatalogVersion{}, false
}

// DeviceSoftware is what a device reports of itself for installing apps:
// its Android release and API level, its ABIs, its free storage and the
// apps on it. SoftwareReader backends read it.
type DeviceSoftware struct {
	OSVersion string   `json:"osVersion"`
	SDK       int      `json:"sdk"`
	ABIs      []string `json:"abis"`
	// StorageFreeBytes is the free space of the data partition; nil when
	// the device does not say.
	StorageFreeBytes *int64 `json:"storageFreeBytes,omitempty"`
	// CanInstall reports whether the device's backend can install an APK
	// at all.
	CanInstall bool           `json:"canInstall"`
	Apps       []InstalledApp `json:"apps"`
}

// InstalledApp is one app on a device.
type InstalledApp struct {
	Package string `json:"package"`
	// Version is the version name; empty when the device does not say.
	Version string `json:"version,omitempty"`
	// System is an app that ships with the device.
	System bool `json:"system"`
}

// Reasons a device cannot install a catalog version (the catalog's and
// an installation's reason).
const (
	ReasonInstallUnsupported = "install_unsupported"
	ReasonOSTooOld           = "os_too_old"
	ReasonABIUnsupported     = "abi_unsupported"
	ReasonInsufficientSpace  = "insufficient_storage"
	ReasonSoftwareNotRead    = "inventory_not_read"
	ReasonAPKHashMismatch    = "apk_hash_mismatch"
)

// Ineligible says why a device with software sw cannot install v (a
// reason above and a sentence), or ok when it can. size is the APK's
// size in bytes when known (0: unchecked).
func (v CatalogVersion) Ineligible(sw DeviceSoftware, size int64) (reason, message string, ok bool) {
	switch {
	case !sw.CanInstall:
		return ReasonInstallUnsupported, "this device's backend cannot install apps", false
	case sw.SDK < v.MinSDK:
		return ReasonOSTooOld, fmt.Sprintf("needs Android API level %d; the device runs %d (Android %s)", v.MinSDK, sw.SDK, sw.OSVersion), false
	case len(v.ABIs) > 0 && !slices.ContainsFunc(v.ABIs, func(a string) bool { return slices.Contains(sw.ABIs, a) }):
		return ReasonABIUnsupported, fmt.Sprintf("ships code for %s; the device runs %s", strings.Join(v.ABIs, ", "), strings.Join(sw.ABIs, ", ")), false
	case size > 0 && sw.StorageFreeBytes != nil && *sw.StorageFreeBytes < size:
		return ReasonInsufficientSpace, fmt.Sprintf("needs %d bytes free; the device has %d", size, *sw.StorageFreeBytes), false
	}
	return "", "", true
}

// APK is an app's file on its way to a device: the bytes an install sends
// and the SHA-256 the catalog names for them.
type APK struct {
	Package string `json:"package"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	Data    []byte `json:"data"`
}

// Verify refuses, with invalid_argument (reason apk_hash_mismatch), bytes
// that do not hash to the SHA-256 the catalog names: such a file is never
// sent to a phone.
func (a *APK) Verify() error {
	sum := sha256.Sum256(a.Data)
	if got := hex.EncodeToString(sum[:]); got != a.SHA256 {
		return Errorf(CodeInvalidArgument, "the APK of %s %s does not match its SHA-256 (catalog %s, file %s); nothing was sent to the device",
			a.Package, a.Version, a.SHA256, got).With("reason", ReasonAPKHashMismatch)
	}
	return nil
}
