// Package sim is a deterministic virtual Android-like phone: the product's
// default device and its test bed. It is a pure state machine plus a
// renderer and knows nothing of databases, HTTP or events; an adapter plugs
// it into the domain's device backend.
//
// # What the phone does
//
// A Phone (New, one of Models) boots to a home screen with a status bar
// (logical clock, Wi-Fi, battery), a grid of app icons, a web search bar and
// a three-button navigation bar (Back, Home, Overview). It ships with
// Settings (about twenty toggles and pages in a scrolling list), Notes (a
// text field, Save, a list of notes deleted by long press and a confirm
// dialog), Browser (an address bar and pages generated from their URL, with
// links and history) and Store; Catalog offers Calculator and Counter, which
// InstallApp (or the Store) installs. The overview (APP_SWITCH) lists recent
// apps. The Dark theme toggle recolours every app.
//
// # Inputs
//
// Tap, DoubleTap, LongPress, Swipe, TypeText, PressKey, OpenApp,
// InstallApp, TapElement, Wake and ScreenOff each return an Effect saying
// what happened, or a typed error (ErrOutOfBounds, ErrUnknownKey,
// ErrNoFocusedField, ErrAppNotInstalled, ErrNotInCatalog, ErrScreenOff,
// ErrInvalidArgument, ErrElementNotFound) for errors.Is. A refused input
// changes nothing at all. While the screen is off every input except Wake
// and the POWER and WAKEUP keys is refused with ErrScreenOff (rather than
// silently ignored, so a client never mistakes a dropped tap for success),
// and screenshots are black. Gestures follow Android: a press shorter than
// LongPressTimeoutMs is a tap, a long press on an element without a
// long-press action is released as a tap, a drag within the touch slop is a
// tap, and a vertical drag scrolls the content under its start point by the
// distance moved.
//
// # Observation
//
// Snapshot returns an accessibility-style tree (Element) whose bounds are
// exactly where Screenshot draws each element: both come from one layout
// tree rebuilt from the state, which also decides where a tap lands.
// Element refs are hashes of the element's path (resource ids, item keys),
// so they survive scrolling and state changes. ScreenHash digests the same
// tree, including every colour and line of text the renderer reads: it
// changes exactly when the picture does, and is cheap enough to check before
// every action. Screenshot renders at full resolution; ScreenshotScaled
// shrinks with a box filter for clients with small budgets.
//
// # Determinism
//
// The same model and the same inputs give the same snapshots and
// byte-identical PNGs. The clock is logical: ClockStart plus ClockStep per
// accepted input, never wall time. Text is drawn with the Go fonts embedded
// in golang.org/x/image; runes those fonts lack (CJK, emoji) are drawn as
// boxes showing their code point, while the element text keeps the real
// characters. Nothing iterates a map while drawing, and the PNG encoder
// splits its work into a fixed number of segments, not one per CPU.
//
// State serialises the whole phone to JSON and Restore brings it back.
// Methods are safe for concurrent use; inputs apply one at a time.
package sim
