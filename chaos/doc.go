// Package chaos holds the chaos suite (issue 27 item 5): the whole system
// run as real processes — two `phonefleet serve` instances on one
// PostgreSQL cluster and one nats-server, a `phonefleet gateway` with sim
// phones and an adb phone, webhooks to an HTTPS receiver, checkout against
// stripe-mock (on two more instances, hosted, which sell: buy_test.go),
// REST and MCP clients acting and built-in runs executing —
// while each part is killed and restarted in turn, an instance is cut
// from NATS and one instance runs with a skewed clock. Afterwards it checks
// that nothing acknowledged was lost or performed twice, that every
// receipt settled and the phones' state equals the committed receipts,
// that every webhook arrived at least once under a stable id, that the
// receipt export's checkpoints verify, and that no device ever had two
// holders.
//
// The short form (one pass of each fault, about a minute and a half) runs
// in `make test`; `make chaos` sets CHAOS_DURATION (for example 15m) and
// repeats the passes for that long. The package holds tests only, for Linux
// (it reads /proc and runs an instance in a time namespace).
package chaos
