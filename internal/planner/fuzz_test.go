package planner

import (
	"encoding/json"
	"testing"

	"phonefleet/domain"
)

// FuzzParseSteps reads arbitrary goals written as steps: nothing panics,
// and a script read is one the run executor reads back (ParseScript),
// step for step. (wait and needs-user are steps of the goal language
// only; the API's script does not take them.)
func FuzzParseSteps(f *testing.F) {
	for _, s := range []string{
		"tap 10 20\ntype hello world\nkey enter\nwait 500\nfinish succeeded done", "# c\n\ntap e12", "swipe 0 0 10 10 300",
		"long-press 1 2 99999", "needs-user captcha", "open com.example.notes", "tap -1 5", "type \x00", "finish maybe", "wait -1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		s, err := ParseSteps(text)
		if err != nil {
			return
		}
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("%q read but does not encode: %v", text, err)
		}
		back, err := ParseScript(raw)
		if err != nil || len(back.Steps) != len(s.Steps) {
			t.Fatalf("%q read as %s, which the executor refuses: %v", text, raw, err)
		}
	})
}

// FuzzParseScript: a script the API accepts (domain.ParseRunScript, at
// POST /v1/runs) is one the executor reads (ParseScript): a run is never
// accepted and then fails for its script.
func FuzzParseScript(f *testing.F) {
	for _, s := range []string{
		`{"version":1,"steps":[{"action":"tap","arguments":{"x":1,"y":2}},{"finish":"succeeded"}]}`,
		`{"steps":[{"action":"tap","arguments":{"ref":"e1"},"waitFor":{"signature":"x"},"element":{"text":"OK"},"effect":"changed"}]}`,
		`{"steps":[{"action":"key","arguments":{"key":"home"}}]}`, `{"steps":[{"finish":"failed","reason":"x"}]}`, `{"steps":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if _, err := domain.ParseRunScript(raw); err != nil {
			return
		}
		if _, err := ParseScript(raw); err != nil {
			t.Fatalf("%q: the API accepts it, the executor refuses it: %v", raw, err)
		}
	})
}
