DROP INDEX inbox_dedup;
CREATE UNIQUE INDEX inbox_dedup ON inbox_messages (tenant, target_kind, target_id, signal_id);
DROP INDEX inbox_catching_up;
DROP INDEX inbox_blocked_by_shard;
DROP INDEX inbox_immediate;
CREATE INDEX inbox_immediate ON inbox_messages (shard, status, seq) WHERE deliver_after IS NULL;
CREATE INDEX inbox_due ON inbox_messages (shard, status, seq);
