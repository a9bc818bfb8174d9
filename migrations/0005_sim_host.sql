-- Which process last took the sim host claim (the advisory lock
-- phonefleet:sim-host), and how many times it has been taken. A process
-- that re-takes the lock after losing its connection (the database
-- restarted) learns from it whether anyone else drove the phones
-- meanwhile: if not, its phones and its actions in flight are still its
-- own and nothing needs settling.
CREATE TABLE sim_host (
    id     smallint PRIMARY KEY CHECK (id = 1),
    holder text     NOT NULL,
    epoch  bigint   NOT NULL
);
