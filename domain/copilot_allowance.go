package domain

// The copilot's monthly token allowance (spec 2.4, 4.2): what the price
// list includes for the organisation's live subscriptions, against the
// tokens its copilot spent this billing period. This file holds the
// arithmetic, which needs no database.

// CopilotAllowance is the allowance read's answer (spec 2.4).
type CopilotAllowance struct {
	// Included is the month's tokens: the price list's tokens per
	// subscribed device times the live subscription purchases.
	Included int64
	// Used is the tokens spent in Period, input and output together.
	Used   int64
	Period BillingPeriod
	// UsedFraction is Used over Included, clamped at 1; 0 when nothing is
	// included.
	UsedFraction float64
	// Exhausted: the allowance is spent (Used reached Included; with
	// nothing included, from the first token).
	Exhausted bool
	// NearLimit: past four fifths of Included, not yet exhausted.
	NearLimit bool
	// Metered is false on a deployment where nothing counts copilot use
	// (local mode): Used is then 0.
	Metered bool
}

// MeteredCopilotAllowance is the allowance of devices subscribed devices
// at perDevice tokens each, used tokens spent in period p.
func MeteredCopilotAllowance(perDevice int64, devices int, used int64, p BillingPeriod) CopilotAllowance {
	a := CopilotAllowance{Included: perDevice * int64(max(devices, 0)), Used: max(used, 0), Period: p, Metered: true}
	if a.Included > 0 {
		a.UsedFraction = min(float64(a.Used)/float64(a.Included), 1)
		a.Exhausted = a.Used >= a.Included
	} else {
		a.Exhausted = a.Used > 0
	}
	// Past four fifths: Used/Included > 4/5, in integers.
	a.NearLimit = !a.Exhausted && a.Included > 0 && a.Used*5 > a.Included*4
	return a
}

// UnmeteredCopilotAllowance is the answer of a deployment that counts no
// copilot use (period p).
func UnmeteredCopilotAllowance(p BillingPeriod) CopilotAllowance {
	return CopilotAllowance{Period: p}
}

// Spent reports whether a chat message may no longer reach the model: a
// metered allowance that is exhausted, or that includes nothing at all
// (the first answer would already exceed it). Command mode is served
// either way.
func (a CopilotAllowance) Spent() bool { return a.Metered && (a.Exhausted || a.Included == 0) }

// CopilotAllowanceSpentMessage is the copilot's answer to a chat message
// once the allowance is spent: no model is asked, and it says how to use
// direct commands instead.
const CopilotAllowanceSpentMessage = "Your copilot allowance for this billing month is spent, so I cannot answer with the model until it renews on the first of next month. " +
	"You can still drive the phone with direct commands (POST /v1/copilot/commands, or the command box): " +
	`tap "Save", type "hello", open Notes, back, home, swipe up (or down, left, right), screenshot.`
