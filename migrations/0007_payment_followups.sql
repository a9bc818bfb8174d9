-- Payment follow-up claims: command-side bookkeeping of the payment
-- follow-up reactor (workers.PaymentFollowups), the same shape as
-- webhook_delivery_claims. One row per follow-up (projections
-- PaymentFollowups) some instance has claimed; attempt `attempt` is claimed
-- with FOR UPDATE SKIP LOCKED under a lease, and recording its
-- payment.followup_attempted sets `recorded` in the same transaction.
CREATE TABLE payment_followup_claims (
    followup_id   text        PRIMARY KEY,
    attempt       integer     NOT NULL DEFAULT 0,
    recorded      boolean     NOT NULL DEFAULT false,
    claimed_by    text,
    claimed_at    timestamptz,
    leased_until  timestamptz NOT NULL DEFAULT '-infinity'
);
