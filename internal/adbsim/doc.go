// Package adbsim is a device-side adb daemon written in Go and backed by a
// sim phone: the test bed for the adb backend. The real adb server
// connects to it with `adb connect 127.0.0.1:PORT`, exactly as to a phone
// with wireless debugging, and everything from there on is the real wire
// protocol: the 24-byte message header, CNXN (with AUTH when asked for),
// OPEN/OKAY/WRTE/CLSE streams with per-stream flow control, the services
// shell: (raw and pty, with or without the shell_v2 protocol) and exec:.
// Only the phone behind them is simulated.
//
// # What the device answers
//
// A small shell runs the commands a client of a phone uses: screencap,
// uiautomator dump, input (tap, swipe, keyevent, text), am (start,
// broadcast with the ADBKeyBoard actions for Unicode text, force-stop),
// monkey, pm and cmd package (list packages, clear, install, streamed
// install from stdin), wm size, getprop, dumpsys (window, power, activity)
// and the plumbing around them (echo, cat, grep, stty, exit, ;, &&, ||, |,
// redirections, $?). Outputs follow a real device's, including their
// quirks ("UI hierchary dumped to: /dev/tty"). Unknown commands answer as
// Android's shell does, with status 127.
//
// Inputs the sim phone refuses (a tap off the screen, typing with no
// focused field, anything while the screen is off) are dropped without a
// word, as Android's input command drops them; Daemon.Refusals lists them
// so a test can still see what happened.
//
// # Test controls
//
// Kill drops every connection abruptly and stops listening, as a phone
// that vanishes from the network; Restart listens again on the same port,
// and the adb server reconnects (or `adb connect` brings it back). Serial
// is the name adb gives the device (127.0.0.1:PORT).
package adbsim
