package eventstore

import (
	"strconv"
	"strings"
	"testing"
)

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

func TestRelayedNoticeWakesAsItNames(t *testing.T) {
	many := make([]string, 400)
	for i := range many {
		many[i] = strings.Repeat("t", 20) + strconv.Itoa(i)
	}
	for _, c := range []struct {
		name       string
		payload    string
		wantSub    bool // the subscription to keep.% is woken
		wantWaiter bool // the every-commit waiter is woken
	}{
		{"types of this subscription", encodeNotice("other", []string{"keep.that"}), true, true},
		{"other types", encodeNotice("other", []string{"skip.this"}), false, true},
		{"no events (a unit of statements only)", encodeNotice("other", nil), false, true},
		{"too many types to name", encodeNotice("other", append(many, "skip.this")), true, true},
		{"an earlier build's notice (its store alone)", "other", true, true},
		{"this store's own notice", encodeNotice("self", []string{"keep.that"}), false, false},
		{"this store's own, as an earlier build sent it", "self", false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if len(c.payload) >= 8000 {
				t.Fatalf("payload of %d bytes; PostgreSQL takes fewer than 8000", len(c.payload))
			}
			s := NewSignal()
			sub, unsubscribe := s.Sub([]string{"keep.%"})
			defer unsubscribe()
			every, mine := s.C(), sub.C()
			wakeOn(c.payload, "self", s)
			if closed(mine) != c.wantSub || closed(every) != c.wantWaiter {
				t.Fatalf("subscription woken %v, every-commit waiter %v; want %v, %v", closed(mine), closed(every), c.wantSub, c.wantWaiter)
			}
		})
	}
}

// A waiter released by its subscription takes s's channel for its next
// wait; the wake that released it must not then close that channel too (a
// second wake-up for the same commit: a projection that had learnt to wait
// on every commit took it for another commit, found nothing, and went back
// to waiting for its own types only).
func TestSignalSubscriberDoesNotTakeAChannelTheSameWakeCloses(t *testing.T) {
	for i := range 2000 {
		s := NewSignal()
		sub, end := s.Sub([]string{"keep.%"})
		subCh := sub.C()
		taken := make(chan (<-chan struct{}))
		go func() {
			<-subCh
			taken <- s.C()
		}()
		s.WakeTypes([]string{"keep.held"})
		next := <-taken
		select {
		case <-next:
			t.Fatalf("round %d: the channel taken after the subscription's wake was closed by the same wake", i)
		default:
		}
		end()
	}
}
