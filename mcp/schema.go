package mcp

import (
	"encoding/json"
	"strings"
)

// Argument schemas shared by several tools (JSON Schema draft 2020-12).
// Identifiers are checked for shape here, so a mistyped id is refused as
// invalid params before anything runs; whether it names something the
// caller may use is the handler's question.
const (
	sDeviceID = `{"type":"string","pattern":"^dev_[0-9a-f]{32}$",` +
		`"description":"The device (dev_…)."}`
	sLeaseID = `{"type":"string","pattern":"^lse_[0-9a-f]{32}$",` +
		`"description":"Your lease (lse_…) from acquire_lease."}`
	sObservedFrame = `{"type":"string","pattern":"^frm_[0-9a-f]{32}$",` +
		`"description":"frameId of the observation you decided on: if the screen changed since, the call is refused (stale_frame) and nothing happens."}`
	sIdempotencyKey = `{"type":"string","minLength":1,"maxLength":255,"pattern":"^[ -~]+$",` +
		`"description":"Names this action: a retry with the same key returns the first outcome and never acts twice. Generated and returned when omitted."}`
	sFrameID = `{"type":"string","pattern":"^frm_[0-9a-f]{32}$","description":"A frame id (frm_…), from observe or a receipt."}`
	sLimit   = `{"type":"integer","minimum":1,"maximum":200,"description":"Page size (default 50)."}`
	sTTL     = `{"type":"integer","minimum":10,"maximum":3600,"description":"Seconds until the lease expires unless renewed (default 300)."}`
	sMaxW    = `{"type":"integer","minimum":32,"maximum":4096,` +
		`"description":"Shrink the screenshot to at most this many pixels wide (aspect kept) to save tokens, e.g. 400. Coordinates you send stay in device pixels."}`
	sElements = `{"type":"string","enum":["all","interactive","none"],` +
		`"description":"UI elements to return: all (default; every element with text, a description or an action), interactive (only what a tap, long press, typing or scroll acts on), none."}`
	sOnScreen = `{"type":"boolean","description":"Only elements inside the visible screen (default true)."}`
	sShot     = `{"type":"boolean","description":"Include the screenshot image (default true); false returns the elements alone, the cheapest observation."}`
	sFormat   = `{"type":"string","enum":["png","jpeg"],"description":"The screenshot's encoding (default png); jpeg is smaller, e.g. with maxWidth 768."}`
	sQuality  = `{"type":"integer","minimum":1,"maximum":100,"description":"JPEG quality (default 70)."}`
	sMarks    = `{"type":"boolean","description":"Set-of-marks: draw a numbered box on each listed element (elements=interactive unless all is asked). Box k frames the element whose mark is k; marks lists number → ref. Tap it with tap_element(ref)."}`
	sDuration = `{"type":"integer","minimum":0,"maximum":10000,"description":"Duration in milliseconds; 0 or omitted means the device's default."}`
)

// coord is the schema of one screen coordinate named what.
func coord(what string) string {
	return `{"type":"integer","minimum":0,"maximum":100000,"description":"` + what + `, device pixels."}`
}

// prop is one named property of an arguments object.
type prop struct{ name, schema string }

// object is the schema of an arguments object with props (no others) of
// which required must be present.
func object(required []string, props ...prop) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","additionalProperties":false,"properties":{`)
	for i, p := range props {
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(p.name)
		b.Write(name)
		b.WriteByte(':')
		b.WriteString(p.schema)
	}
	b.WriteString(`}`)
	if len(required) > 0 {
		req, _ := json.Marshal(required)
		b.WriteString(`,"required":`)
		b.Write(req)
	}
	b.WriteString(`}`)
	return b.String()
}
