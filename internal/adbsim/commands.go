package adbsim

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"phonefleet/internal/sim"
)

// cmdEnv is what a command runs with.
type cmdEnv struct {
	ctx            context.Context
	d              *Daemon
	s              *session
	stdin          io.Reader
	stdout, stderr io.Writer
}

func (e *cmdEnv) out(format string, a ...any) { fmt.Fprintf(e.stdout, format, a...) }
func (e *cmdEnv) err(format string, a ...any) { fmt.Fprintf(e.stderr, format, a...) }

type command func(e *cmdEnv, args []string) int

// commands are the device's programs and the shell's builtins, by name.
var commands map[string]command

func init() {
	commands = map[string]command{
		"echo": cmdEcho, "true": func(*cmdEnv, []string) int { return 0 },
		"false": func(*cmdEnv, []string) int { return 1 }, "exit": cmdExit,
		"cd": func(*cmdEnv, []string) int { return 0 }, "pwd": func(e *cmdEnv, _ []string) int { e.out("/\n"); return 0 },
		"export": cmdExport, "unset": cmdUnset, "stty": cmdStty, "sleep": cmdSleep,
		"cat": cmdCat, "rm": cmdRm, "ls": cmdLs, "mkdir": func(*cmdEnv, []string) int { return 0 },
		"grep": cmdGrep, "id": cmdID, "whoami": func(e *cmdEnv, _ []string) int { e.out("shell\n"); return 0 },
		"date":      cmdDate,
		"getprop":   cmdGetprop,
		"df":        cmdDf,
		"wm":        cmdWm,
		"screencap": cmdScreencap, "uiautomator": cmdUIAutomator,
		"input": cmdInput, "am": cmdAm, "monkey": cmdMonkey,
		"pm": cmdPm, "cmd": cmdCmd, "dumpsys": cmdDumpsys,
		"settings": cmdSettings,
	}
}

// exec runs one simple command by name (a path runs its base name, as
// /system/bin/input does).
func (d *Daemon) exec(e *cmdEnv, args []string) int {
	name := args[0]
	if strings.Contains(name, "/") {
		name = path.Base(name)
	}
	fn, ok := commands[name]
	if !ok {
		// mksh's words for a command it cannot find.
		e.err("/system/bin/sh: %s: inaccessible or not found\n", args[0])
		return 127
	}
	return fn(e, args[1:])
}

