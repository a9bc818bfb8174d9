package domain

import "testing"

func TestParseCopilotPolicy(t *testing.T) {
	for in, want := range map[string]CopilotPolicy{
		"install,sensitive,payment": DefaultCopilotPolicy,
		"none":                      {},
		"":                          {},
		" payment ":                 {Payment: true},
		"install":                   {Install: true},
	} {
		got, err := ParseCopilotPolicy(in)
		if err != nil || got != want {
			t.Errorf("ParseCopilotPolicy(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	if _, err := ParseCopilotPolicy("install,url"); err == nil {
		t.Error("an unknown approval was accepted")
	}
}

func TestCopilotPaymentScreenAndSensitiveFocus(t *testing.T) {
	tree := func(els ...UIElement) UIElement { return UIElement{Class: "android.widget.FrameLayout", Children: els} }
	for _, c := range []struct {
		el   UIElement
		want bool
	}{
		{UIElement{Text: "Checkout — Shop"}, true},
		{UIElement{Text: "Pay"}, true},
		{UIElement{Text: "Pay now €12.00"}, true},
		{UIElement{Hint: "Card number"}, true},
		{UIElement{ResourceID: "com.shop:id/cvv"}, true},
		{UIElement{ContentDesc: "Place order"}, true},
		{UIElement{Text: "Display"}, false},
		{UIElement{Text: "Payday loans are bad"}, false},
		{UIElement{Text: "Notes"}, false},
	} {
		if got := CopilotPaymentScreen(tree(c.el)); got != c.want {
			t.Errorf("payment screen with %+v = %v; want %v", c.el, got, c.want)
		}
	}
	pw := tree(UIElement{Class: "android.widget.EditText", Password: true, Focused: true})
	if !CopilotSensitiveFocus(pw) {
		t.Error("a focused password field is not sensitive")
	}
	if CopilotSensitiveFocus(tree(UIElement{Class: "android.widget.EditText", Password: true}, UIElement{Focused: true})) {
		t.Error("an unfocused password field made typing sensitive")
	}

	all := DefaultCopilotPolicy
	for _, c := range []struct {
		action ActionType
		every  bool
		policy CopilotPolicy
		screen CopilotScreen
		want   string
	}{
		{ActionInstallApp, false, all, CopilotScreen{}, ApprovalReasonPolicy},
		{ActionInstallApp, false, CopilotPolicy{}, CopilotScreen{}, ""},
		{ActionTypeText, false, all, CopilotScreen{SensitiveFocus: true}, ApprovalReasonSensitive},
		{ActionTap, false, all, CopilotScreen{SensitiveFocus: true}, ""},
		{ActionTypeText, false, CopilotPolicy{Install: true}, CopilotScreen{SensitiveFocus: true}, ""},
		{ActionTap, false, all, CopilotScreen{AfterPayment: true}, ApprovalReasonPayment},
		{ActionTap, true, CopilotPolicy{}, CopilotScreen{AfterPayment: true}, ApprovalReasonEvery},
		{ActionKey, false, all, CopilotScreen{}, ""},
	} {
		if got := CopilotNeedsApproval(c.action, c.every, c.policy, c.screen); got != c.want {
			t.Errorf("CopilotNeedsApproval(%s, %v, %+v, %+v) = %q; want %q", c.action, c.every, c.policy, c.screen, got, c.want)
		}
	}
}
