-- Failure policy `block` and TTL sweeps, SQLite.
--
-- inbox_messages gains the status 'blocked' (a message that exhausted its attempts under a
-- block policy: no page reads it, its target waits for an operator) and the column
-- first_failed_at (when the first attempt failed, carried into dead letters). SQLite cannot
-- change a CHECK constraint in place, so the table is rebuilt; seq keeps counting from where
-- it was (the AUTOINCREMENT high-water mark is carried over).

ALTER TABLE inbox_messages RENAME TO inbox_messages_v1;

CREATE TABLE inbox_messages (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    shard           INTEGER NOT NULL,
    signal_id       TEXT    NOT NULL,
    target_kind     TEXT    NOT NULL,
    target_id       TEXT    NOT NULL,
    tenant          TEXT    NOT NULL,
    kind            TEXT    NOT NULL CHECK (kind IN ('command', 'event', 'catch_up')),
    status          TEXT    NOT NULL
                    CHECK (status IN ('to_deliver', 'delivered', 'to_catch_up', 'blocked')),
    received_at     BIGINT  NOT NULL,
    deliver_after   BIGINT,
    expires_at      BIGINT,
    keep_until      BIGINT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    payload         BLOB    NOT NULL,
    payload_type    TEXT    NOT NULL,
    metadata        TEXT    NOT NULL DEFAULT '{}',
    first_failed_at BIGINT
);

INSERT INTO inbox_messages (seq, shard, signal_id, target_kind, target_id, tenant, kind, status,
                            received_at, deliver_after, expires_at, keep_until, attempts,
                            last_error, payload, payload_type, metadata)
SELECT seq, shard, signal_id, target_kind, target_id, tenant, kind, status, received_at,
       deliver_after, expires_at, keep_until, attempts, last_error, payload, payload_type,
       metadata
FROM inbox_messages_v1;

-- Rows that were deleted still count: the next seq follows the old table's high-water mark.
INSERT INTO sqlite_sequence (name, seq)
SELECT 'inbox_messages', seq FROM sqlite_sequence
WHERE name = 'inbox_messages_v1'
  AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'inbox_messages');
UPDATE sqlite_sequence
SET seq = MAX(seq, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'inbox_messages_v1'), 0))
WHERE name = 'inbox_messages';

DROP TABLE inbox_messages_v1;

-- The indexes of the first migration, on the new table.
CREATE UNIQUE INDEX inbox_dedup ON inbox_messages (tenant, target_kind, target_id, signal_id);
CREATE INDEX inbox_due ON inbox_messages (shard, status, seq);
CREATE INDEX inbox_purge ON inbox_messages (shard, keep_until) WHERE keep_until IS NOT NULL;
CREATE INDEX inbox_retrying ON inbox_messages (shard, seq)
    WHERE attempts > 0 AND status <> 'delivered';
CREATE INDEX inbox_delayed ON inbox_messages (shard, deliver_after)
    WHERE deliver_after IS NOT NULL AND status <> 'delivered';

-- Blocked targets, for operators: few rows, looked up by target.
CREATE INDEX inbox_blocked ON inbox_messages (tenant, target_kind, target_id)
    WHERE status = 'blocked';
-- Rows with a TTL not yet delivered, by expiry: a TTL sweep reads only the expired ones.
CREATE INDEX inbox_expiring ON inbox_messages (expires_at)
    WHERE expires_at IS NOT NULL AND status <> 'delivered';
-- A dead letter keeps the original row whole, its first failure time included.
ALTER TABLE dead_letters ADD COLUMN row_first_failed_at BIGINT;
-- Operators list and purge dead letters by time.
CREATE INDEX dead_letters_by_time ON dead_letters (last_attempt_at);
