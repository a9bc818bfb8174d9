package domain

import (
	"strings"
)

// Command mode: the direct commands a person types when the copilot's
// allowance is spent (or no model is configured), parsed without a model.
const (
	CommandTap        = "tap"
	CommandType       = "type"
	CommandOpen       = "open"
	CommandBack       = "back"
	CommandHome       = "home"
	CommandSwipe      = "swipe"
	CommandScreenshot = "screenshot"
)

// CopilotCommand is a parsed direct command: its verb and its one
// argument (the quoted text of tap and type, the app of open, the
// direction of swipe).
type CopilotCommand struct {
	Verb string
	Arg  string
}

// CopilotCommandHelp says how to write commands.
const CopilotCommandHelp = `commands: tap "Save", type "hello", open Notes, back, home, swipe up|down|left|right, screenshot`

// ParseCopilotCommand reads one direct command. Refusals are
// invalid_argument naming the field command and how commands are written.
func ParseCopilotCommand(text string) (CopilotCommand, error) {
	text = strings.TrimSpace(text)
	bad := func(why string) (CopilotCommand, error) {
		return CopilotCommand{}, Errorf(CodeInvalidArgument, "%s; %s", why, CopilotCommandHelp).With("field", "command")
	}
	if text == "" {
		return bad("command is required")
	}
	verb, rest, _ := strings.Cut(text, " ")
	verb, rest = strings.ToLower(verb), strings.TrimSpace(rest)
	quoted := func() (string, bool) {
		for _, q := range [][2]string{{`"`, `"`}, {"“", "”"}, {"'", "'"}} {
			if s, ok := strings.CutPrefix(rest, q[0]); ok {
				if s, ok := strings.CutSuffix(s, q[1]); ok && s != "" {
					return s, true
				}
			}
		}
		return "", false
	}
	switch verb {
	case CommandTap, CommandType:
		s, ok := quoted()
		if !ok {
			return bad(verb + ` takes quoted text, as in ` + verb + ` "Save"`)
		}
		return CopilotCommand{Verb: verb, Arg: s}, nil
	case CommandOpen:
		if s, ok := quoted(); ok {
			rest = s
		}
		if rest == "" {
			return bad("open takes an app's name, as in open Notes")
		}
		return CopilotCommand{Verb: verb, Arg: rest}, nil
	case CommandSwipe:
		switch d := strings.ToLower(rest); d {
		case "up", "down", "left", "right":
			return CopilotCommand{Verb: verb, Arg: d}, nil
		}
		return bad("swipe takes up, down, left or right")
	case CommandBack, CommandHome, CommandScreenshot:
		if rest != "" {
			return bad(verb + " takes nothing after it")
		}
		return CopilotCommand{Verb: verb}, nil
	}
	return bad("unknown command " + clipRunes(verb, 40))
}

func clipRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
