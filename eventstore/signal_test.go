package eventstore

import "testing"

func TestLikeMatchAsTheFeedsFilter(t *testing.T) {
	for _, c := range []struct {
		pattern, typ string
		want         bool
	}{
		{"fulfilment.%", "fulfilment.provisioned", true},
		{"fulfilment.%", "fulfilment.", true},
		{"fulfilment.%", "fulfilments", false},
		{"payment.followup_%", "payment.followup_attempted", true},
		{"payment.followup_%", "payment.followupXsettled", true}, // _ is any one character, as in SQL
		{"payment.followup_%", "payment.followup", false},
		{"device.action_requested", "device.action_requested", true},
		{"device.action_requested", "device.action_requested2", false},
		{"%.performed", "action.performed", true},
		{"a%b%c", "aXbYc", true},
		{"a%b%c", "aXcYb", false},
		{"%", "", true},
		{"_", "é", true},
	} {
		if got := likeMatch(c.pattern, c.typ); got != c.want {
			t.Errorf("likeMatch(%q, %q) = %v; want %v", c.pattern, c.typ, got, c.want)
		}
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestSubscriptionWakesOnlyForItsTypes(t *testing.T) {
	s := NewSignal()
	sub, unsubscribe := s.Sub([]string{"keep.%"})
	all, mine := s.C(), sub.C()
	s.WakeTypes([]string{"skip.this"})
	if !closed(all) || closed(mine) {
		t.Fatalf("a commit of another type: every-commit waiter released %v, subscription released %v; want true, false", closed(all), closed(mine))
	}
	mine = sub.C()
	s.WakeTypes([]string{"skip.this", "keep.that"})
	if !closed(mine) {
		t.Fatal("a commit holding one of its types did not wake the subscription")
	}
	mine = sub.C()
	s.Wake() // another instance's commit: its types unknown
	if !closed(mine) {
		t.Fatal("an untyped wake-up did not wake the subscription")
	}
	unsubscribe()
	mine = sub.C()
	s.Wake()
	if closed(mine) {
		t.Fatal("a subscription ended is still woken")
	}
}
