-- The random half of the key the instances of one deployment sign their
-- device calls and replies with on the message bus (internal/cluster,
-- ClusterSecret): the first instance to start inserts it, the others read
-- it. The key is derived from it and the server pepper together, so neither
-- a copy of the database nor the pepper file alone forges a call.
CREATE TABLE cluster_secret (
    id     smallint PRIMARY KEY CHECK (id = 1),
    secret bytea    NOT NULL CHECK (length(secret) = 32)
);
