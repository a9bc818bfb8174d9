package wire

import (
	"time"

	"phonefleet/commands/provisioning"
	"phonefleet/domain"
)

// Usage is the answer of GET /v1/usage: an organisation's device time in
// one billing period, per device and in total, as of asOf. Times are
// written by domain.FormatWebhookTime (UTC, microseconds). Seconds are
// decimal numbers with up to six decimals (microseconds, the precision
// the event store keeps): the totals are the sums of the devices'
// figures to the microsecond, and nothing is lost to rounding before a
// client bills (one billing in whole seconds rounds what it bills).
type Usage struct {
	Period       string        `json:"period"`
	PeriodStart  string        `json:"periodStart"`
	PeriodEnd    string        `json:"periodEnd"`
	Devices      []UsageDevice `json:"devices"`
	TotalSeconds float64       `json:"totalSeconds"`
	LeaseSeconds float64       `json:"leaseSeconds"`
	RunSeconds   float64       `json:"runSeconds"`
	AsOf         string        `json:"asOf"`
	Copilot      UsageCopilot  `json:"copilot"`
}

// UsageCopilot is the tokens the copilot's model took in the period.
type UsageCopilot struct {
	InputTokens  int64 `json:"inputTokens"`
	OutputTokens int64 `json:"outputTokens"`
	TotalTokens  int64 `json:"totalTokens"`
}

// UsageDevice is one device's time in the period: seconds is
// leaseSeconds (people's and keys' leases) plus runSeconds (runs'
// leases).
type UsageDevice struct {
	DeviceID     string  `json:"deviceId"`
	Seconds      float64 `json:"seconds"`
	LeaseSeconds float64 `json:"leaseSeconds"`
	RunSeconds   float64 `json:"runSeconds"`
}

// NewUsage returns r as the API shows it.
func NewUsage(r provisioning.UsageReport) Usage {
	return Usage{Period: r.Period.Name(), PeriodStart: domain.FormatWebhookTime(r.Period.Start),
		PeriodEnd: domain.FormatWebhookTime(r.Period.End), AsOf: domain.FormatWebhookTime(r.AsOf),
		TotalSeconds: seconds(r.Total()), LeaseSeconds: seconds(r.Lease), RunSeconds: seconds(r.Run),
		Copilot: UsageCopilot{InputTokens: r.CopilotInputTokens, OutputTokens: r.CopilotOutputTokens,
			TotalTokens: r.CopilotInputTokens + r.CopilotOutputTokens},
		Devices: each(r.Devices, func(d domain.DeviceUsage) UsageDevice {
			return UsageDevice{DeviceID: d.DeviceID, Seconds: seconds(d.Total()), LeaseSeconds: seconds(d.Lease), RunSeconds: seconds(d.Run)}
		})}
}

// seconds writes d in seconds with microsecond precision: whole
// microseconds divided exactly, so 90.5 s is 90.5 and not 90.49999….
func seconds(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1e6
}
