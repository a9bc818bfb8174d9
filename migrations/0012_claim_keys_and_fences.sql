-- Claim keys without collisions, and fencing of the instance-level claims
-- (issue 27, item 2).
--
-- Advisory locks used to be keyed by hashtext(name), 32 bits: two gateways
-- (or projections) whose names hash alike shared one lock, so one refused
-- the other. Each name now gets its own number from this registry, given
-- once and never reused, and the lock is the two-int form
-- pg_advisory_lock(1885761652, key) — classid 1885761652 ('pflt') names
-- phonefleet's claims, and two-int locks (objsubid 2 in pg_locks) never meet
-- the single-bigint keys other code uses (the migration runner's).
CREATE TABLE advisory_keys (
    name text    PRIMARY KEY,
    key  integer GENERATED ALWAYS AS IDENTITY UNIQUE
);

-- advisory_key returns the registry number of name, giving it one the first
-- time. Two sessions asking at once for a new name both get the one number:
-- the second insert waits for the first's commit and then finds its row (each
-- statement of a plpgsql function sees what committed before it).
CREATE FUNCTION advisory_key(p_name text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    k integer;
BEGIN
    LOOP
        SELECT key INTO k FROM advisory_keys WHERE name = p_name;
        IF FOUND THEN
            RETURN k;
        END IF;
        INSERT INTO advisory_keys (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING RETURNING key INTO k;
        IF k IS NOT NULL THEN
            RETURN k;
        END IF;
    END LOOP;
END $$;

-- The claim locks by name: session-level (claim_try_lock, claim_unlock)
-- and transaction-level (claim_xact_lock), and whether any session holds
-- one now (claim_held), so that the lock's form lives here only.
CREATE FUNCTION claim_try_lock(p_name text) RETURNS boolean
LANGUAGE sql AS $$ SELECT pg_try_advisory_lock(1885761652, advisory_key(p_name)) $$;

CREATE FUNCTION claim_unlock(p_name text) RETURNS boolean
LANGUAGE sql AS $$
    SELECT coalesce((SELECT pg_advisory_unlock(1885761652, key) FROM advisory_keys WHERE name = p_name), false)
$$;

CREATE FUNCTION claim_xact_lock(p_name text) RETURNS void
LANGUAGE sql AS $$ SELECT pg_advisory_xact_lock(1885761652, advisory_key(p_name)) $$;

CREATE FUNCTION claim_held(p_name text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN advisory_keys k ON k.name = p_name
        WHERE l.locktype = 'advisory' AND l.granted
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND l.classid::bigint = 1885761652 AND l.objid::bigint = k.key AND l.objsubid = 2)
$$;

-- host_fence refuses a write made under a stale claim on a device host:
-- host is "sim" or "gw.<gatewayId>", epoch the claim generation the writer
-- holds (sim_host.epoch / gateway_hosts.epoch of its take). It locks the
-- host's row FOR SHARE, so a take (which bumps the epoch) waits for the
-- writing transaction to end, and a write after a take sees the new epoch
-- and fails with SQLSTATE PF409. A holder that lost its advisory lock (its
-- session ended) to another process is thereby fenced on its next write,
-- before it learns of the loss itself.
CREATE FUNCTION host_fence(p_host text, p_epoch bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    cur bigint;
BEGIN
    IF p_host = 'sim' THEN
        SELECT epoch INTO cur FROM sim_host WHERE id = 1 FOR SHARE;
    ELSIF p_host LIKE 'gw.%' THEN
        SELECT epoch INTO cur FROM gateway_hosts WHERE gateway_id = substr(p_host, 4) FOR SHARE;
    ELSE
        RAISE EXCEPTION 'host_fence: % names no host', p_host USING ERRCODE = '22023';
    END IF;
    IF cur IS DISTINCT FROM p_epoch THEN
        RAISE EXCEPTION 'the claim on host % was taken over (generation % is stale; now %)', p_host, p_epoch, cur
            USING ERRCODE = 'PF409';
    END IF;
END $$;
