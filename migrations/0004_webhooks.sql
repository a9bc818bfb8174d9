-- Webhook dispatch claims: command-side bookkeeping of the dispatcher, not a
-- read model (delivery rows are the `webhooks` projection). One row per
-- delivery that some dispatcher has claimed. A dispatcher claims attempt
-- number `attempt` with FOR UPDATE SKIP LOCKED and a lease; recording the
-- attempt's event sets `recorded` in the same transaction. A claim may be
-- taken again only when the read model has caught up with it
-- (attempt <= the row's attempts), or when its holder died between sending
-- and recording (not recorded, lease expired): then the same attempt is
-- sent again with the same delivery id (at least once).
CREATE TABLE webhook_delivery_claims (
    delivery_id   text        PRIMARY KEY,
    attempt       integer     NOT NULL DEFAULT 0,
    recorded      boolean     NOT NULL DEFAULT false,
    claimed_by    text,
    claimed_at    timestamptz,
    leased_until  timestamptz NOT NULL DEFAULT '-infinity'
);
