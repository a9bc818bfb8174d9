-- Identity's command-side tables. The key store itself is a projection
-- (api_keys); these hold what is not derived from events.

-- One row per caller per minute: the shared per-minute request budget of
-- every instance (spec 8). A request is one atomic UPSERT on its row; rows
-- of ended windows are swept.
CREATE TABLE rate_limit_windows (
    bucket        text        NOT NULL,
    window_start  timestamptz NOT NULL,
    hits          integer     NOT NULL,
    PRIMARY KEY (bucket, window_start)
);

-- Settings instances must agree on. api_key_pepper holds a fingerprint (an
-- HMAC of a constant, never the pepper) of the pepper the first instance
-- started with, so an instance holding a different pepper refuses to start
-- instead of refusing every key minted elsewhere.
CREATE TABLE identity_settings (
    name   text PRIMARY KEY,
    value  text NOT NULL,
    set_at timestamptz NOT NULL DEFAULT now()
);
