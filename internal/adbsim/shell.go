package adbsim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The device's shell is a small subset of mksh (Android's /system/bin/sh):
// lists joined by ;, &&, || and &, pipelines with |, redirections (>, >>,
// <, 2>, 2>&1, >&2), single and double quotes, backslash escapes, $?,
// $NAME and ${NAME}, NAME=value assignments and # comments. It is enough
// for the commands clients of phones send; anything else is a syntax
// error, as a shell would report it.

// wordPart is a piece of a word: literal text or a variable expanded
// when the command runs (so "false; echo $?" sees the new status).
type wordPart struct {
	lit string
	v   string // variable name when not literal
}

type word []wordPart

type redirect struct {
	fd     int    // 0, 1 or 2
	op     string // ">", ">>", "<", ">&"
	target word   // file, or the fd number for ">&"
}

type simpleCmd struct {
	words     []word
	redirects []redirect
}

type pipeline []simpleCmd

// listItem is a pipeline and the operator that joins it to the next:
// ";", "&&", "||" or "" for the last.
type listItem struct {
	p  pipeline
	op string
}

var errSyntax = errors.New("syntax error")

type token struct {
	op   string // an operator, or "" for a word
	w    word
	fd   int // for redirection operators
	redi bool
}

// tokenize splits a line into words and operators.
func tokenize(line string) ([]token, error) {
	var toks []token
	i := 0
	for i < len(line) {
		c := line[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			i++
			continue
		case c == '#':
			return toks, nil
		case c == ';':
			toks = append(toks, token{op: ";"})
			i++
			continue
		case c == '&' && strings.HasPrefix(line[i:], "&&"):
			toks = append(toks, token{op: "&&"})
			i += 2
			continue
		case c == '&':
			toks = append(toks, token{op: ";"}) // no jobs: run it in the foreground
			i++
			continue
		case c == '|' && strings.HasPrefix(line[i:], "||"):
			toks = append(toks, token{op: "||"})
			i += 2
			continue
		case c == '|':
			toks = append(toks, token{op: "|"})
			i++
			continue
		}
		// A redirection, with an optional single-digit fd before it.
		fd, j := -1, i
		if c >= '0' && c <= '2' && i+1 < len(line) && (line[i+1] == '>' || line[i+1] == '<') {
			fd, j = int(c-'0'), i+1
		}
		if line[j] == '>' || line[j] == '<' {
			op := string(line[j])
			j++
			if op == ">" && j < len(line) && line[j] == '>' {
				op, j = ">>", j+1
			} else if j < len(line) && line[j] == '&' {
				op, j = op+"&", j+1
			}
			if fd < 0 {
				fd = 1
				if op[0] == '<' {
					fd = 0
				}
			}
			toks = append(toks, token{op: op, fd: fd, redi: true})
			i = j
			continue
		}
		w, n, err := readWord(line[i:])
		if err != nil {
			return nil, err
		}
		toks = append(toks, token{w: w})
		i += n
	}
	return toks, nil
}

// readWord reads one word and returns it with the bytes it took.
func readWord(s string) (word, int, error) {
	var w word
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			w = append(w, wordPart{lit: lit.String()})
			lit.Reset()
		}
	}
	quoted := false
	variable := func(i int) int { // s[i] == '$'; returns the index after it
		rest := s[i+1:]
		switch {
		case strings.HasPrefix(rest, "{"):
			// ${} names no variable: it is read as the literal text.
			if end := strings.IndexByte(rest, '}'); end > 1 {
				flush()
				w = append(w, wordPart{v: rest[1:end]})
				return i + 2 + end
			}
		case len(rest) > 0 && strings.ContainsRune("?$#", rune(rest[0])):
			flush()
			w = append(w, wordPart{v: rest[:1]})
			return i + 2
		default:
			n := 0
			for n < len(rest) && (rest[n] == '_' || isAlnum(rest[n])) {
				n++
			}
			if n > 0 {
				flush()
				w = append(w, wordPart{v: rest[:n]})
				return i + 1 + n
			}
		}
		lit.WriteByte('$')
		return i + 1
	}
	i := 0
