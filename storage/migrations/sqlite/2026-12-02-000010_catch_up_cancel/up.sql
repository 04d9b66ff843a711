-- Catch-up cancel: the status `cancelled` and the operator's request time. SQLite cannot
-- change a CHECK constraint in place, so the table is rebuilt (ids and the AUTOINCREMENT
-- high-water mark kept, so a purged job's id is never reused).
CREATE TABLE catch_ups_new (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    projection_kind     TEXT   NOT NULL,
    tenant              TEXT   NOT NULL,
    target_ids          TEXT,
    since               BIGINT,
    status              TEXT   NOT NULL
                        CHECK (status IN ('started', 'in_progress', 'finalizing', 'completed', 'cancelled')),
    cursor_seq          BIGINT NOT NULL DEFAULT 0,
    replayed            BIGINT NOT NULL DEFAULT 0,
    total_estimate      BIGINT NOT NULL DEFAULT 0,
    affected_shards     TEXT   NOT NULL DEFAULT '[]',
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL,
    finished_at         BIGINT,
    -- When an operator asked to cancel the job; written only by that request.
    cancel_requested_at BIGINT
);
INSERT INTO catch_ups_new (id, projection_kind, tenant, target_ids, since, status, cursor_seq,
                           replayed, total_estimate, affected_shards, created_at, updated_at,
                           finished_at)
    SELECT id, projection_kind, tenant, target_ids, since, status, cursor_seq, replayed,
           total_estimate, affected_shards, created_at, updated_at, finished_at
    FROM catch_ups;
DELETE FROM sqlite_sequence WHERE name = 'catch_ups_new';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'catch_ups_new', seq FROM sqlite_sequence WHERE name = 'catch_ups';
DROP TABLE catch_ups;
ALTER TABLE catch_ups_new RENAME TO catch_ups;
CREATE INDEX catch_ups_running ON catch_ups (projection_kind, tenant, status);
