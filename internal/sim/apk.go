package sim

import (
	"bytes"
	"fmt"
	"strings"
)

// catalogAPKMagic opens every catalog APK. A real APK is a signed zip; the
// sim's catalog needs only something a test bed can send the way an APK
// is sent (adb install streams its bytes) and a device can recognise.
const catalogAPKMagic = "PHONEFLEET-SIM-APK/1\n"

// CatalogAPK returns the installable file the catalog ships for pkg: a few
// lines of text naming the package, its label and version. It is what an
// adb-connected sim phone (internal/adbsim) accepts from `adb install`. A
// package outside Catalog is an error wrapping ErrNotInCatalog.
func CatalogAPK(pkg string) ([]byte, error) {
	for _, a := range Catalog() {
		if a.Package == pkg {
			return []byte(catalogAPKMagic + "package=" + a.Package + "\nlabel=" + a.Label +
				"\nversion=" + a.Version + "\n"), nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrNotInCatalog, pkg)
}

// ParseCatalogAPK returns the package a file made by CatalogAPK installs.
// Bytes that are not such a file are an error wrapping ErrInvalidArgument;
// a well-formed file naming a package outside the catalog, one wrapping
// ErrNotInCatalog.
func ParseCatalogAPK(data []byte) (string, error) {
	rest, ok := bytes.CutPrefix(data, []byte(catalogAPKMagic))
	if !ok {
		return "", fmt.Errorf("%w: not a sim catalog APK", ErrInvalidArgument)
	}
	for _, line := range strings.Split(string(rest), "\n") {
		if pkg, ok := strings.CutPrefix(line, "package="); ok {
			if !inCatalog(pkg) {
				return "", fmt.Errorf("%w: %q", ErrNotInCatalog, pkg)
			}
			return pkg, nil
		}
	}
	return "", fmt.Errorf("%w: the APK names no package", ErrInvalidArgument)
}
