-- Back to a table whose rowid is seq (AUTOINCREMENT), counting on from the same high-water
-- mark.
ALTER TABLE inbox_messages RENAME TO inbox_messages_v5;

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
                            last_error, payload, payload_type, metadata, first_failed_at)
SELECT seq, shard, signal_id, target_kind, target_id, tenant, kind, status, received_at,
       deliver_after, expires_at, keep_until, attempts, last_error, payload, payload_type,
       metadata, first_failed_at
FROM inbox_messages_v5
ORDER BY seq;

-- The AUTOINCREMENT counter continues from the sequence.
INSERT INTO sqlite_sequence (name, seq)
SELECT 'inbox_messages', 0
WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'inbox_messages');
UPDATE sqlite_sequence
SET seq = MAX(seq, (SELECT last FROM inbox_sequence))
WHERE name = 'inbox_messages';

DROP TABLE inbox_messages_v5;
DROP TABLE inbox_sequence;

CREATE UNIQUE INDEX inbox_dedup ON inbox_messages (signal_id, tenant, target_kind, target_id);
CREATE INDEX inbox_immediate ON inbox_messages (shard, seq)
    WHERE deliver_after IS NULL AND status <> 'delivered';
CREATE INDEX inbox_purge ON inbox_messages (shard, keep_until) WHERE keep_until IS NOT NULL;
CREATE INDEX inbox_retrying ON inbox_messages (shard, seq)
    WHERE attempts > 0 AND status <> 'delivered';
CREATE INDEX inbox_delayed ON inbox_messages (shard, deliver_after)
    WHERE deliver_after IS NOT NULL AND status <> 'delivered';
CREATE INDEX inbox_blocked ON inbox_messages (tenant, target_kind, target_id)
    WHERE status = 'blocked';
CREATE INDEX inbox_blocked_by_shard ON inbox_messages (shard, seq) WHERE status = 'blocked';
CREATE INDEX inbox_catching_up ON inbox_messages (shard, target_kind, tenant)
    WHERE status = 'to_catch_up';
CREATE INDEX inbox_expiring ON inbox_messages (expires_at)
    WHERE expires_at IS NOT NULL AND status <> 'delivered';
