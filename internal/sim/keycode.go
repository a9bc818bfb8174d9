package sim

// KeyCode returns the Android key code (KeyEvent.KEYCODE_*) of a key
// PressKey accepts, under any of the names PressKey accepts: "HOME",
// "KEYCODE_BACK", "backspace", "66". An unknown key is an error wrapping
// ErrUnknownKey.
func KeyCode(name string) (int, error) {
	k, err := normalizeKey(name)
	if err != nil {
		return 0, err
	}
	return keyCodes[k], nil
}
