package projections_test

import (
	"fmt"
	"testing"
	"time"

	"phonefleet/domain"
	"phonefleet/eventstore"
	"phonefleet/projections"
	"phonefleet/testutil"
)

// Actions' outcomes read in one batch are written per device as one
// statement, yet the devices read model ends as if each had been applied
// alone: the status the last outcome left (never over offline), stamped
// when the device took it. Applied alone and beside projections that
// decode the outcome whole, and rebuilt (the outcome read for its device
// and screen only).
func TestDeviceStatusFromARunOfOutcomesIsAsIfAppliedOneByOne(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	type step struct {
		at int
		ev domain.Event
	}
	committed := func(dev string, on bool) domain.Event {
		return domain.ActionCommitted{ActionID: "act_" + dev, DeviceID: dev, Result: domain.ActionResult{ScreenOn: on}}
	}
	var steps []step
	for _, d := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		steps = append(steps, step{0, domain.DeviceRegistered{DeviceID: d, OrgID: "org_dev", Name: d, Backend: "sim", RegisteredAt: t0}})
	}
	steps = append(steps,
		step{1, committed("a", true)},                               // online already: unchanged
		step{2, committed("b", false)},                              // asleep …
		step{3, committed("b", true)},                               // … online again: stamped 3
		step{4, committed("b", true)},                               // unchanged
		step{5, committed("c", false)},                              // asleep, online, asleep: stamped 7
		step{6, committed("c", true)},                               //
		step{7, committed("c", false)},                              //
		step{8, domain.DeviceWentOffline{DeviceID: "d", At: at(8)}}, // ends the run
		step{9, committed("d", true)},                               // offline stays offline
		step{10, committed("e", false)},                             // asleep, then woken (ends the run)
		step{11, domain.DeviceWoken{DeviceID: "e", At: at(11)}},
		step{12, committed("e", true)},  // unchanged
		step{13, committed("e", false)}, // asleep: stamped 13
		step{14, committed("a", false)}, // asleep and back to online: stamped 15
		step{15, committed("a", true)},  //
		step{16, domain.DeviceWentOffline{DeviceID: "g", At: at(16)}},
		step{17, committed("f", false)}, // a run of one outcome
		step{18, domain.DeviceWentOffline{DeviceID: "g", At: at(18)}},
		step{19, committed("h", true)}, // online, then stopped: the outcome is written first
		step{20, domain.DeviceStopped{DeviceID: "h", At: at(20)}},
	)
	want := []string{
		fmt.Sprintf(`["a","online","%s"]`, at(15).Format(time.RFC3339)),
		fmt.Sprintf(`["b","online","%s"]`, at(3).Format(time.RFC3339)),
		fmt.Sprintf(`["c","asleep","%s"]`, at(7).Format(time.RFC3339)),
		fmt.Sprintf(`["d","offline","%s"]`, at(8).Format(time.RFC3339)),
		fmt.Sprintf(`["e","asleep","%s"]`, at(13).Format(time.RFC3339)),
		fmt.Sprintf(`["f","asleep","%s"]`, at(17).Format(time.RFC3339)),
		fmt.Sprintf(`["g","offline","%s"]`, at(18).Format(time.RFC3339)),
		fmt.Sprintf(`["h","asleep","%s"]`, at(20).Format(time.RFC3339)),
	}
	for _, c := range []struct {
		name  string
		projs []projections.Projection
	}{
		{"alone", []projections.Projection{projections.Devices{}}},
		{"with the fleet's read models", projections.Fleet()},
	} {
		t.Run(c.name, func(t *testing.T) {
			pool := testutil.FreshPool(t)
			s := eventstore.New(pool)
			var news []eventstore.NewEvent
			for _, st := range steps {
				name, version, data, err := domain.Events.Encode(st.ev)
				if err != nil {
					t.Fatal(err)
				}
				news = append(news, eventstore.NewEvent{Type: name, SchemaVersion: version, OrgID: "org_dev", Data: data, OccurredAt: at(st.at)})
			}
			a, err := s.Append(testutil.Context(t), "devices-batch", eventstore.NoStream, news...)
			if err != nil {
				t.Fatal(err)
			}
			r := startRunner(t, s, c.projs)
			waitForName(t, r, projections.DevicesName, a)
			const rows = `SELECT device_id, status, to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
				FROM public.devices ORDER BY device_id`
			checkRows(t, pool, rows, want...)
			// A rebuild reads the outcomes outside a group's batch, for
			// their device and screen only.
			if err := r.Rebuild(testutil.Context(t), projections.DevicesName, nil); err != nil {
				t.Fatal(err)
			}
			checkRows(t, pool, rows, want...)
		})
	}
}