func cmdEcho(e *cmdEnv, args []string) int {
	newline, escapes := true, false
	for len(args) > 0 && (args[0] == "-n" || args[0] == "-e" || args[0] == "-E" || args[0] == "-ne" || args[0] == "-en") {
		newline = newline && !strings.Contains(args[0], "n")
		escapes = strings.Contains(args[0], "e")
		args = args[1:]
	}
	s := strings.Join(args, " ")
	if escapes {
		s = strings.NewReplacer(`\n`, "\n", `\t`, "\t", `\\`, `\`, `\r`, "\r").Replace(s)
	}
	if newline {
		s += "\n"
	}
	e.out("%s", s)
	return 0
}

func cmdExit(e *cmdEnv, args []string) int {
	status := e.s.status
	if len(args) > 0 {
		n, err := strconv.Atoi(args[0])
		if err != nil {
			e.err("/system/bin/sh: exit: %s: bad number\n", args[0])
			n = 1
		}
		status = n & 0xff
	}
	e.s.exited = true
	return status
}

func cmdExport(e *cmdEnv, args []string) int {
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && isAssignment(a) {
			e.s.vars[k] = v
		}
	}
	return 0
}

func cmdUnset(e *cmdEnv, args []string) int {
	for _, a := range args {
		delete(e.s.vars, a)
	}
	return 0
}

// cmdStty understands the one setting clients change: echo.
func cmdStty(e *cmdEnv, args []string) int {
	for _, a := range args {
		switch a {
		case "-echo":
			e.s.echo = false
		case "echo":
			e.s.echo = true
		}
	}
	return 0
}

// cmdSleep sleeps for real (at most ten seconds), or until the stream goes.
func cmdSleep(e *cmdEnv, args []string) int {
	if len(args) == 0 {
		e.err("sleep: needs 1 argument\n")
		return 1
	}
	f, err := strconv.ParseFloat(args[0], 64)
	if err != nil || f < 0 {
		e.err("sleep: invalid number '%s'\n", args[0])
		return 1
	}
	t := time.NewTimer(min(time.Duration(f*float64(time.Second)), 10*time.Second))
	defer t.Stop()
	select {
	case <-t.C:
	case <-e.ctx.Done():
	}
	return 0
}

func cmdCat(e *cmdEnv, args []string) int {
	if len(args) == 0 {
		_, _ = io.Copy(e.stdout, e.stdin)
		return 0
	}
	status := 0
	for _, a := range args {
		if a == "-" {
			_, _ = io.Copy(e.stdout, e.stdin)
			continue
		}
		data, ok := e.s.readPath(a)
		if !ok {
			e.err("cat: %s: No such file or directory\n", a)
			status = 1
			continue
		}
		_, _ = e.stdout.Write(data)
	}
	return status
}

func cmdRm(e *cmdEnv, args []string) int {
	force, status := false, 0
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			force = force || strings.Contains(a, "f")
			continue
		}
		if !e.d.removeFile(absPath(a)) && !force {
			e.err("rm: %s: No such file or directory\n", a)
			status = 1
		}
	}
	return status
}

func cmdLs(e *cmdEnv, args []string) int {
	dir := "/sdcard"
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			dir = a
		}
	}
	if _, ok := e.d.readFile(absPath(dir)); ok {
		e.out("%s\n", dir)
		return 0
	}
	for _, f := range e.d.listFiles(absPath(dir)) {
		e.out("%s\n", f)
	}
	return 0
}

func cmdGrep(e *cmdEnv, args []string) int {
	invert, ignoreCase, quiet, count, extended := false, false, false, false, false
	var pattern string
	var files []string
	havePattern := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !havePattern && strings.HasPrefix(a, "-") && len(a) > 1 {
			if a == "-e" && i+1 < len(args) {
				pattern, havePattern = args[i+1], true
				i++
				continue
			}
			for _, f := range a[1:] {
				switch f {
				case 'v':
					invert = true
				case 'i':
					ignoreCase = true
				case 'q':
					quiet = true
				case 'c':
					count = true
				case 'E':
					extended = true
				}
			}
			continue
		}
		if !havePattern {
			pattern, havePattern = a, true
			continue
		}
		files = append(files, a)
	}
	if !havePattern {
		e.err("usage: grep [-civqE] PATTERN [FILE...]\n")
		return 2
	}
	expr := pattern
	if !extended {
		expr = regexp.QuoteMeta(pattern)
		// Basic expressions: keep the common anchors and wildcards.
		expr = strings.NewReplacer(`\^`, `^`, `\$`, `$`, `\.\*`, `.*`, `\.`, `.`).Replace(expr)
	}
	if ignoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		e.err("grep: bad regex '%s'\n", pattern)
		return 2
	}
	var input []byte
	if len(files) == 0 {
		input, _ = io.ReadAll(e.stdin)
	} else {
		for _, f := range files {
			data, ok := e.s.readPath(f)
			if !ok {
				e.err("grep: %s: No such file or directory\n", f)
				continue
			}
			input = append(input, data...)
		}
	}
	n := 0
	for _, line := range strings.SplitAfter(string(input), "\n") {
		if line == "" {
			continue
		}
		if re.MatchString(strings.TrimRight(line, "\r\n")) == invert {
			continue
		}
		n++
		if !quiet && !count {
			e.out("%s", line)
			if !strings.HasSuffix(line, "\n") {
				e.out("\n")
			}
		}
	}
	if count && !quiet {
		e.out("%d\n", n)
	}
	if n == 0 {
		return 1
	}
	return 0
}

func cmdID(e *cmdEnv, _ []string) int {
	e.out("uid=2000(shell) gid=2000(shell) groups=2000(shell),1004(input),1007(log),1011(adb),1015(sdcard_rw),1028(sdcard_r),3001(net_bt_admin),3002(net_bt),3003(inet),3006(net_bw_stats),3009(readproc),3011(uhid) context=u:r:shell:s0\n")
	return 0
}

// cmdDate prints the phone's logical clock.
func cmdDate(e *cmdEnv, args []string) int {
	t := e.d.phone.Clock()
	if len(args) > 0 && args[0] == "+%s" {
		e.out("%d\n", t.Unix())
		return 0
	}
	e.out("%s\n", t.Format("Mon Jan _2 15:04:05 MST 2006"))
	return 0
}

// cmdDf reports the data partition as toybox df does (1K blocks; -k and
// -h are accepted, -h printed as 1K blocks too). Other mount points are
// not the device's to report.
func cmdDf(e *cmdEnv, args []string) int {
	total, free := e.d.phone.Storage()
	e.out("Filesystem      1K-blocks     Used Available Use%% Mounted on\n")
	for _, a := range args {
		if !strings.HasPrefix(a, "-") && a != "/data" {
			e.err("df: %s: No such file or directory\n", a)
			return 1
		}
	}
	used := total - free
	e.out("/dev/block/dm-5 %9d %8d %9d %3d%% /data\n", total/1024, used/1024, free/1024, used*100/total)
	return 0
}

func cmdGetprop(e *cmdEnv, args []string) int {
	props := e.d.props()
	if len(args) > 0 {
		v, ok := props[args[0]]
		if !ok && len(args) > 1 {
			v = args[1]
		}
		e.out("%s\n", v)
		return 0
	}
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		e.out("[%s]: [%s]\n", k, props[k])
	}
	return 0
}

func cmdWm(e *cmdEnv, args []string) int {
	m := e.d.phone.Model()
	switch {
	case len(args) == 1 && args[0] == "size":
		e.out("Physical size: %dx%d\n", m.Width, m.Height)
	case len(args) == 1 && args[0] == "density":
		e.out("Physical density: %d\n", m.DPI)
	case len(args) > 0 && (args[0] == "size" || args[0] == "density"):
		e.err("Error: the sim phone's %s cannot be overridden\n", args[0])
		return 1
	default:
		e.err("usage: wm [size|density]\n")
		return 1
	}
	return 0
}

// cmdSettings is Android's settings command for the one setting the sim
// phone keeps: global http_proxy (host:port; ":0" clears it), which is
// the phone's network proxy setting (no credentials: Android's global
// proxy carries none). get prints null when none is set.
func cmdSettings(e *cmdEnv, args []string) int {
	switch {
	case len(args) == 3 && args[0] == "get" && args[1] == "global" && args[2] == "http_proxy":
		if n := e.d.phone.NetworkProxySetting(); n != nil {
			e.out("%s\n", n.Addr())
		} else {
			e.out("null\n")
		}
		return 0
	case len(args) == 4 && args[0] == "put" && args[1] == "global" && args[2] == "http_proxy":
		if args[3] == ":0" {
			_ = e.d.phone.SetNetworkProxy(nil)
			return 0
		}
		host, port, ok := strings.Cut(args[3], ":")
		n, err := strconv.Atoi(port)
		if !ok || err != nil || e.d.phone.SetNetworkProxy(&sim.NetworkProxy{Host: host, Port: n}) != nil {
			e.err("settings: invalid http_proxy %q\n", args[3])
			return 1
		}
		return 0
	}
	e.err("usage: settings get|put global http_proxy [host:port]\n")
	return 1
}

// cmdScreencap writes the screen: a PNG with -p (byte-identical to
// sim.Phone.Screenshot), else the raw format (width, height, pixel format
// 1 = RGBA_8888 and, from Android 12, the colour space, then the pixels).
// With a file name it writes the file instead.
func cmdScreencap(e *cmdEnv, args []string) int {
	png, file := false, ""
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-p":
			png = true
		case a == "-d" && i+1 < len(args):
			i++
		case strings.HasPrefix(a, "-"):
		default:
			file = a
		}
	}
	if file != "" && strings.HasSuffix(file, ".png") {
		png = true
	}
	var data []byte
	if png {
		b, err := e.d.phone.Screenshot()
		if err != nil {
			e.err("screencap: %v\n", err)
			return 1
		}
		data = b
	} else {
		img, _, err := e.d.phone.LiveFrame(0)
		if err != nil {
			e.err("screencap: %v\n", err)
			return 1
		}
		b := img.Bounds()
		head := []uint32{uint32(b.Dx()), uint32(b.Dy()), 1}
		if sim.APILevel(e.d.phone.Model().AndroidVersion) >= 31 {
			head = append(head, 0x08810000) // sRGB
		}
		for _, v := range head {
			data = binary.LittleEndian.AppendUint32(data, v)
		}
		data = append(data, img.Pix...)
	}
	if file != "" {
		e.d.writeFile(absPath(file), data, false)
		return 0
	}
	_, _ = e.stdout.Write(data)
	return 0
}

// cmdUIAutomator supports dump: the window hierarchy as XML to a file
// (/sdcard/window_dump.xml by default) or to /dev/tty, followed by the
// line a device prints, misspelling included.
func cmdUIAutomator(e *cmdEnv, args []string) int {
	if len(args) == 0 || args[0] != "dump" {
		e.err("Usage: uiautomator <subcommand> [options]\n\nAvailable subcommands:\n\n" +
			"help: displays help message\n\nruntest: executes UI automation tests\n\n" +
			"dump: creates an XML dump of current UI hierarchy\n\nevents: prints out accessibility events until terminated\n")
		return 1
	}
	file := "/sdcard/window_dump.xml"
	for _, a := range args[1:] {
		if !strings.HasPrefix(a, "-") {
			file = a
		}
	}
	xml := sim.UIAutomatorXML(e.d.phone.Snapshot())
	switch file {
	case "/dev/tty", "/dev/stdout", "/proc/self/fd/1":
		_, _ = e.stdout.Write(xml)
	default:
		e.d.writeFile(absPath(file), xml, false)
	}
	e.out("UI hierchary dumped to: %s\n", file)
	return 0
}
