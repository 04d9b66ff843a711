ALTER TABLE inbox_messages DROP CONSTRAINT inbox_dedup;
ALTER TABLE inbox_messages
    ADD CONSTRAINT inbox_dedup UNIQUE (tenant, target_kind, target_id, signal_id);
DROP INDEX inbox_catching_up;
DROP INDEX inbox_blocked_by_shard;
DROP INDEX inbox_immediate;
CREATE INDEX inbox_immediate ON inbox_messages (shard, status, seq) WHERE deliver_after IS NULL;
CREATE INDEX inbox_due ON inbox_messages (shard, status, seq);
