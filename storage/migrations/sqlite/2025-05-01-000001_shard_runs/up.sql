-- A write stores its inbox rows shard by shard. A page reads, and its commit marks delivered,
-- rows of one shard; when a write of many shards' rows lays them out in the order they came
-- (16 shards: a shard's rows one in every 16), a page's commit rewrites about one table page
-- per one or two of its rows (90 pages for a page of 180 rows), all inside the single
-- writer's lock. Stored shard by shard, each write's rows of a shard share a page or two.
--
-- seq keeps its meaning: one counter over all shards, in the order the rows were written, and
-- no longer the rowid (the place in the table). The writer draws a block of seqs from
-- inbox_sequence in the same write transaction as the rows (writers are serialised, so blocks
-- are drawn in commit order), gives them out in the write's order, and inserts the rows
-- sorted by shard. inbox_sequence starts from the old table's high-water mark, deleted rows
-- included, so no seq is ever given twice.

CREATE TABLE inbox_sequence (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last BIGINT  NOT NULL
);

ALTER TABLE inbox_messages RENAME TO inbox_messages_v4;

CREATE TABLE inbox_messages (
    seq             INTEGER NOT NULL,
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
FROM inbox_messages_v4
ORDER BY seq;

-- The high-water mark: the AUTOINCREMENT counter (which remembers deleted rows), or the
-- largest seq left if that is larger.
INSERT INTO inbox_sequence (id, last)
SELECT 1, MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'inbox_messages_v4'), 0),
              COALESCE((SELECT MAX(seq) FROM inbox_messages), 0));

DROP TABLE inbox_messages_v4;

-- A row by its seq (a page's commit, operators, catch-up, dead letters, purge).
CREATE UNIQUE INDEX inbox_seq ON inbox_messages (seq);
-- The indexes of the earlier migrations, on the new table.
CREATE UNIQUE INDEX inbox_dedup ON inbox_messages (signal_id, tenant, target_kind, target_id);
CREATE INDEX inbox_immediate ON inbox_messages (shard, seq)
    WHERE deliver_after IS NULL AND status <> 'delivered';
-- seq is no longer the rowid that every index entry carries: the purge, which takes the rows
-- of a shard past their window in (keep_until, seq) order, finds it in its index.
CREATE INDEX inbox_purge ON inbox_messages (shard, keep_until, seq) WHERE keep_until IS NOT NULL;
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
