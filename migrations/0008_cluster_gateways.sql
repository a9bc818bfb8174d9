-- Several instances and gateways (issue 14).
--
-- Each action's idempotency row names the host the action was accepted
-- under: "sim" (the sim phones and adb devices, one claim) or
-- "gw.<gatewayId>". A process taking over a host settles only that
-- host's unfinished actions, never another host's actions in flight.
ALTER TABLE action_idempotency ADD COLUMN host text NOT NULL DEFAULT 'sim';
CREATE INDEX action_idempotency_open_host ON action_idempotency (host) WHERE state = 'requested';

-- Which process last took a gateway's host claim (an advisory lock per
-- gateway), and how many times it has been taken: as sim_host, so that a
-- process re-taking a gateway learns whether another one drove its
-- devices meanwhile.
CREATE TABLE gateway_hosts (
    gateway_id text        PRIMARY KEY,
    holder     text        NOT NULL,
    epoch      bigint      NOT NULL,
    taken_at   timestamptz NOT NULL DEFAULT now()
);

-- The cluster's name on the message bus: the first instance to start
-- inserts it, so instances of one database share it and two databases
-- sharing one NATS server never hear each other.
CREATE TABLE cluster_identity (
    id         smallint PRIMARY KEY CHECK (id = 1),
    cluster_id text     NOT NULL
);
