-- Shardbox schema, SQLite. Times are INTEGER microseconds since the Unix epoch (UTC).

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
-- A second write of a signal to the same target of the same tenant is a duplicate.
CREATE UNIQUE INDEX inbox_dedup ON inbox_messages (tenant, target_kind, target_id, signal_id);
-- Due pages: one range per (shard, status), already in seq order.
CREATE INDEX inbox_due ON inbox_messages (shard, status, seq);
-- Purge of delivered rows whose dedup window passed (only delivered rows have keep_until).
CREATE INDEX inbox_purge ON inbox_messages (shard, keep_until) WHERE keep_until IS NOT NULL;
-- Targets waiting behind a failed message: few rows, only those that failed, in seq order.
CREATE INDEX inbox_retrying ON inbox_messages (shard, seq)
    WHERE attempts > 0 AND status <> 'delivered';
-- The next delayed, held or backed-off row of a shard.
CREATE INDEX inbox_delayed ON inbox_messages (shard, deliver_after)
    WHERE deliver_after IS NOT NULL AND status <> 'delivered';

CREATE TABLE shard_sessions (
    shard       INTEGER PRIMARY KEY,
    node_id     TEXT,
    worker_id   BIGINT,
    epoch       BIGINT NOT NULL DEFAULT 0,
    picked_at   BIGINT,
    lease_until BIGINT
);

CREATE TABLE events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT   NOT NULL UNIQUE,
    event_type  TEXT   NOT NULL,
    source_kind TEXT   NOT NULL,
    source_id   TEXT   NOT NULL,
    tenant      TEXT   NOT NULL,
    occurred_at BIGINT NOT NULL,
    payload     BLOB   NOT NULL,
    metadata    TEXT   NOT NULL DEFAULT '{}'
);
-- Catch-up replays one projection's event types in seq order.
CREATE INDEX events_by_type ON events (event_type, seq);

CREATE TABLE entity_states (
    kind       TEXT   NOT NULL,
    tenant     TEXT   NOT NULL,
    id         TEXT   NOT NULL,
    version    BIGINT NOT NULL,
    state      BLOB   NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (kind, tenant, id)
);

CREATE TABLE catch_ups (
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
CREATE INDEX catch_ups_running ON catch_ups (projection_kind, tenant, status);

CREATE TABLE dead_letters (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    original_seq     BIGINT  NOT NULL,
    shard            INTEGER NOT NULL,
    tenant           TEXT    NOT NULL,
    target_kind      TEXT    NOT NULL,
    target_id        TEXT    NOT NULL,
    signal_id        TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    status           TEXT    NOT NULL,
    received_at      BIGINT  NOT NULL,
    deliver_after    BIGINT,
    expires_at       BIGINT,
    keep_until       BIGINT,
    row_attempts     INTEGER NOT NULL,
    row_last_error   TEXT,
    attempts         INTEGER NOT NULL,
    reason           TEXT    NOT NULL,
    first_attempt_at BIGINT,
    last_attempt_at  BIGINT  NOT NULL,
    payload          BLOB    NOT NULL,
    payload_type     TEXT    NOT NULL,
    metadata         TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX dead_letters_by_target ON dead_letters (tenant, target_kind, target_id);
