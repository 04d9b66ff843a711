-- What became of each command a stage settled (handled with its emitted event ids, dead-
-- lettered, dropped, blocked, expired), kept until keep_until (the deduplication window) so
-- that its sender can ask. One row per dedup key; a requeued message decided again replaces
-- its row. Purged by shard with the delivered rows (index on shard, keep_until).
CREATE TABLE command_outcomes (
    tenant TEXT NOT NULL,
    target_kind TEXT NOT NULL,
    target_id TEXT NOT NULL,
    signal_id TEXT NOT NULL,
    shard INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    detail TEXT,
    event_ids TEXT NOT NULL,
    decided_at BIGINT NOT NULL,
    keep_until BIGINT NOT NULL,
    PRIMARY KEY (tenant, target_kind, target_id, signal_id)
);
CREATE INDEX command_outcomes_purge ON command_outcomes (shard, keep_until);
