package cqrs_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"phonefleet/commands/cqrs"
	"phonefleet/domain"
	"phonefleet/eventstore"
)

type ping struct{ N int }

type pong struct{ N int }

// double is a handler: a struct with its dependencies (none) and Handle.
type double struct{}

func (double) Handle(_ context.Context, p ping) (pong, error) {
	if p.N < 0 {
		return pong{}, domain.Errorf(domain.CodeInvalidArgument, "n must not be negative")
	}
	return pong{N: 2 * p.N}, nil
}

// checkout stands for a request that says how it is refused where it is not
// served.
type checkout struct{}

func (checkout) NotServed() error {
	return domain.Errorf(domain.CodeCheckoutUnavailable, "purchases are not served")
}

func TestServedHandlerAnswersAndIsLogged(t *testing.T) {
	var logs bytes.Buffer
	h := cqrs.Serve(cqrs.Decorator{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, double{})
	if !h.Served() {
		t.Fatal("a served handler says it is not served")
	}
	ctx := eventstore.WithMetadata(context.Background(), eventstore.Metadata{ActorKind: "user", ActorID: "u_1", RequestID: "req_1"})
	got, err := h.Handle(ctx, ping{N: 21})
	if err != nil || got.N != 42 {
		t.Fatalf("got %+v, %v; want 42", got, err)
	}
	if _, err := h.Handle(ctx, ping{N: -1}); domain.ErrorCode(err) != domain.CodeInvalidArgument {
		t.Fatalf("got %v; want the handler's invalid_argument", err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d log lines; want one per call:\n%s", len(lines), logs.String())
	}
	for _, want := range []string{`"op":"cqrs_test.ping"`, `"request_id":"req_1"`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("log line %s; want %s", lines[0], want)
		}
	}
	if !strings.Contains(lines[1], `"code":"invalid_argument"`) {
		t.Errorf("log line %s; want the failure's code", lines[1])
	}
}

func TestZeroHandlerIsNotServed(t *testing.T) {
	var h cqrs.Handler[ping, pong]
	if h.Served() {
		t.Fatal("the zero handler says it is served")
	}
	_, err := h.Handle(context.Background(), ping{})
	var de *domain.Error
	if !errors.As(err, &de) || de.Code != domain.CodeServiceUnavailable || !strings.Contains(de.Message, "cqrs_test.ping") {
		t.Fatalf("got %v; want service_unavailable naming the request", err)
	}
	var c cqrs.Handler[checkout, cqrs.Done]
	if _, err := c.Handle(context.Background(), checkout{}); domain.ErrorCode(err) != domain.CodeCheckoutUnavailable {
		t.Fatalf("got %v; want the request's own NotServed answer", err)
	}
}

func TestFakeAndErr(t *testing.T) {
	boom := errors.New("boom")
	h := cqrs.Fake(func(context.Context, ping) (cqrs.Done, error) { return cqrs.Done{}, boom })
	if err := cqrs.Err(h.Handle(context.Background(), ping{})); !errors.Is(err, boom) {
		t.Fatalf("got %v; want the fake's error", err)
	}
}

// waits records what it was asked to wait for.
type waits []string

func (w *waits) WaitFor(_ context.Context, name string, a eventstore.Appended) error {
	*w = append(*w, name)
	return nil
}

func TestAwait(t *testing.T) {
	ctx := context.Background()
	if err := cqrs.Await(ctx, nil, eventstore.Appended{LastPosition: 7}, "devices"); err != nil {
		t.Fatalf("no read models: got %v; want nil", err)
	}
	var w waits
	if err := cqrs.Await(ctx, &w, eventstore.Appended{}, "devices"); err != nil || len(w) != 0 {
		t.Fatalf("nothing appended: got %v, waited for %v; want no wait", err, w)
	}
	if err := cqrs.Await(ctx, &w, eventstore.Appended{LastPosition: 7}, "devices", "leases"); err != nil || strings.Join(w, ",") != "devices,leases" {
		t.Fatalf("got %v, waited for %v; want devices then leases", err, w)
	}
}
