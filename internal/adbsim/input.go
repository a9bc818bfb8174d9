package adbsim

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"phonefleet/internal/sim"
)

// androidKeys are Android key codes (KeyEvent.KEYCODE_*) beyond the
// digits and letters, so that `input keyevent NAME` accepts what a device
// accepts. Keys the sim phone has act on it; letters and digits type
// themselves into the focused field; the rest are accepted and change
// nothing, as on a phone where nothing listens for them.
var androidKeys = map[string]int{
	"UNKNOWN": 0, "SOFT_LEFT": 1, "SOFT_RIGHT": 2, "HOME": 3, "BACK": 4, "CALL": 5, "ENDCALL": 6,
	"STAR": 17, "POUND": 18, "DPAD_UP": 19, "DPAD_DOWN": 20, "DPAD_LEFT": 21, "DPAD_RIGHT": 22,
	"DPAD_CENTER": 23, "VOLUME_UP": 24, "VOLUME_DOWN": 25, "POWER": 26, "CAMERA": 27, "CLEAR": 28,
	"COMMA": 55, "PERIOD": 56, "TAB": 61, "SPACE": 62, "ENTER": 66, "DEL": 67, "GRAVE": 68,
	"MINUS": 69, "EQUALS": 70, "LEFT_BRACKET": 71, "RIGHT_BRACKET": 72, "BACKSLASH": 73,
	"SEMICOLON": 74, "APOSTROPHE": 75, "SLASH": 76, "AT": 77, "MENU": 82, "NOTIFICATION": 83,
	"SEARCH": 84, "MEDIA_PLAY_PAUSE": 85, "PAGE_UP": 92, "PAGE_DOWN": 93, "ESCAPE": 111,
	"FORWARD_DEL": 112, "MOVE_HOME": 122, "MOVE_END": 123, "VOLUME_MUTE": 164,
	"APP_SWITCH": 187, "SLEEP": 223, "WAKEUP": 224, "ASSIST": 219, "SETTINGS": 176,
}

