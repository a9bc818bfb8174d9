package domain

import (
	"fmt"
	"strings"
)

// CopilotPolicy is the deployment's approval policy: which copilot actions
// wait for the person's yes whatever the thread chose.
type CopilotPolicy struct {
	// Install: installing an app.
	Install bool
	// Sensitive: typing into a field marked sensitive (the focused field
	// is a password field).
	Sensitive bool
	// Payment: any action once the turn has seen a payment screen
	// (CopilotPaymentScreen).
	Payment bool
}

// DefaultCopilotPolicy asks for all three.
var DefaultCopilotPolicy = CopilotPolicy{Install: true, Sensitive: true, Payment: true}

// ParseCopilotPolicy reads a comma-separated list of install, sensitive
// and payment; "none" (or empty) asks for none of them.
func ParseCopilotPolicy(s string) (CopilotPolicy, error) {
	var p CopilotPolicy
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(f) {
		case "", "none":
		case "install":
			p.Install = true
		case "sensitive":
			p.Sensitive = true
		case "payment":
			p.Payment = true
		default:
			return p, fmt.Errorf("unknown approval %q: want install, sensitive, payment or none", strings.TrimSpace(f))
		}
	}
	return p, nil
}

// Why an action waits for the person's yes (copilot.approval_requested's
// reason).
const (
	ApprovalReasonPolicy    = "policy"          // installing an app
	ApprovalReasonSensitive = "sensitive_field" // typing into a password field
	ApprovalReasonPayment   = "payment_screen"  // after a payment screen
	ApprovalReasonEvery     = "every_action"    // the thread's choice
)

// CopilotScreen is what the copilot knows of the screen an action is
// decided on.
type CopilotScreen struct {
	// SensitiveFocus: the focused field is a password field (the tree was
	// read for this action).
	SensitiveFocus bool
	// AfterPayment: the turn has seen a payment screen.
	AfterPayment bool
}

// CopilotNeedsApproval says why an action needs the person's yes, or ""
// when it does not: the deployment's policy (installing an app, typing
// into a sensitive field, anything after a payment screen) or the
// thread's choice (every action).
func CopilotNeedsApproval(action ActionType, everyAction bool, policy CopilotPolicy, screen CopilotScreen) string {
	switch {
	case policy.Install && action == ActionInstallApp:
		return ApprovalReasonPolicy
	case policy.Sensitive && action == ActionTypeText && screen.SensitiveFocus:
		return ApprovalReasonSensitive
	case policy.Payment && screen.AfterPayment:
		return ApprovalReasonPayment
	case everyAction:
		return ApprovalReasonEvery
	}
	return ""
}

// CopilotSensitiveFocus reports whether the focused element of a tree is
// a password field.
func CopilotSensitiveFocus(root UIElement) bool {
	found := false
	walkUI(root, func(e UIElement) {
		if e.Focused && e.Password {
			found = true
		}
	})
	return found
}

// paymentCues are words that, shown on screen, make it a payment screen.
// Matched case-insensitively as whole words or phrases in an element's
// text, hint, content description or resource id.
var paymentCues = []string{"pay", "pay now", "payment", "checkout", "check out", "card number", "cvv", "cvc",
	"expiry date", "place order", "purchase", "buy now", "billing"}

// CopilotPaymentScreen reports whether a tree shows payment cues: an
// element whose text, hint, content description or resource id holds one
// of the paymentCues as a word (so "Pay", "Checkout", "Card number",
// "CVV", "Place order", "Buy now" count; "Display" or "paypal.me" do
// not).
func CopilotPaymentScreen(root UIElement) bool {
	found := false
	walkUI(root, func(e UIElement) {
		if found {
			return
		}
		for _, s := range []string{e.Text, e.Hint, e.ContentDesc, resourceName(e.ResourceID)} {
			if hasCue(s) {
				found = true
				return
			}
		}
	})
	return found
}

func resourceName(id string) string {
	if i := strings.LastIndex(id, "/"); i >= 0 {
		id = id[i+1:]
	}
	return strings.NewReplacer("_", " ", "-", " ").Replace(id)
}

func hasCue(s string) bool {
	if s == "" {
		return false
	}
	words := strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
	line := " " + strings.Join(words, " ") + " "
	for _, c := range paymentCues {
		if strings.Contains(line, " "+c+" ") {
			return true
		}
	}
	return false
}

func walkUI(e UIElement, fn func(UIElement)) {
	fn(e)
	for _, c := range e.Children {
		walkUI(c, fn)
	}
}
