-- One claims table for every reaction (internal/claims, run by
-- workers.Reactor): command-side bookkeeping, not a read model (the items
-- claimed are rows of each reaction's read model). One row per item some
-- instance has claimed, keyed by the reaction's stable name and the item's
-- key (derived from the event reacted to). Attempt `attempt` is claimed with
-- FOR UPDATE SKIP LOCKED under a lease (`claimed_by` until `leased_until`);
-- recording the attempt's event sets `recorded` and ends the lease in the
-- same transaction. A claim may be taken again only when the read model has
-- caught up with it (attempt <= the item's attempts), or when its holder
-- died between acting and recording (not recorded, lease over): then the
-- same attempt is made again under the same key (at least once).
--
-- The due time and the attempts made are not kept here: they are the
-- domain's decisions, recorded in each attempt's event and read from the
-- reaction's read model.
CREATE TABLE claims (
    reaction      text        NOT NULL,
    key           text        NOT NULL,
    attempt       integer     NOT NULL DEFAULT 0,
    recorded      boolean     NOT NULL DEFAULT false,
    claimed_by    text,
    claimed_at    timestamptz,
    leased_until  timestamptz NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (reaction, key)
);

-- The two reactions' own claim tables (migrations 0004 and 0007) held
-- claim state only; their rows move here under the reactions' names, so a
-- claim held across the upgrade keeps its attempt, holder and lease.
INSERT INTO claims (reaction, key, attempt, recorded, claimed_by, claimed_at, leased_until)
    SELECT 'webhook-dispatcher', delivery_id, attempt, recorded, claimed_by, claimed_at, leased_until
    FROM webhook_delivery_claims;
INSERT INTO claims (reaction, key, attempt, recorded, claimed_by, claimed_at, leased_until)
    SELECT 'payment-followups', followup_id, attempt, recorded, claimed_by, claimed_at, leased_until
    FROM payment_followup_claims;
DROP TABLE webhook_delivery_claims;
DROP TABLE payment_followup_claims;