// keyChars are the characters the key codes 7–16 (digits) and 29–54
// (letters) type, and a few punctuation keys.
func keyChar(code int) (string, bool) {
	switch {
	case code >= 7 && code <= 16:
		return string(rune('0' + code - 7)), true
	case code >= 29 && code <= 54:
		return string(rune('a' + code - 29)), true
	}
	punct := map[int]string{55: ",", 56: ".", 68: "`", 69: "-", 70: "=", 71: "[", 72: "]", 73: `\`,
		74: ";", 75: "'", 76: "/", 77: "@", 17: "*", 18: "#"}
	s, ok := punct[code]
	return s, ok
}

// keyCodeOf parses a key as `input keyevent` does: a number, or a name
// with or without KEYCODE_. Unknown names give KEYCODE_UNKNOWN (0), as
// KeyEvent.keyCodeFromString does.
func keyCodeOf(arg string) int {
	if n, err := strconv.Atoi(arg); err == nil {
		return n
	}
	name := strings.TrimPrefix(strings.ToUpper(arg), "KEYCODE_")
	if c, ok := androidKeys[name]; ok {
		return c
	}
	if len(name) == 1 {
		switch c := name[0]; {
		case c >= '0' && c <= '9':
			return 7 + int(c-'0')
		case c >= 'A' && c <= 'Z':
			return 29 + int(c-'A')
		}
	}
	return 0
}

// phoneInput applies an input to the sim phone. A refusal is what a real
// device would do silently (an out-of-screen tap, typing with no focused
// field, a tap while the screen is off): the command still succeeds and
// the refusal is recorded for Daemon.Refusals.
func (e *cmdEnv) phoneInput(what string, fn func(p *sim.Phone) (sim.Effect, error)) {
	if _, err := fn(e.d.phone); err != nil {
		e.d.refused(what, err)
	}
}

// pressKey sends one key code.
func (e *cmdEnv) pressKey(code int) {
	what := "keyevent " + strconv.Itoa(code)
	if _, err := sim.KeyCode(strconv.Itoa(code)); err == nil && code != 62 {
		e.phoneInput(what, func(p *sim.Phone) (sim.Effect, error) { return p.PressKey(strconv.Itoa(code)) })
		return
	}
	if s, ok := keyChar(code); ok || code == 62 {
		if code == 62 {
			s = " "
		}
		e.phoneInput(what, func(p *sim.Phone) (sim.Effect, error) { return p.TypeText(s) })
		return
	}
	e.d.refused(what, errors.New("no sim key for this key code; ignored"))
}

var inputSources = map[string]bool{"keyboard": true, "mouse": true, "touchpad": true, "touchscreen": true,
	"touchnavigation": true, "stylus": true, "trackball": true, "dpad": true, "gamepad": true,
	"joystick": true, "rotaryencoder": true}

func inputUsage(e *cmdEnv, sub string) int {
	if sub != "" {
		e.err("Error: Invalid arguments for command: %s\n", sub)
	}
	e.err("Usage: input [<source>] [-d DISPLAY_ID] <command> [<arg>...]\n\nThe commands and default sources are:\n" +
		"      text <string> (Default: touchscreen)\n      keyevent [--longpress|--doubletap] <key code number or name> ... (Default: keyboard)\n" +
		"      tap <x> <y> (Default: touchscreen)\n      swipe <x1> <y1> <x2> <y2> [duration(ms)] (Default: touchscreen)\n" +
		"      draganddrop <x1> <y1> <x2> <y2> [duration(ms)] (Default: touchscreen)\n")
	return 1
}

// coords parses the numbers of tap and swipe; Android accepts decimals.
func coords(args []string) ([]int, bool) {
	out := make([]int, len(args))
	for i, a := range args {
		f, err := strconv.ParseFloat(a, 64)
		if err != nil {
			return nil, false
		}
		out[i] = int(f)
	}
	return out, true
}

// cmdInput is Android's input command: tap, swipe (a swipe in place
// with a duration is a long press), keyevent, text.
func cmdInput(e *cmdEnv, args []string) int {
	for len(args) > 0 && (inputSources[args[0]] || args[0] == "-d") {
		if args[0] == "-d" && len(args) > 1 {
			args = args[1:]
		}
		args = args[1:]
	}
	if len(args) == 0 {
		return inputUsage(e, "")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "tap":
		c, ok := coords(rest)
		if !ok || len(c) != 2 {
			return inputUsage(e, sub)
		}
		e.phoneInput(fmt.Sprintf("tap %d %d", c[0], c[1]), func(p *sim.Phone) (sim.Effect, error) { return p.Tap(c[0], c[1]) })
	case "swipe", "draganddrop":
		c, ok := coords(rest)
		if !ok || (len(c) != 4 && len(c) != 5) {
			return inputUsage(e, sub)
		}
		dur := 300 // Android's default swipe duration
		if len(c) == 5 && c[4] >= 0 {
			dur = c[4]
		}
		what := fmt.Sprintf("swipe %d %d %d %d %d", c[0], c[1], c[2], c[3], dur)
		slop := 24 * e.d.phone.Model().Width / 1080
		if abs(c[2]-c[0]) < slop && abs(c[3]-c[1]) < slop {
			// A press that does not move: a tap or, held long enough, a long press.
			e.phoneInput(what, func(p *sim.Phone) (sim.Effect, error) { return p.LongPress(c[0], c[1], max(dur, 1)) })
		} else {
			e.phoneInput(what, func(p *sim.Phone) (sim.Effect, error) { return p.Swipe(c[0], c[1], c[2], c[3], dur) })
		}
	case "press":
		e.pressKey(23)
	case "roll", "motionevent", "scroll":
		// Accepted and ignored: the sim phone has no trackball or pointer.
	case "keyevent":
		var codes []int
		for _, a := range rest {
			if a == "--longpress" || a == "--doubletap" {
				continue
			}
			codes = append(codes, keyCodeOf(a))
		}
		if len(codes) == 0 {
			return inputUsage(e, sub)
		}
		for _, c := range codes {
			e.pressKey(c)
		}
	case "text":
		if len(rest) == 0 {
			return inputUsage(e, sub)
		}
		// Clients escape spaces as %s; the shell has taken the quotes
		// and backslashes off already.
		text := strings.ReplaceAll(strings.Join(rest, " "), "%s", " ")
		for _, r := range text {
			if r >= utf8.RuneSelf || r < 0x20 {
				e.err("Exception occurred while executing 'text':\njava.lang.IllegalArgumentException: input text carries ASCII only (character %U); send Unicode with am broadcast -a ADB_INPUT_B64\n", r)
				return 255
			}
		}
		e.phoneInput("text "+text, func(p *sim.Phone) (sim.Effect, error) { return p.TypeText(text) })
	default:
		e.err("Error: Unknown command: %s\n", sub)
		return inputUsage(e, "")
	}
	return 0
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// intentArgs is the part of an am command line that describes an intent.
type intentArgs struct {
	action, component, category, data string
	extras                            map[string]string
	flags                             []string
}

func parseIntent(args []string) intentArgs {
	in := intentArgs{extras: map[string]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() string {
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch a {
		case "-a":
			in.action = next()
		case "-n":
			in.component = next()
		case "-c":
			in.category = next()
		case "-d":
			in.data = next()
		case "--es", "--ei", "--el", "--ez", "--ef", "--eu", "--eia", "--esa":
			k := next()
			in.extras[k] = next()
		case "-f", "--user":
			in.flags = append(in.flags, a+" "+next())
		default:
			in.flags = append(in.flags, a)
		}
	}
	return in
}

// activityOf names the launcher activity of a package.
func activityOf(pkg string) string {
	switch pkg {
	case sim.PkgSettings:
		return pkg + ".Settings"
	case sim.PkgLauncher:
		return pkg + ".Launcher"
	}
	return pkg + ".MainActivity"
}

func shortActivity(pkg string) string {
	return pkg + "/" + strings.Replace(activityOf(pkg), pkg, "", 1)
}

// cmdAm is the activity manager: start, broadcast (with the ADBKeyBoard
// actions that type Unicode into the focused field) and force-stop.
func cmdAm(e *cmdEnv, args []string) int {
	if len(args) == 0 {
		e.err("usage: am [subcommand] [options]\n")
		return 1
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "start", "start-activity":
		in := parseIntent(rest)
		return e.amStart(in)
	case "broadcast":
		in := parseIntent(rest)
		return e.amBroadcast(in)
	case "force-stop", "kill":
		if len(rest) == 0 {
			e.err("Error: no package specified\n")
			return 1
		}
		pkg := rest[len(rest)-1]
		if e.d.phone.Foreground() == pkg {
			e.phoneInput("force-stop "+pkg, func(p *sim.Phone) (sim.Effect, error) { return p.PressKey("HOME") })
		}
		return 0
	}
	e.err("Error: Unknown command: %s\n", sub)
	return 255
}

func (e *cmdEnv) amStart(in intentArgs) int {
	if in.component == "" && in.category == "android.intent.category.HOME" {
		e.out("Starting: Intent { act=%s cat=[%s] }\n", in.action, in.category)
		e.phoneInput("am start HOME", func(p *sim.Phone) (sim.Effect, error) { return p.OpenApp(sim.PkgLauncher) })
		return 0
	}
	if in.component == "" {
		e.out("Starting: Intent { act=%s }\n", in.action)
		e.err("Error: Activity not started, unable to resolve Intent { act=%s flg=0x10000000 }\n", in.action)
		return 1
	}
	pkg, act, _ := strings.Cut(in.component, "/")
	if strings.HasPrefix(act, ".") {
		act = pkg + act
	}
	e.out("Starting: Intent { cmp=%s }\n", in.component)
	if !e.installed(pkg) {
		e.err("Error type 3\nError: Activity class {%s/%s} does not exist.\n", pkg, act)
		return 1
	}
	e.phoneInput("am start "+in.component, func(p *sim.Phone) (sim.Effect, error) { return p.OpenApp(pkg) })
	return 0
}

func (e *cmdEnv) installed(pkg string) bool {
	if pkg == sim.PkgLauncher {
		return true
	}
	for _, a := range e.d.phone.InstalledApps() {
		if a.Package == pkg {
			return true
		}
	}
	return false
}

// amBroadcast delivers the ADBKeyBoard intents (the IME that types what
// adb sends it): ADB_INPUT_TEXT (msg), ADB_INPUT_B64 (msg, base64 of
// UTF-8), ADB_INPUT_CHARS (chars, code points), ADB_INPUT_CODE (code, a
// key code), ADB_EDITOR_CODE (an editor action: ENTER) and
// ADB_CLEAR_TEXT. Other broadcasts reach nobody.
func (e *cmdEnv) amBroadcast(in intentArgs) int {
	e.out("Broadcasting: Intent { act=%s flg=0x400000", in.action)
	if len(in.extras) > 0 {
		e.out(" (has extras)")
	}
	e.out(" }\n")
	typeText := func(text string) {
		e.phoneInput(in.action, func(p *sim.Phone) (sim.Effect, error) { return p.TypeText(text) })
	}
	switch in.action {
	case "ADB_INPUT_TEXT":
		typeText(in.extras["msg"])
	case "ADB_INPUT_B64":
		raw, err := base64.StdEncoding.DecodeString(in.extras["msg"])
		if err != nil {
			e.d.refused(in.action, err)
			break
		}
		typeText(string(raw))
	case "ADB_INPUT_CHARS":
		var b strings.Builder
		for _, f := range strings.Split(in.extras["chars"], ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
				b.WriteRune(rune(n))
			}
		}
		typeText(b.String())
	case "ADB_INPUT_CODE":
		n, _ := strconv.Atoi(in.extras["code"])
		e.pressKey(n)
	case "ADB_EDITOR_CODE":
		e.pressKey(66)
	case "ADB_CLEAR_TEXT":
		e.clearFocused()
	}
	e.out("Broadcast completed: result=0\n")
	return 0
}

// clearFocused deletes the focused field's text one character at a time.
func (e *cmdEnv) clearFocused() {
	el, ok := e.d.phone.Snapshot().Find(func(el sim.Element) bool { return el.Focused })
	if !ok {
		e.d.refused("ADB_CLEAR_TEXT", sim.ErrNoFocusedField)
		return
	}
	for range utf8.RuneCountInString(el.Text) {
		e.phoneInput("ADB_CLEAR_TEXT", func(p *sim.Phone) (sim.Effect, error) { return p.PressKey("DEL") })
	}
}

// cmdMonkey supports the launch idiom: monkey -p PKG -c
// android.intent.category.LAUNCHER 1.
func cmdMonkey(e *cmdEnv, args []string) int {
	var pkgs []string
	for i := 0; i < len(args); i++ {
		e.out("  bash arg: %s\n", args[i])
		if args[i] == "-p" && i+1 < len(args) {
			i++
			e.out("  bash arg: %s\n", args[i])
			pkgs = append(pkgs, args[i])
		}
	}
	for _, p := range pkgs {
		if !e.installed(p) {
			e.err("** No activities found to run, monkey aborted.\n")
			return 252
		}
	}
	if len(pkgs) == 0 {
		e.err("** No activities found to run, monkey aborted.\n")
		return 252
	}
	pkg := pkgs[0]
	e.phoneInput("monkey -p "+pkg, func(p *sim.Phone) (sim.Effect, error) { return p.OpenApp(pkg) })
	e.out("Events injected: 1\n## Network stats: elapsed time=0ms (0ms mobile, 0ms wifi, 0ms not connected)\n")
	return 0
}

// cmdPm is the package manager (also reached as cmd package).
func cmdPm(e *cmdEnv, args []string) int {
	if len(args) == 0 {
		e.err("usage: pm [list|path|install|clear] ...\n")
		return 1
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "list":
		if len(rest) == 0 || rest[0] != "packages" {
			e.err("Error: unknown list type '%s'\n", strings.Join(rest, " "))
			return 1
		}
		third, system, filter := false, false, ""
		for _, a := range rest[1:] {
			switch {
			case a == "-3":
				third = true
			case a == "-s":
				system = true
			case !strings.HasPrefix(a, "-"):
				filter = a
			}
		}
		type pkg struct {
			name   string
			system bool
		}
		all := []pkg{{sim.PkgLauncher, true}, {sim.PkgSystemUI, true}}
		for _, a := range e.d.phone.InstalledApps() {
			all = append(all, pkg{a.Package, a.System})
		}
		for _, p := range all {
			if (third && p.system) || (system && !p.system) || !strings.Contains(p.name, filter) {
				continue
			}
			e.out("package:%s\n", p.name)
		}
		return 0
	case "path":
		if len(rest) == 0 || !e.installed(rest[0]) {
			return 1
		}
		e.out("package:/data/app/%s-1/base.apk\n", rest[0])
		return 0
	case "clear":
		if len(rest) == 0 {
			e.err("Error: no package specified\n")
			return 1
		}
		pkg := rest[len(rest)-1]
		if _, err := e.d.phone.ClearAppData(pkg); err != nil {
			e.out("Failed\n")
			return 1
		}
		e.out("Success\n")
		return 0
	case "install":
		return e.pmInstall(rest)
	case "uninstall":
		e.out("Failure [DELETE_FAILED_INTERNAL_ERROR]\n")
		return 1
	}
	e.err("Unknown command: %s\n", sub)
	return 1
}

// pmInstall installs a catalog APK (sim.CatalogAPK) from a file or, with
// -S SIZE, from exactly SIZE bytes of stdin, as adb install streams it.
func (e *cmdEnv) pmInstall(args []string) int {
	size, file := -1, ""
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-S" && i+1 < len(args):
			i++
			n, err := strconv.Atoi(args[i])
			if err != nil || n < 0 {
				e.out("Failure [INSTALL_FAILED_INVALID_APK: bad size %s]\n", args[i])
				return 1
			}
			size = n
		case strings.HasPrefix(a, "-"):
			if a == "-i" || a == "--user" || a == "--install-location" || a == "-p" {
				i++
			}
		default:
			file = a
		}
	}
	var apk []byte
	switch {
	case size >= 0:
		apk = make([]byte, size)
		n, err := readFull(e, apk)
		if err != nil {
			e.out("Failure [INSTALL_FAILED_INVALID_APK: read %d of %d bytes]\n", n, size)
			return 1
		}
	case file != "":
		data, ok := e.d.readFile(absPath(file))
		if !ok {
			e.out("Failure [INSTALL_FAILED_INVALID_URI]\n")
			return 1
		}
		apk = data
	default:
		e.err("Error: must either specify a package size or an APK file\n")
		return 1
	}
	pkg, err := sim.ParseCatalogAPK(apk)
	if err != nil {
		e.out("Failure [INSTALL_PARSE_FAILED_NOT_APK: %v]\n", err)
		return 1
	}
	if _, err := e.d.phone.InstallApp(pkg); err != nil {
		e.d.refused("install "+pkg, err)
		e.out("Failure [INSTALL_FAILED_INTERNAL_ERROR: %v]\n", err)
		return 1
	}
	e.out("Success\n")
	return 0
}

func readFull(e *cmdEnv, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := e.stdin.Read(b[n:])
		n += m
		if err != nil {
			if n == len(b) {
				return n, nil
			}
			return n, err
		}
	}
	return n, nil
}

// cmdCmd routes cmd SERVICE to the tools above.
func cmdCmd(e *cmdEnv, args []string) int {
	if len(args) == 0 {
		e.err("cmd: No service specified; use -l to list all services\n")
		return 20
	}
	svc := map[string]command{"package": cmdPm, "activity": cmdAm, "input": cmdInput, "window": cmdWm}[args[0]]
	if svc == nil {
		e.err("cmd: Can't find service: %s\n", args[0])
		return 20
	}
	return svc(e, args[1:])
}

// cmdDumpsys prints the lines clients read from window, activity and
// power (focus, resumed activity, wakefulness).
func cmdDumpsys(e *cmdEnv, args []string) int {
	if len(args) == 0 {
		e.out("Currently running services:\n  activity\n  input\n  package\n  power\n  window\n")
		return 0
	}
	p := e.d.phone
	fg := p.Foreground()
	m := p.Model()
	switch args[0] {
	case "window":
		e.out("WINDOW MANAGER WINDOWS (dumpsys window windows)\n")
		e.out("  mCurrentFocus=Window{5e1c0f1 u0 %s/%s}\n", fg, activityOf(fg))
		e.out("  mFocusedApp=ActivityRecord{8d2a7b3 u0 %s t12}\n", shortActivity(fg))
		e.out("WINDOW MANAGER DISPLAY CONTENTS (dumpsys window displays)\n")
		e.out("  Display: mDisplayId=0\n    init=%dx%d %ddpi cur=%dx%d app=%dx%d rng=%dx%d-%dx%d\n",
			m.Width, m.Height, m.DPI, m.Width, m.Height, m.Width, m.Height, m.Width, m.Width, m.Height, m.Height)
		e.out("  mScreenOn=%t\n", p.ScreenOn())
	case "activity":
		e.out("ACTIVITY MANAGER ACTIVITIES (dumpsys activity activities)\n")
		e.out("  mResumedActivity: ActivityRecord{8d2a7b3 u0 %s t12}\n", shortActivity(fg))
		e.out("  ResumedActivity: ActivityRecord{8d2a7b3 u0 %s t12}\n", shortActivity(fg))
	case "power":
		wake, state := "Awake", "ON"
		if !p.ScreenOn() {
			wake, state = "Asleep", "OFF"
		}
		e.out("POWER MANAGER (dumpsys power)\n\nPower Manager State:\n  mWakefulness=%s\n  mWakefulnessChanging=false\n", wake)
		e.out("  mIsPowered=true\n  mHoldingDisplaySuspendBlocker=%t\n", p.ScreenOn())
		e.out("Display Power: state=%s\n", state)
	default:
		e.out("Can't find service: %s\n", args[0])
	}
	return 0
}
