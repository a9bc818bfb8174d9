package domain

import "testing"

func TestParseCopilotCommand(t *testing.T) {
	ok := map[string]CopilotCommand{
		`tap "Save"`:         {CommandTap, "Save"},
		`TAP “Save note”`:    {CommandTap, "Save note"},
		`type "hello"`:       {CommandType, "hello"},
		`type 'a "b" c'`:     {CommandType, `a "b" c`},
		`open Notes`:         {CommandOpen, "Notes"},
		`open "My App"`:      {CommandOpen, "My App"},
		`  back `:            {CommandBack, ""},
		`home`:               {CommandHome, ""},
		`swipe Up`:           {CommandSwipe, "up"},
		`screenshot`:         {CommandScreenshot, ""},
		`open com.x.notes`:   {CommandOpen, "com.x.notes"},
		`swipe left`:         {CommandSwipe, "left"},
		`tap "  spaced  "`:   {CommandTap, "  spaced  "},
		`type "héllo wörld"`: {CommandType, "héllo wörld"},
	}
	for in, want := range ok {
		got, err := ParseCopilotCommand(in)
		if err != nil || got != want {
			t.Errorf("%q: got %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "tap Save", `tap ""`, `type "unclosed`, "open", "swipe sideways", "back now", "reboot", "screenshot please"} {
		_, err := ParseCopilotCommand(in)
		de, isDomain := err.(*Error)
		if !isDomain || de.Code != CodeInvalidArgument || de.Extra["field"] != "command" {
			t.Errorf("%q: got %v; want invalid_argument on command", in, err)
		}
	}
}
