-- Back to the four statuses: a cancelled job is kept as completed (both are finished).
CREATE TABLE catch_ups_old (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    projection_kind TEXT   NOT NULL,
    tenant          TEXT   NOT NULL,
    target_ids      TEXT,
    since           BIGINT,
    status          TEXT   NOT NULL
                    CHECK (status IN ('started', 'in_progress', 'finalizing', 'completed')),
    cursor_seq      BIGINT NOT NULL DEFAULT 0,
    replayed        BIGINT NOT NULL DEFAULT 0,
    total_estimate  BIGINT NOT NULL DEFAULT 0,
    affected_shards TEXT   NOT NULL DEFAULT '[]',
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    finished_at     BIGINT
);
INSERT INTO catch_ups_old (id, projection_kind, tenant, target_ids, since, status, cursor_seq,
                           replayed, total_estimate, affected_shards, created_at, updated_at,
                           finished_at)
    SELECT id, projection_kind, tenant, target_ids, since,
           CASE status WHEN 'cancelled' THEN 'completed' ELSE status END, cursor_seq, replayed,
           total_estimate, affected_shards, created_at, updated_at, finished_at
    FROM catch_ups;
DELETE FROM sqlite_sequence WHERE name = 'catch_ups_old';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'catch_ups_old', seq FROM sqlite_sequence WHERE name = 'catch_ups';
DROP TABLE catch_ups;
ALTER TABLE catch_ups_old RENAME TO catch_ups;
CREATE INDEX catch_ups_running ON catch_ups (projection_kind, tenant, status);
