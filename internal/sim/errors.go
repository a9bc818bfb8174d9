package sim

import "errors"

// The errors below are the typed refusals of a Phone. Inputs wrap them with
// detail (fmt.Errorf("%w: …")), so callers classify with errors.Is and an
// adapter can map each to one error code without reading messages. An input
// that returns an error has changed nothing: not the screen, not the clock.
var (
	// ErrOutOfBounds means a coordinate lies outside the screen
	// (0 ≤ x < width, 0 ≤ y < height).
	ErrOutOfBounds = errors.New("sim: coordinates outside the screen")

	// ErrUnknownKey means PressKey was given a key name or code the phone
	// does not have.
	ErrUnknownKey = errors.New("sim: unknown key")

	// ErrNoFocusedField means text input (TypeText, DEL, SPACE) arrived
	// while no text field had focus; tap a field first.
	ErrNoFocusedField = errors.New("sim: no focused text field")

	// ErrAppNotInstalled means OpenApp named a package that is not
	// installed on this phone (it may still be installable from Catalog).
	ErrAppNotInstalled = errors.New("sim: app not installed")

	// ErrNotInCatalog means InstallApp named a package that neither ships
	// with the phone nor is offered by Catalog.
	ErrNotInCatalog = errors.New("sim: app not in catalog")

	// ErrScreenOff means the screen is off; only Wake and the POWER and
	// WAKEUP keys are accepted until it is on again.
	ErrScreenOff = errors.New("sim: screen is off")

	// ErrUnknownModel means New or Restore was given a model name that
	// Models does not list.
	ErrUnknownModel = errors.New("sim: unknown model")

	// ErrInvalidArgument means an argument is malformed: a negative
	// duration, text that is not valid UTF-8 or holds control characters,
	// text that would overflow a field, an empty package name or a
	// non-positive width.
	ErrInvalidArgument = errors.New("sim: invalid argument")

	// ErrElementNotFound means no element with the given reference is on
	// the current screen; take a new Snapshot.
	ErrElementNotFound = errors.New("sim: no element with that reference on screen")

	// ErrInvalidState means Restore was given bytes that are not a state
	// produced by State, or a state that contradicts itself.
	ErrInvalidState = errors.New("sim: invalid saved state")
)
