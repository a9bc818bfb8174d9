-- The notification e-mail reaction's send marks (workers/notifications.go):
-- command-side bookkeeping, not a read model. A row is committed just before
-- an attempt writes its message's final "." to the SMTP server, the moment
-- after which the server may hold the message even if its answer never
-- comes back. An attempt claimed again after its instance died (the claims
-- of migration 0009 make an unrecorded attempt due again) finds its mark and
-- is recorded "unconfirmed" instead of sending a second copy: one
-- notification is never e-mailed twice.
CREATE TABLE notification_email_sends (
    notification_id text        NOT NULL,
    attempt         integer     NOT NULL,
    holder          text        NOT NULL,
    marked_at       timestamptz NOT NULL,
    PRIMARY KEY (notification_id, attempt)
);
