// Package cqrs is the shape of every entry point of the application, and
// what every capability shares to build one: a handler is a struct holding
// its dependencies, with a method Handle taking one request and giving one
// answer; the application object holds each handler as a Handler, which
// adds the one decorator (logged and timed); a Handler left at its zero
// value answers that the deployment does not serve it. Read-your-writes
// has one shape too: Await on the service's ReadModels.
package cqrs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
)

// Handles is what a handler does: one request in, one answer out. Every
// command and query handler of every capability implements it; each
// checks the caller's scopes and tenancy itself, so a surface only
// translates requests and errors.
type Handles[C, R any] interface {
	Handle(ctx context.Context, c C) (R, error)
}

// Handler is one entry point of the application object: a handler behind
// the one decorator, which logs its name, how long it took and, when it
// failed, the error code (the cause of a server fault is logged once, by
// the surface answering it), so handlers never log.
//
// The zero Handler is an entry point the deployment does not serve: it
// answers service_unavailable naming the request (or, for a request that
// says how it is refused then, NotServed's answer), and a capability that
// is not wired needs no code of its own to say so.
type Handler[C, R any] struct {
	next   Handles[C, R]
	logger *slog.Logger
	name   string
}

// Decorator is the one decorator every entry point goes through: the
// logger receiving one debug line per call (nil discards).
type Decorator struct {
	Logger *slog.Logger
}

// Serve puts h behind the decorator d: the only way a handler becomes an
// entry point of the application object.
func Serve[C, R any](d Decorator, h Handles[C, R]) Handler[C, R] {
	l := d.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return Handler[C, R]{next: h, logger: l, name: requestName[C]()}
}

// Served reports whether the deployment serves h.
func (h Handler[C, R]) Served() bool { return h.next != nil }

// Handle runs the handler. A handler the deployment does not serve answers
// service_unavailable.
func (h Handler[C, R]) Handle(ctx context.Context, c C) (R, error) {
	if h.next == nil {
		var zero R
		if ns, ok := any(c).(NotServed); ok {
			return zero, ns.NotServed()
		}
		return zero, domain.Errorf(domain.CodeServiceUnavailable, "%s is not served by this deployment", requestName[C]())
	}
	start := time.Now()
	r, err := h.next.Handle(ctx, c)
	if h.logger.Enabled(ctx, slog.LevelDebug) {
		attrs := []slog.Attr{slog.String("op", h.name), slog.Duration("took", time.Since(start))}
		if err != nil {
			code := string(domain.CodeInternal)
			var de *domain.Error
			if errors.As(err, &de) {
				code = string(de.Code)
			}
			attrs = append(attrs, slog.String("code", code))
		}
		if m, merr := eventstore.MetadataFrom(ctx); merr == nil {
			attrs = append(attrs, slog.String("request_id", m.RequestID))
		}
		h.logger.LogAttrs(ctx, slog.LevelDebug, "application", attrs...)
	}
	return r, err
}

// NotServed is implemented by a request whose answer on a deployment that
// does not serve it is not service_unavailable (checkout: spec 2.3 allows
// only its own codes).
type NotServed interface {
	NotServed() error
}

// requestName names a request type as its package and type
// ("fleet.AcquireLease").
func requestName[C any]() string {
	return fmt.Sprintf("%v", reflect.TypeFor[C]())
}

// Done is the answer of a command that answers nothing but success.
type Done struct{}

// Fake is an entry point answering with fn, for a test that stands in for
// a capability (a surface's tests, a worker's). The service never uses it:
// its entry points are handler structs.
func Fake[C, R any](fn func(ctx context.Context, c C) (R, error)) Handler[C, R] {
	return Serve(Decorator{}, fake[C, R](fn))
}

type fake[C, R any] func(ctx context.Context, c C) (R, error)

func (f fake[C, R]) Handle(ctx context.Context, c C) (R, error) { return f(ctx, c) }

// ReadModels is read-your-writes on the service's read models
// (projections.Runner implements it): a command that answers from a read
// model waits until the read model has applied what it appended.
type ReadModels interface {
	// WaitFor returns once the active version of the read model name has
	// applied a, or with ctx's error.
	WaitFor(ctx context.Context, name string, a eventstore.Appended) error
}

// Await returns once every named read model has applied a. Without read
// models (rm nil: a test or a tool that reads none) or with nothing
// appended it returns at once.
func Await(ctx context.Context, rm ReadModels, a eventstore.Appended, names ...string) error {
	if rm == nil || a.LastPosition == 0 {
		return nil
	}
	for _, n := range names {
		if err := rm.WaitFor(ctx, n, a); err != nil {
			return fmt.Errorf("wait for %s: %w", n, err)
		}
	}
	return nil
}

// AwaitAll returns once every named read model has applied every event
// committed before the call (store.Last), for a read that must see all
// that was written, whoever wrote it.
func AwaitAll(ctx context.Context, store *eventstore.Store, rm ReadModels, names ...string) error {
	if rm == nil {
		return nil
	}
	last, err := store.Last(ctx)
	if err != nil {
		return err
	}
	return Await(ctx, rm, last, names...)
}

// Err is the error of a command that answers Done, for a caller that reads
// only whether it failed: Err(h.Handle(ctx, cmd)).
func Err(_ Done, err error) error { return err }
