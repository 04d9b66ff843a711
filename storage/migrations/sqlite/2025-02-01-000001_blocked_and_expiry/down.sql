-- Back to the first schema: blocked messages become deliverable again (attempts kept).
DROP INDEX dead_letters_by_time;
ALTER TABLE dead_letters DROP COLUMN row_first_failed_at;

ALTER TABLE inbox_messages RENAME TO inbox_messages_v2;

CREATE TABLE inbox_messages (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    shard         INTEGER NOT NULL,
    signal_id     TEXT    NOT NULL,
    target_kind   TEXT    NOT NULL,
    target_id     TEXT    NOT NULL,
    tenant        TEXT    NOT NULL,
    kind          TEXT    NOT NULL CHECK (kind IN ('command', 'event', 'catch_up')),
    status        TEXT    NOT NULL CHECK (status IN ('to_deliver', 'delivered', 'to_catch_up')),
    received_at   BIGINT  NOT NULL,
    deliver_after BIGINT,
    expires_at    BIGINT,
    keep_until    BIGINT,
    attempts      INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT,
    payload       BLOB    NOT NULL,
    payload_type  TEXT    NOT NULL,
    metadata      TEXT    NOT NULL DEFAULT '{}'
);

INSERT INTO inbox_messages (seq, shard, signal_id, target_kind, target_id, tenant, kind, status,
                            received_at, deliver_after, expires_at, keep_until, attempts,
                            last_error, payload, payload_type, metadata)
SELECT seq, shard, signal_id, target_kind, target_id, tenant, kind,
       CASE status WHEN 'blocked' THEN 'to_deliver' ELSE status END, received_at,
       deliver_after, expires_at, keep_until, attempts, last_error, payload, payload_type,
       metadata
FROM inbox_messages_v2;

INSERT INTO sqlite_sequence (name, seq)
SELECT 'inbox_messages', seq FROM sqlite_sequence
WHERE name = 'inbox_messages_v2'
  AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'inbox_messages');
UPDATE sqlite_sequence
SET seq = MAX(seq, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'inbox_messages_v2'), 0))
WHERE name = 'inbox_messages';

DROP TABLE inbox_messages_v2;

CREATE UNIQUE INDEX inbox_dedup ON inbox_messages (tenant, target_kind, target_id, signal_id);
CREATE INDEX inbox_due ON inbox_messages (shard, status, seq);
CREATE INDEX inbox_purge ON inbox_messages (shard, keep_until) WHERE keep_until IS NOT NULL;
CREATE INDEX inbox_retrying ON inbox_messages (shard, seq)
    WHERE attempts > 0 AND status <> 'delivered';
CREATE INDEX inbox_delayed ON inbox_messages (shard, deliver_after)
    WHERE deliver_after IS NOT NULL AND status <> 'delivered';
