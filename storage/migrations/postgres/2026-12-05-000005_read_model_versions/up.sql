-- Read models' versions (blue/green rebuilds): which projection kind serves a read model and
-- which one is being built beside it (by which catch-up job). A model without a row is
-- served by the kind of its own name. Written by the start of a version's catch-up and by the
-- stage commit that completes or cancels it (docs/read-models.md).
CREATE TABLE shardbox_read_model_versions (
    model TEXT PRIMARY KEY NOT NULL,
    served_kind TEXT NOT NULL,
    building_kind TEXT,
    building_job BIGINT,
    previous_kind TEXT,
    switched_at BIGINT
);
-- The read model a catch-up job builds a new version of (NULL: a plain catch-up).
ALTER TABLE catch_ups ADD COLUMN version_of TEXT;
-- The event store's last seq when the job's first step ran: its replay ends there (events
-- appended later reach the projection as live copies), so it ends under steady traffic.
ALTER TABLE catch_ups ADD COLUMN until_seq BIGINT;
