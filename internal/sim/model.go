package sim

import (
	"fmt"
	"slices"
)

// Model describes a phone model the simulator can be: its name and screen.
// Layouts scale with the screen width, so every model shows the same
// screens at its own resolution.
type Model struct {
	// Name is the identifier passed to New, e.g. "Pixel7".
	Name string `json:"name"`
	// DisplayName is the marketing name shown in Settings › About phone.
	DisplayName string `json:"displayName"`
	// Manufacturer is shown in Settings › About phone.
	Manufacturer string `json:"manufacturer"`
	// Width is the screen width in pixels.
	Width int `json:"width"`
	// Height is the screen height in pixels.
	Height int `json:"height"`
	// DPI is the nominal screen density, reported for information only.
	DPI int `json:"dpi"`
	// AndroidVersion is the release the phone reports.
	AndroidVersion string `json:"androidVersion"`
}

// DefaultModel is the model name a caller should use when it has no
// preference.
const DefaultModel = "Pixel7"

var models = []Model{
	{Name: "Pixel7", DisplayName: "Pixel 7", Manufacturer: "Google", Width: 1080, Height: 2400, DPI: 420, AndroidVersion: "14"},
	{Name: "Generic", DisplayName: "Generic Phone", Manufacturer: "phonefleet", Width: 1080, Height: 2340, DPI: 420, AndroidVersion: "14"},
	{Name: "Compact", DisplayName: "Compact Phone", Manufacturer: "phonefleet", Width: 720, Height: 1600, DPI: 320, AndroidVersion: "13"},
}

// Models lists every model New accepts, in a fixed order.
func Models() []Model { return slices.Clone(models) }

// LookupModel returns the model with the given name, or an error wrapping
// ErrUnknownModel.
func LookupModel(name string) (Model, error) {
	for _, m := range models {
		if m.Name == name {
			return m, nil
		}
	}
	return Model{}, fmt.Errorf("%w: %q", ErrUnknownModel, name)
}

// APILevel maps an Android release to its API level (34 for a release it
// does not know).
func APILevel(release string) int {
	levels := map[string]int{"10": 29, "11": 30, "12": 31, "13": 33, "14": 34, "15": 35}
	if l, ok := levels[release]; ok {
		return l
	}
	return 34
}

// ABIs are the native ABIs every sim phone reports, preferred first.
func ABIs() []string { return []string{"x86_64", "arm64-v8a"} }
