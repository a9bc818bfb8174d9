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
	sDeviceID       = `{"type":"string","pattern":"^dev_[0-9a-f]{32}$"}`
	sLeaseID        = `{"type":"string","pattern":"^lse_[0-9a-f]{32}$"}`
	sObservedFrame  = `{"type":"string","pattern":"^frm_[0-9a-f]{32}$"}`
	sIdempotencyKey = `{"type":"string","maxLength":255,"pattern":"^[ -~]+$"}`
	sFrameID        = `{"type":"string","pattern":"^frm_[0-9a-f]{32}$"}`
	sLimit          = `{"type":"integer","minimum":1,"maximum":200}`
	sAfter          = `{"type":"string","maxLength":64}`
	sTTL            = `{"type":"integer","minimum":10,"maximum":3600,"description":"Lease lifetime in seconds (default 300)."}`
	sMaxW           = `{"type":"integer","minimum":32,"maximum":4096,"description":"Shrink the screenshot to this width; coordinates stay in device pixels."}`
	sElements       = `{"type":"string","enum":["all","interactive","none"],"description":"Default all."}`
	sOnScreen       = `{"type":"boolean","description":"Only visible elements (default true)."}`
	sShot           = `{"type":"boolean","description":"Include the screenshot (default true)."}`
	sFormat         = `{"type":"string","enum":["png","jpeg"]}`
	sQuality        = `{"type":"integer","minimum":1,"maximum":100,"description":"JPEG quality (default 70)."}`
	sMarks          = `{"type":"boolean","description":"Draw numbered boxes on the listed elements; marks maps number to ref."}`
	sDuration       = `{"type":"integer","minimum":0,"maximum":10000,"description":"Milliseconds (0: the device's default)."}`
)

// coord is the schema of one screen coordinate named what.
func coord(string) string {
	return `{"type":"integer","minimum":0,"maximum":100000}`
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
