package service

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"testing"

	"phonefleet/commands/fleet"
	"phonefleet/commands/keys"
	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/internal/config"
	"phonefleet/testutil"
)

// TestOperatorRegistersDevicesAsTheOperator: the operator commands' wiring
// registers devices through the application object, and the events name
// the operator and one request.
func TestOperatorRegistersDevicesAsTheOperator(t *testing.T) {
	ctx := testutil.Context(t)
	env := map[string]string{"DATABASE_URL": testutil.DatabaseURL(t), "SERVICE_DATA_DIR": t.TempDir()}
	fs := flag.NewFlagSet("devices add", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg, err := config.Load(fs, nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	op, err := OpenOperator(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close(ctx)

	add := fleet.RegisterDevices{OrgID: "org_operator", Backend: domain.BackendSim, Count: 2}
	if _, err := op.App.Fleet.RegisterDevices.Handle(context.Background(), add); !errors.Is(err, eventstore.ErrNoMetadata) {
		t.Fatalf("register without the operator's context: got %v; want ErrNoMetadata", err)
	}
	// ctx names the test as the actor; the operator's context replaces it.
	ids, err := op.App.Fleet.RegisterDevices.Handle(op.Context(ctx), add)
	if err != nil || len(ids) != 2 {
		t.Fatalf("register: got %v, %v; want two devices", ids, err)
	}
	var request string
	for _, id := range ids {
		evs, err := op.Store.Load(ctx, domain.DeviceStream(id), 1)
		if err != nil || len(evs) != 1 {
			t.Fatalf("device %s: got %d events, %v; want its registration", id, len(evs), err)
		}
		m, err := evs[0].DecodeMetadata()
		if err != nil || m.ActorKind != "operator" || m.ActorID != "phonefleet-cli" || !domain.HasPrefix(m.RequestID, domain.PrefixRequest) {
			t.Fatalf("device %s: got metadata %+v, %v; want the operator phonefleet-cli and a request id", id, m, err)
		}
		if request != "" && m.RequestID != request {
			t.Fatalf("the devices of one command carry requests %s and %s; want one", request, m.RequestID)
		}
		request = m.RequestID
	}

	var de *domain.Error
	if _, err := op.App.Keys.MintAPIKey.Handle(op.Context(ctx), keys.MintAPIKey{}); !errors.As(err, &de) || de.Code != domain.CodeServiceUnavailable {
		t.Fatalf("a capability the operator does not wire: got %v; want service_unavailable", err)
	}
}
