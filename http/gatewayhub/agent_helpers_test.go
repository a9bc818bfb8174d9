package gatewayhub_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"phonefleet/domain"
	"phonefleet/internal/gateway"
)

// startAgent runs a gateway program until the test ends (or stop).
func startAgent(t *testing.T, cfg gateway.AgentConfig) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gateway.RunAgent(ctx, cfg) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func findElement(e domain.UIElement, match func(domain.UIElement) bool) (domain.UIElement, bool) {
	if match(e) {
		return e, true
	}
	for _, c := range e.Children {
		if f, ok := findElement(c, match); ok {
			return f, true
		}
	}
	return domain.UIElement{}, false
}

func showsText(root domain.UIElement, text string) bool {
	_, ok := findElement(root, func(e domain.UIElement) bool { return strings.Contains(e.Text, text) })
	return ok
}