loop:
	for i < len(s) {
		c := s[i]
		switch c {
		case ' ', '\t', '\r', '\n', ';', '&', '|', '<', '>':
			break loop
		case '\\':
			if i+1 < len(s) {
				lit.WriteByte(s[i+1])
				i += 2
			} else {
				i++
			}
		case '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, 0, fmt.Errorf("%w: unterminated '", errSyntax)
			}
			lit.WriteString(s[i+1 : i+1+end])
			quoted = true
			i += end + 2
		case '"':
			i++
			for {
				if i >= len(s) {
					return nil, 0, fmt.Errorf("%w: unterminated \"", errSyntax)
				}
				if s[i] == '"' {
					i++
					break
				}
				switch {
				case s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\\\"$`\n", s[i+1]) >= 0:
					lit.WriteByte(s[i+1])
					i += 2
				case s[i] == '$':
					i = variable(i)
				default:
					lit.WriteByte(s[i])
					i++
				}
			}
			quoted = true
		case '$':
			i = variable(i)
		default:
			lit.WriteByte(c)
			i++
		}
	}
	flush()
	if len(w) == 0 && quoted {
		w = word{{lit: ""}}
	}
	return w, i, nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// parse builds the list a line holds.
func parse(line string) ([]listItem, error) {
	toks, err := tokenize(line)
	if err != nil {
		return nil, err
	}
	var list []listItem
	var p pipeline
	var cmd simpleCmd
	endCmd := func() error {
		if len(cmd.words) == 0 && len(cmd.redirects) == 0 {
			return fmt.Errorf("%w: unexpected operator", errSyntax)
		}
		p = append(p, cmd)
		cmd = simpleCmd{}
		return nil
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.redi:
			if i+1 >= len(toks) || toks[i+1].op != "" {
				return nil, fmt.Errorf("%w: redirection without a target", errSyntax)
			}
			i++
			cmd.redirects = append(cmd.redirects, redirect{fd: t.fd, op: t.op, target: toks[i].w})
		case t.op == "":
			cmd.words = append(cmd.words, t.w)
		case t.op == "|":
			if err := endCmd(); err != nil {
				return nil, err
			}
		default: // ; && ||
			if len(cmd.words) == 0 && len(cmd.redirects) == 0 && len(p) == 0 && t.op == ";" {
				continue // an empty command before ; is allowed by nothing, but harmless
			}
			if err := endCmd(); err != nil {
				return nil, err
			}
			list = append(list, listItem{p: p, op: t.op})
			p = nil
		}
	}
	if len(cmd.words) > 0 || len(cmd.redirects) > 0 {
		p = append(p, cmd)
	} else if len(p) > 0 {
		return nil, fmt.Errorf("%w: unexpected end of line", errSyntax)
	}
	if len(p) > 0 {
		list = append(list, listItem{p: p})
	} else if n := len(list); n > 0 && list[n-1].op != ";" {
		return nil, fmt.Errorf("%w: unexpected end of line", errSyntax)
	}
	return list, nil
}

// session is one shell: its variables, its last status, its terminal.
type session struct {
	d      *Daemon
	vars   map[string]string
	status int
	echo   bool // the terminal echoes input (pty only)
	exited bool
}

func (d *Daemon) newSession() *session {
	return &session{d: d, vars: map[string]string{
		"PS1": d.hostname() + ":/ $ ", "PS2": "> ", "HOME": "/", "PWD": "/", "PATH": "/product/bin:/apex/com.android.runtime/bin:/system/bin:/system/xbin",
		"USER": "shell", "HOSTNAME": d.hostname(), "TERM": "dumb",
	}}
}

func (d *Daemon) hostname() string { return strings.ToLower(d.phone.Model().Name) }

func (s *session) expand(w word) string {
	var b strings.Builder
	for _, p := range w {
		switch p.v {
		case "":
			b.WriteString(p.lit)
		case "?":
			b.WriteString(strconv.Itoa(s.status))
		case "$":
			b.WriteString("4242")
		case "#":
			b.WriteString("0")
		default:
			b.WriteString(s.vars[p.v])
		}
	}
	return b.String()
}

// runCommand runs one command line, as `adb shell CMD` and exec:CMD do,
// and returns its exit status.
func (d *Daemon) runCommand(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, line string) int {
	s := d.newSession()
	s.runLine(ctx, line, stdin, stdout, stderr)
	return s.status
}

// interactive reads command lines from stdin until it ends or `exit`, as
// `adb shell` with no command does. On a pty the terminal echoes each line
// and the shell prints its prompt (PS1, until a client clears it).
func (d *Daemon) interactive(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, pty bool) int {
	s := d.newSession()
	s.echo = pty
	r := bufio.NewReader(stdin)
	prompt := func() {
		if pty {
			_, _ = io.WriteString(stdout, s.vars["PS1"])
		}
	}
	prompt()
	for !s.exited {
		line, err := r.ReadString('\n')
		if line != "" {
			if s.echo {
				_, _ = io.WriteString(stdout, line)
			}
			// Commands do not read the session's input: it holds the
			// client's next command lines.
			s.runLine(ctx, strings.TrimRight(line, "\r\n"), strings.NewReader(""), stdout, stderr)
			if !s.exited {
				prompt()
			}
		}
		if err != nil || ctx.Err() != nil {
			break
		}
	}
	return s.status
}

