-- eventstore_expect fails a unit of work whose decision read a stream it
-- does not append to, when that stream has moved on since (another writer
-- appended): the unit commits only if the state it decided on is still
-- current. SQLSTATE PF409 is read by the store as a version conflict.
CREATE FUNCTION eventstore_expect(stream text, version bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce((SELECT max(stream_version) FROM events WHERE stream_id = stream), 0) <> version THEN
        RAISE EXCEPTION 'stream % is not at version %', stream, version USING ERRCODE = 'PF409';
    END IF;
END
$$;
