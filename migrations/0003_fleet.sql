-- The fleet's command-side tables. Devices, leases, receipts and the frames
-- index are projections of the event log; these tables hold what commands
-- need to decide atomically and the bytes too large for events.

-- One row per (organisation, idempotency key) of a device action, inserted in
-- the same transaction as the action's action.requested event: the primary
-- key decides between concurrent duplicates. state follows the action's
-- stream ('requested' until an outcome, or 'unknown' when none will come);
-- the executor's start-up sweep finds unfinished actions through it.
CREATE TABLE action_idempotency (
    org_id           text        NOT NULL,
    idempotency_key  text        NOT NULL,
    action_id        text        NOT NULL UNIQUE,
    device_id        text        NOT NULL,
    -- What the key was first used for (device, action, arguments).
    fingerprint      text        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('requested', 'committed', 'failed', 'unknown')),
    requested_at     timestamptz NOT NULL,
    finished_at      timestamptz,
    PRIMARY KEY (org_id, idempotency_key)
);
CREATE INDEX action_idempotency_open ON action_idempotency (device_id) WHERE state = 'requested';

-- Frames: what a device showed at one moment. png and snapshot are filled
-- when captured or, for backends that can redraw a past screen (the sim),
-- on first read from replay. Rows past expires_at are unreadable and are
-- deleted by the retention sweep.
CREATE TABLE frames (
    frame_id     text        PRIMARY KEY,
    org_id       text        NOT NULL,
    device_id    text        NOT NULL,
    backend      text        NOT NULL,
    screen_hash  text        NOT NULL,
    width        integer     NOT NULL,
    height       integer     NOT NULL,
    captured_at  timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    png          bytea,
    snapshot     json,
    replay       bytea
);
CREATE INDEX frames_expiry ON frames (expires_at);

-- The saved state of devices whose backend keeps its own (the sim), written
-- in the same transaction as each action's outcome, so a restarted service
-- brings every phone back as it was.
CREATE TABLE device_states (
    device_id   text        PRIMARY KEY,
    org_id      text        NOT NULL,
    backend     text        NOT NULL,
    model       text        NOT NULL,
    state       bytea       NOT NULL,
    updated_at  timestamptz NOT NULL
);
