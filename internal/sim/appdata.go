package sim

import (
	"fmt"
	"slices"
)

// ClearAppData empties an installed app's data, as `pm clear` does on
// Android: Notes loses its notes and draft, Browser its page and history,
// Calculator and Counter their values, Settings and Store their place in
// their pages (the system toggles are settings, not app data, and stay).
// The app is stopped: if it is in front the phone goes home, and it
// leaves the recent apps. It works with the screen off. A package that is
// not installed fails with ErrAppNotInstalled.
func (p *Phone) ClearAppData(pkg string) (Effect, error) {
	if pkg == "" {
		return Effect{}, fmt.Errorf("%w: empty package name", ErrInvalidArgument)
	}
	return p.input("clear_app_data", true, func(e *Effect) error {
		if !slices.Contains(p.st.Installed, pkg) {
			return fmt.Errorf("%w: %q", ErrAppNotInstalled, pkg)
		}
		fresh, err := New(p.model.Name, p.st.Serial)
		if err != nil {
			return err
		}
		if p.st.Screen == screenApp && p.st.Foreground == pkg {
			p.goHome()
		}
		switch pkg {
		case PkgSettings:
			p.st.Settings.Stack = fresh.st.Settings.Stack
		case PkgNotes:
			if p.st.Focus == focusNotes {
				p.st.Focus = ""
			}
			p.st.Notes = fresh.st.Notes
		case PkgBrowser:
			if p.st.Focus == focusBrowser {
				p.st.Focus = ""
			}
			p.st.Browser = fresh.st.Browser
		case PkgCalculator:
			p.st.Calc = fresh.st.Calc
		case PkgCounter:
			p.st.Counter = fresh.st.Counter
		case PkgStore:
			p.st.Store = fresh.st.Store
		}
		p.st.Recents = slices.DeleteFunc(p.st.Recents, func(s string) bool { return s == pkg })
		a, _ := appByPkg(pkg)
		e.Description = "cleared the data of " + a.info.Label
		return nil
	})
}
