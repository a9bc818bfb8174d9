-- The one source of truth: an append-only, gap-safe ordered event log.
CREATE TABLE events (
    position        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The writing transaction. Readers never pass a transaction id that is not
    -- below pg_snapshot_xmin(pg_current_snapshot()), so a slow writer whose
    -- position was drawn early can never be skipped (gap safety).
    transaction_id  xid8        NOT NULL DEFAULT pg_current_xact_id(),
    event_id        uuid        NOT NULL,
    stream_id       text        NOT NULL,
    stream_version  bigint      NOT NULL CHECK (stream_version > 0),
    event_type      text        NOT NULL,
    schema_version  smallint    NOT NULL CHECK (schema_version > 0),
    org_id          text        NOT NULL,
    data            jsonb       NOT NULL,
    metadata        jsonb       NOT NULL,
    occurred_at     timestamptz NOT NULL,
    CONSTRAINT events_stream_version UNIQUE (stream_id, stream_version)
);

-- The ordered feed: (transaction_id, position).
CREATE INDEX events_feed ON events (transaction_id, position);

-- Events are immutable: schema changes are upcast at read time.
CREATE FUNCTION events_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only (% refused)', TG_OP;
END $$;
CREATE TRIGGER events_no_update_delete BEFORE UPDATE OR DELETE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_immutable();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_immutable();

-- One row per projection consumer group (name@version): where it has read to.
-- Written in the same transaction as the projection's rows.
CREATE TABLE projection_checkpoints (
    consumer_group       text        PRIMARY KEY,
    last_transaction_id  xid8        NOT NULL DEFAULT '0',
    last_position        bigint      NOT NULL DEFAULT 0,
    events_applied       bigint      NOT NULL DEFAULT 0,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    -- The last failure to apply a batch (cleared by the next success).
    last_error           text,
    last_error_at        timestamptz
);

-- Which version of each projection answers reads, and any rebuild under way.
CREATE TABLE projection_registry (
    name                text        PRIMARY KEY,
    active_version      integer     NOT NULL,
    building_version    integer,
    rebuild_started_at  timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now()
);
