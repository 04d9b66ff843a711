-- The kinds' stored controls: a pause (paused_at, in microseconds since the epoch; NULL when
-- not paused) and run-time settings (a JSON object of the set fields; '{}' when none), read
-- by every node every poll interval.
CREATE TABLE shardbox_kind_controls (
    kind TEXT PRIMARY KEY NOT NULL,
    paused_at BIGINT,
    settings TEXT NOT NULL DEFAULT '{}',
    updated_at BIGINT NOT NULL
);