// runLine parses and runs one line.
func (s *session) runLine(ctx context.Context, line string, stdin io.Reader, stdout, stderr io.Writer) {
	list, err := parse(line)
	if err != nil {
		fmt.Fprintf(stderr, "/system/bin/sh: %v\n", err)
		s.status = 1
		return
	}
	skip := ""
	for _, it := range list {
		if s.exited || ctx.Err() != nil {
			return
		}
		run := true
		switch skip {
		case "&&":
			run = s.status == 0
		case "||":
			run = s.status != 0
		}
		if run {
			s.status = s.runPipeline(ctx, it.p, stdin, stdout, stderr)
		}
		skip = it.op
	}
}

func (s *session) runPipeline(ctx context.Context, p pipeline, stdin io.Reader, stdout, stderr io.Writer) int {
	status := 0
	in := stdin
	for i, c := range p {
		out := stdout
		var buf *bytes.Buffer
		if i < len(p)-1 {
			buf = &bytes.Buffer{}
			out = buf
		}
		status = s.runSimple(ctx, c, in, out, stderr)
		if buf != nil {
			in = buf
		}
		if s.exited {
			break
		}
	}
	return status
}

// runSimple applies redirections and runs a builtin or a device command.
func (s *session) runSimple(ctx context.Context, c simpleCmd, stdin io.Reader, stdout, stderr io.Writer) int {
	fds := []io.Reader{stdin}
	outs := []io.Writer{nil, stdout, stderr}
	var files []*fileWriter
	defer func() {
		for _, f := range files {
			f.commit()
		}
	}()
	for _, r := range c.redirects {
		target := s.expand(r.target)
		switch r.op {
		case "<":
			data, ok := s.readPath(target)
			if !ok {
				fmt.Fprintf(stderr, "/system/bin/sh: can't open %s: No such file or directory\n", target)
				return 1
			}
			fds[0] = bytes.NewReader(data)
		case ">", ">>":
			if r.fd == 0 {
				continue
			}
			outs[r.fd] = s.openOut(target, r.op == ">>", stdout, &files)
		case ">&", "<&":
			n, err := strconv.Atoi(target)
			if err != nil || n < 1 || n > 2 || r.fd == 0 {
				fmt.Fprintf(stderr, "/system/bin/sh: %s: bad file descriptor\n", target)
				return 1
			}
			outs[r.fd] = outs[n]
		}
	}
	var args []string
	for _, w := range c.words {
		args = append(args, s.expand(w))
	}
	// Leading NAME=value words set variables (for the shell when no
	// command follows).
	for len(args) > 0 && isAssignment(args[0]) {
		k, v, _ := strings.Cut(args[0], "=")
		s.vars[k] = v
		args = args[1:]
	}
	if len(args) == 0 {
		return 0
	}
	s.d.count(func(st *Stats) { st.Commands++ })
	env := &cmdEnv{ctx: ctx, d: s.d, s: s, stdin: fds[0], stdout: outs[1], stderr: outs[2]}
	return s.d.exec(env, args)
}

func isAssignment(w string) bool {
	k, _, ok := strings.Cut(w, "=")
	if !ok || k == "" || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] != '_' && !isAlnum(k[i]) {
			return false
		}
	}
	return true
}

// readPath reads a device file; /dev/null is empty.
func (s *session) readPath(path string) ([]byte, bool) {
	if path == "/dev/null" {
		return nil, true
	}
	return s.d.readFile(absPath(path))
}

// openOut returns where output redirected to path goes: nowhere for
// /dev/null, the terminal for /dev/tty, else a file written when the
// command ends.
func (s *session) openOut(path string, appendTo bool, tty io.Writer, files *[]*fileWriter) io.Writer {
	switch path {
	case "/dev/null":
		return io.Discard
	case "/dev/tty", "/proc/self/fd/1", "/dev/stdout":
		return tty
	}
	f := &fileWriter{d: s.d, path: absPath(path), appendTo: appendTo}
	*files = append(*files, f)
	return f
}

// absPath makes a path absolute against the shell's only directory, /.
func absPath(p string) string {
	if strings.HasPrefix(p, "/") {
		return p
	}
	return "/" + p
}

type fileWriter struct {
	d        *Daemon
	path     string
	appendTo bool
	buf      bytes.Buffer
}

func (f *fileWriter) Write(b []byte) (int, error) { return f.buf.Write(b) }

func (f *fileWriter) commit() { f.d.writeFile(f.path, f.buf.Bytes(), f.appendTo) }
