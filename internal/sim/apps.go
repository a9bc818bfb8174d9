package sim

import (
	"image/color"
	"slices"
)

// Package names of the built-in apps and system components.
const (
	// PkgLauncher is the home screen and the overview of recent apps.
	PkgLauncher = "com.android.launcher3"
	// PkgSystemUI owns the status bar, navigation bar, toasts and the
	// volume panel.
	PkgSystemUI = "com.android.systemui"
	// PkgSettings is the Settings app (system).
	PkgSettings = "com.android.settings"
	// PkgNotes is the Notes app (system).
	PkgNotes = "com.example.notes"
	// PkgBrowser is the Browser app (system).
	PkgBrowser = "com.example.browser"
	// PkgStore is the Store app (system), which installs catalog apps.
	PkgStore = "com.example.store"
	// PkgCalculator is the Calculator app, installable from the catalog.
	PkgCalculator = "com.example.calculator"
	// PkgCounter is the Counter app, installable from the catalog.
	PkgCounter = "com.example.counter"
)

// AppInfo describes an app the phone has or can install.
type AppInfo struct {
	// Package is the Android package name, e.g. "com.example.notes".
	Package string `json:"package"`
	// Label is the name under the icon on the home screen.
	Label string `json:"label"`
	// Version is the app's version name.
	Version string `json:"version"`
	// Description is one line about what the app does.
	Description string `json:"description"`
	// System reports an app that ships with the phone and cannot be
	// installed or removed.
	System bool `json:"system"`
}

type appDef struct {
	info   AppInfo
	color  color.RGBA // icon and app bar colour
	onBar  color.RGBA // text on the app bar
	darkBg color.RGBA // app bar colour in the dark theme
}

var apps = []appDef{
	{AppInfo{PkgSettings, "Settings", "14", "Wi-Fi, display, apps and everything about the phone", true},
		rgb(0x3c, 0x5a, 0x99), rgb(0xff, 0xff, 0xff), rgb(0x2a, 0x3a, 0x5c)},
	{AppInfo{PkgNotes, "Notes", "2.3", "Write short notes and keep them", true},
		rgb(0xf9, 0xc2, 0x2e), rgb(0x3a, 0x2a, 0x00), rgb(0x5c, 0x4a, 0x12)},
	{AppInfo{PkgBrowser, "Browser", "118.0", "Visit web pages (served from inside the phone)", true},
		rgb(0x1a, 0x73, 0xe8), rgb(0xff, 0xff, 0xff), rgb(0x1e, 0x3a, 0x6e)},
	{AppInfo{PkgStore, "Store", "1.0", "Install more apps", true},
		rgb(0x1e, 0x8e, 0x3e), rgb(0xff, 0xff, 0xff), rgb(0x1b, 0x4d, 0x2a)},
	{AppInfo{PkgCalculator, "Calculator", "8.4", "Add, subtract, multiply and divide exactly", false},
		rgb(0xe8, 0x71, 0x0a), rgb(0xff, 0xff, 0xff), rgb(0x6b, 0x37, 0x0a)},
	{AppInfo{PkgCounter, "Counter", "1.2", "Count anything with big buttons", false},
		rgb(0x8e, 0x24, 0xaa), rgb(0xff, 0xff, 0xff), rgb(0x4a, 0x1a, 0x5c)},
}

func appByPkg(pkg string) (appDef, bool) {
	for _, a := range apps {
		if a.info.Package == pkg {
			return a, true
		}
	}
	return appDef{}, false
}

// Catalog lists the apps InstallApp can add, in a fixed order. Apps that
// ship with the phone are not in it.
func Catalog() []AppInfo {
	var out []AppInfo
	for _, a := range apps {
		if !a.info.System {
			out = append(out, a.info)
		}
	}
	return out
}

// SystemApps lists the apps every phone starts with, in home screen order.
func SystemApps() []AppInfo {
	var out []AppInfo
	for _, a := range apps {
		if a.info.System {
			out = append(out, a.info)
		}
	}
	return out
}

func systemPkgs() []string {
	var out []string
	for _, a := range SystemApps() {
		out = append(out, a.Package)
	}
	return out
}

func inCatalog(pkg string) bool {
	return slices.ContainsFunc(Catalog(), func(a AppInfo) bool { return a.Package == pkg })
}

func rgb(r, g, b uint8) color.RGBA { return color.RGBA{r, g, b, 0xff} }
